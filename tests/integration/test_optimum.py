"""Assisted generation with optimum 1.11.2: ONNX Runtime models and BetterTransformer.

**ONNX Runtime.** `ORTModelForCausalLM` is a `GenerationMixin` subclass of another library (not a
`PreTrainedModel`), exported here from a tiny GPT-2 and its draft with `torch.onnx.export(..., dynamo=False)`, the
exporter of optimum 1.11's time (torch's default now needs onnxscript). Exported with a cache (`use_cache=True`),
its with-past graph takes one new token at a time, so it cannot verify candidates on its cache: as the model it is
refused before its first forward pass, with that reason; as the assistant it drafts without a cache. Exported without
one, it takes part as the model and as the assistant. Stock 4.31.0 crashes inside optimum in every case.

**BetterTransformer.** Every generation class of a model type that optimum 1.11.2 converts
(`BetterTransformerManager.MODEL_MAPPING`), converted as the model, as the assistant, both, and as its own assistant,
for one prompt and a batch. For a single sequence, the converted attention of some decoder-only architectures masks
several new tokens on top of a cache from the start of the cache (optimum's `is_causal=True`), so verifying
candidates on it returns other tokens than greedy search (on stock too). Contract: equal to greedy generation of the
converted model, or refused, and refused only where the converted model really scores several new tokens on a cache
otherwise than without one (checked here on the prompt itself). Classes that optimum cannot convert, or whose
converted greedy search fails already, are skipped with that reason.

Skipped where optimum or onnxruntime is not installed (`requirements-integration.txt`). On the CPU only (the
exported graphs run on onnxruntime's CPU provider; the converted models are compared on the CPU too).
"""

import copy
import functools

import pytest
import torch
import transformers
from transformers import GPT2LMHeadModel
from transformers.models.auto import modeling_auto

from integration._common import assert_same_tokens, run
from support.batches import ROWS, batched_inputs
from support.tiny_models import draft_model, generation_inputs, tiny_model

pytest.importorskip("optimum", reason="optimum is not installed (requirements-integration.txt)")

# ---- ONNX Runtime ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{(name, use_cache): directory} of the ONNX exports of a tiny GPT-2 ("model") and its draft ("draft")."""
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (requirements-integration.txt)")
    from optimum.onnxruntime import ORTModelForCausalLM

    root = tmp_path_factory.mktemp("ort")
    target = tiny_model(GPT2LMHeadModel, seed=0, device="cpu")
    models = {"model": target, "draft": draft_model(target, device="cpu")}
    directories = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.onnx, "export", functools.partial(torch.onnx.export, dynamo=False))
        for name, model in models.items():
            model.save_pretrained(root / name)
            for use_cache in (False, True):
                exported_model = ORTModelForCausalLM.from_pretrained(
                    root / name, export=True, use_cache=use_cache, use_io_binding=False
                )
                directories[name, use_cache] = root / f"{name}-ort-{use_cache}"
                exported_model.save_pretrained(directories[name, use_cache])
    return models, directories


def _ort(exported, name, use_cache):
    from optimum.onnxruntime import ORTModelForCausalLM

    _, directories = exported
    return ORTModelForCausalLM.from_pretrained(directories[name, use_cache], use_cache=use_cache, use_io_binding=False)


def _ort_inputs(model, batch_size):
    inputs = generation_inputs(model, "plain", device="cpu")
    return inputs if batch_size == 1 else batched_inputs(model, inputs)


@pytest.mark.parametrize("batch_size", [1, ROWS])
@pytest.mark.parametrize("exported_as", ["model", "assistant", "both"])
def test_ort_without_cache(exported, exported_as, batch_size):
    models, _ = exported
    target, assistant = models["model"], models["draft"]
    if exported_as in ("model", "both"):
        target = _ort(exported, "model", use_cache=False)
    if exported_as in ("assistant", "both"):
        assistant = _ort(exported, "draft", use_cache=False)
    inputs = _ort_inputs(models["model"], batch_size)
    assert_same_tokens(run(target, **inputs), run(target, assistant, **inputs), f"(exported {exported_as})")


@pytest.mark.parametrize("batch_size", [1, ROWS])
def test_ort_with_cache_as_assistant(exported, batch_size):
    models, _ = exported
    inputs = _ort_inputs(models["model"], batch_size)
    assistant = _ort(exported, "draft", use_cache=True)
    assert_same_tokens(run(models["model"], **inputs), run(models["model"], assistant, **inputs))


@pytest.mark.parametrize("assistant", ["pytorch", "exported"])
def test_ort_with_cache_as_model_is_refused_before_its_first_forward(exported, assistant, monkeypatch):
    models, _ = exported
    target = _ort(exported, "model", use_cache=True)
    helper = models["draft"] if assistant == "pytorch" else _ort(exported, "draft", use_cache=True)
    calls = []
    forward = target.forward

    @functools.wraps(forward)
    def counted_forward(*args, **kwargs):
        calls.append(1)
        return forward(*args, **kwargs)

    monkeypatch.setattr(target, "forward", counted_forward)
    inputs = _ort_inputs(models["model"], 1)
    with pytest.raises(ValueError, match="ORTModelForCausalLM: it is not a `PreTrainedModel`"):
        run(target, helper, **inputs)
    assert not calls, "the model ran a forward pass before it was refused"


# ---- BetterTransformer ----------------------------------------------------------------------------------------------


def _bettertransformer_classes():
    try:
        from optimum.bettertransformer.models import BetterTransformerManager
    except ImportError:
        return []
    names = []
    mappings = (
        modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
        modeling_auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES,
    )
    for model_type in sorted(BetterTransformerManager.MODEL_MAPPING):
        for mapping in mappings:
            name = mapping.get(model_type.replace("-", "_")) or mapping.get(model_type)
            if name and name not in names:
                names.append(name)
    return names


def _converted(model):
    from optimum.bettertransformer import BetterTransformer

    return BetterTransformer.transform(copy.deepcopy(model), keep_original_model=False)


def _scores_cached_tokens_as_uncached(model, input_ids):
    """Whether the decoder-only `model` scores the last three tokens of `input_ids` on a cache of the others as
    without a cache (one sequence)."""
    with torch.no_grad():
        uncached = model(input_ids=input_ids).logits[:, -3:]
        cache = model(input_ids=input_ids[:, :-3], use_cache=True).past_key_values
        cached = model(input_ids=input_ids[:, -3:], past_key_values=cache, use_cache=True).logits
    return bool((cached - uncached).abs().max() <= 1e-3 * uncached.abs().max())


@pytest.mark.parametrize("batch_size", [1, ROWS])
@pytest.mark.parametrize("name", _bettertransformer_classes())
def test_bettertransformer(name, batch_size):
    cls = getattr(transformers, name)
    target = tiny_model(cls, seed=0, device="cpu")
    draft = draft_model(target, device="cpu")
    try:
        converted_target, converted_draft = _converted(target), _converted(draft)
    except Exception as error:  # noqa: BLE001 - optimum's own refusal or failure to convert
        pytest.skip(f"optimum 1.11.2 cannot convert {name}: {error}")
    inputs = generation_inputs(target, "plain", device="cpu")
    if batch_size > 1:
        inputs = batched_inputs(target, inputs)
    try:
        greedy = run(converted_target, **inputs)
    except Exception as error:  # noqa: BLE001
        pytest.skip(f"greedy search of the converted {name} fails already: {type(error).__name__}: {error}")
    scores_right = target.config.is_encoder_decoder or _scores_cached_tokens_as_uncached(
        converted_target, inputs["input_ids"][:1]
    )
    pairs = {
        "converted-model": (converted_target, draft),
        "converted-assistant": (target, converted_draft),
        "converted-both": (converted_target, converted_draft),
        "converted-self": (converted_target, converted_target),
    }
    for pair, (model, assistant) in pairs.items():
        reference = greedy if model is converted_target else run(target, **inputs)
        try:
            assisted = run(model, assistant, **inputs)
        except ValueError as error:
            assert "not supported by" in str(error), f"({pair}) not a clear refusal: {error}"
            if "BetterTransformer" in str(error):
                assert (
                    model is converted_target and batch_size == 1 and not scores_right
                ), f"({pair}) refused although its converted attention scores cached tokens right: {error}"
            continue
        assert_same_tokens(reference, assisted, f"({pair})")


@pytest.mark.parametrize("name", ["GPT2LMHeadModel", "OPTForCausalLM", "LlamaForCausalLM"])
def test_bettertransformer_wrong_cache_attention_is_refused_for_one_sequence(name):
    """The architectures whose converted attention masks a cache wrongly for one sequence: refused then, with the
    reason, and equal to greedy search for a batch."""
    target = tiny_model(getattr(transformers, name), seed=0, device="cpu")
    converted = _converted(target)
    inputs = generation_inputs(target, "plain", device="cpu")
    assert not _scores_cached_tokens_as_uncached(converted, inputs["input_ids"])
    with pytest.raises(ValueError, match="BetterTransformer attention"):
        run(converted, draft_model(target, device="cpu"), **inputs)
    batch = batched_inputs(target, inputs)
    assert_same_tokens(run(converted, **batch), run(converted, draft_model(target, device="cpu"), **batch))
