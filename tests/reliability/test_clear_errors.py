"""Bad input to assisted generation gets a clear error, and leaves both models as they were.

Every check asserts the exception type, that the message says what is wrong and what to do, and that neither the
target nor the assistant changed (weights, configs, generation configs, mode, draft-length attribute).
"""

import math

import pytest
import torch
import transformers

from reliability._helpers import DEVICE, fresh_model, get_model, snapshot
from support.assistants import reset_assistant

transformers.logging.set_verbosity_error()

UNSUPPORTED_PREFIX = "Assisted generation is not supported by"

# Classes whose cache cannot be cropped, or that return no cache at all (their forward takes no
# `past_key_values`), or whose decoder accepts one new token at a time.
UNSUPPORTED_DECODER_ONLY = [
    "RwkvForCausalLM",
    "ReformerModelWithLMHead",
    "XLNetLMHeadModel",
    "TransfoXLLMHeadModel",
    "MegaForCausalLM",
    "ProphetNetForCausalLM",
    "XLMProphetNetForCausalLM",
    "OpenAIGPTLMHeadModel",
    "XLMWithLMHeadModel",
    "FlaubertWithLMHeadModel",
    "BertForMaskedLM",
    "RoFormerForMaskedLM",
    "BigBirdForMaskedLM",
]
UNSUPPORTED_ENCODER_DECODER = ["ProphetNetForConditionalGeneration", "XLMProphetNetForConditionalGeneration"]


def _target(encoder_decoder=False):
    return get_model("BartForConditionalGeneration" if encoder_decoder else "GPT2LMHeadModel")


def _assistant(encoder_decoder=False):
    return get_model("BartForConditionalGeneration" if encoder_decoder else "GPT2LMHeadModel", seed=1, assistant=True)


def _prompt(length=6, batch=1, model=None):
    device = model.device if model is not None else DEVICE
    generator = torch.Generator().manual_seed(length * 31 + batch)
    return torch.randint(5, 90, (batch, length), generator=generator).to(device)


def _assert_clear(message, what, todo):
    """`what`: words naming the problem; `todo`: alternatives, one of which must appear (the remedy)."""
    lowered = message.lower()
    missing = [word for word in what if word.lower() not in lowered]
    assert not missing, f"the message does not say what is wrong (missing {missing}): {message!r}"
    assert any(
        option.lower() in lowered for option in todo
    ), f"the message does not say what to do (none of {todo}): {message!r}"


class _Unchanged:
    """Asserts that the models are unchanged when the block exits (also when it raises)."""

    def __init__(self, *models):
        self.models = models

    def __enter__(self):
        self.before = [snapshot(model) for model in self.models]
        return self

    def __exit__(self, *exc_info):
        after = [snapshot(model) for model in self.models]
        for model, old, new in zip(self.models, self.before, after, strict=True):
            changed = {key: (old[key], new[key]) for key in old if old[key] != new[key] and key != "config"}
            changed.update({"config": "(differs)"} if old["config"] != new["config"] else {})
            changed.update({"generation_config": "(differs)"} if "generation_config" in changed else {})
            assert not changed, f"{type(model).__name__} changed: {changed}"
        return False


def _generate_error(target, assistant, **kwargs):
    inputs = kwargs.pop("inputs", None)
    if inputs is None:
        inputs = {"input_ids": _prompt(model=target)}
    with _Unchanged(target, assistant), torch.no_grad():
        with pytest.raises(ValueError) as raised:
            target.generate(**inputs, assistant_model=assistant, **kwargs)
    return str(raised.value)


def _greedy_and_assisted(target, assistant, **kwargs):
    with torch.no_grad():
        greedy = target.generate(**kwargs, do_sample=False)
        assisted = target.generate(**kwargs, do_sample=False, assistant_model=assistant)
    return greedy.tolist(), assisted.tolist()


# ---- an assistant that does not fit the target ---------------------------------------------------------------------


@pytest.mark.parametrize("encoder_decoder", [False, True], ids=["decoder-only", "encoder-decoder"])
@pytest.mark.parametrize("delta", [-7, 5])
def test_assistant_with_another_vocabulary_size(encoder_decoder, delta):
    """Models sharing a tokenizer may differ in embedding rows (Pythia: 50304 and 50432). Assisted generation returns
    greedy's tokens, or, when a token one of the models cannot embed comes up, refuses it where it happens (after the
    model has run) with a message naming both sizes; never up front, never with a traceback from inside a model.

    Fails on the series that refuses every such pair up front, and on stock where an id out of range reaches an
    embedding (IndexError). tests/integration/test_vocabulary_sizes.py checks both outcomes deterministically."""
    target = _target(encoder_decoder)
    target_vocab = target.config.vocab_size
    assistant = get_model(type(target).__name__, seed=1, assistant=True, vocab_size=target_vocab + delta)
    input_ids = _prompt(model=target)
    with torch.no_grad():
        greedy = target.generate(input_ids, max_new_tokens=8, do_sample=False)
    forward_calls = []
    handle = target.register_forward_pre_hook(lambda *args: forward_calls.append(1))
    try:
        with torch.no_grad():
            assisted = target.generate(input_ids, max_new_tokens=8, do_sample=False, assistant_model=assistant)
    except ValueError as error:
        assert forward_calls, f"the pair was refused before the model ran: {error}"
        _assert_clear(
            str(error),
            what=[str(target_vocab), str(target_vocab + delta)],
            todo=["same tokenizer", "same vocabulary", "without `assistant_model`", "another"],
        )
        return
    finally:
        handle.remove()
        reset_assistant(assistant)
    assert assisted.tolist() == greedy.tolist()


@pytest.mark.parametrize("encoder_decoder", [False, True], ids=["decoder-only-target", "encoder-decoder-target"])
def test_assistant_of_the_other_architecture_kind(encoder_decoder):
    """An encoder-decoder model with a decoder-only assistant over the same vocabulary (the distil-whisper shape),
    and the reverse: stock 4.31.0 runs both pairs, and so must the fork, with greedy's tokens. A decoder-only
    assistant drafts from the decoder's tokens; an encoder-decoder one reads the prompt with its encoder."""
    target = _target(encoder_decoder)
    assistant = _assistant(not encoder_decoder)
    try:
        greedy, assisted = _greedy_and_assisted(target, assistant, input_ids=_prompt(model=target), max_new_tokens=8)
    finally:
        reset_assistant(assistant)
    assert assisted == greedy


# ---- models that cannot take part ----------------------------------------------------------------------------------


# XLM and Flaubert name their width `emb_dim`, which the shared tiny configs leave at 2048 (a 100M-parameter model).
_CONFIG_OVERRIDES = {"XLMWithLMHeadModel": {"emb_dim": 32}, "FlaubertWithLMHeadModel": {"emb_dim": 32}}


def _unsupported(class_name):
    return get_model(class_name, **_CONFIG_OVERRIDES.get(class_name, {}))


def _assert_unsupported(message, class_name, is_assistant):
    assert message.startswith(f"{UNSUPPORTED_PREFIX} {class_name}: "), message
    reason = message[len(f"{UNSUPPORTED_PREFIX} {class_name}: ") :]
    _assert_clear(
        reason,
        what=["cache"],
        todo=["another `assistant_model`", "another assistant"] if is_assistant else ["without `assistant_model`"],
    )


@pytest.mark.parametrize("class_name", UNSUPPORTED_DECODER_ONLY + UNSUPPORTED_ENCODER_DECODER)
def test_unsupported_model_as_target(class_name):
    target = _unsupported(class_name)
    assistant = _assistant(target.config.is_encoder_decoder)
    inputs = {"input_ids": _prompt(model=target)}
    if "Reformer" in class_name:
        # Reformer's local attention works on chunks of 4 tokens; its generation takes any length anyway
        inputs = {"input_ids": _prompt(8, model=target)}
    message = _generate_error(target, assistant, inputs=inputs, max_new_tokens=4)
    _assert_unsupported(message, class_name, is_assistant=False)


@pytest.mark.parametrize("class_name", UNSUPPORTED_DECODER_ONLY + UNSUPPORTED_ENCODER_DECODER)
def test_unsupported_model_as_assistant(class_name):
    assistant = _unsupported(class_name)
    target = _target(assistant.config.is_encoder_decoder)
    message = _generate_error(target, assistant, max_new_tokens=4)
    _assert_unsupported(message, class_name, is_assistant=True)


# ---- inputs assisted generation does not handle --------------------------------------------------------------------


def test_batch_size_above_one_equals_batched_greedy():
    """Batches are supported (the batching patch): row for row the tokens of batched greedy search, with left padding.
    Fails on the series without it and on v4.31.0, which refuse a batch."""
    target, assistant = _target(), _assistant()
    input_ids = _prompt(batch=2, model=target)
    attention_mask = torch.ones(2, 6, dtype=torch.long)
    attention_mask[1, :2] = 0
    greedy, assisted = _greedy_and_assisted(
        target, assistant, input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=6
    )
    assert assisted == greedy


def test_num_return_sequences_above_one_without_sampling():
    """Several sequences per prompt need sampling, as in plain generation: greedy search returns one."""
    target, assistant = _target(), _assistant()
    message = _generate_error(target, assistant, max_new_tokens=4, num_return_sequences=3)
    _assert_clear(message, what=["num_return_sequences", "3"], todo=["do_sample=True"])


def test_use_cache_false():
    target, assistant = _target(), _assistant()
    message = _generate_error(target, assistant, max_new_tokens=4, use_cache=False)
    _assert_clear(message, what=["use_cache"], todo=["use_cache=True"])


def test_beam_search():
    target, assistant = _target(), _assistant()
    message = _generate_error(target, assistant, max_new_tokens=4, num_beams=2)
    _assert_clear(message, what=["assist"], todo=["greedy search and sampling", "num_beams=1"])


# ---- devices -------------------------------------------------------------------------------------------------------


def _other_devices():
    devices = ["meta"]  # a device no tensor can be exchanged with: only a clear error is acceptable
    if torch.cuda.is_available():
        devices.append("cpu" if DEVICE == "cuda" else "cuda")
    return devices


@pytest.mark.parametrize("other_device", _other_devices())
@pytest.mark.parametrize("moved", ["assistant", "target"])
def test_models_on_different_devices(other_device, moved):
    target = fresh_model("GPT2LMHeadModel")
    assistant = fresh_model("GPT2LMHeadModel", seed=1, assistant=True)
    expected = None
    if other_device != "meta":
        # Where both devices compute, handling the pair is as good as refusing it.
        expected = _greedy_and_assisted(target, assistant, input_ids=_prompt(model=target), max_new_tokens=8)[0]
    (assistant if moved == "assistant" else target).to(other_device)
    input_ids = _prompt(model=target)
    try:
        with torch.no_grad():
            output = target.generate(input_ids, max_new_tokens=8, do_sample=False, assistant_model=assistant)
    except ValueError as error:
        _assert_clear(str(error), what=["device"], todo=[".to(", "same device", "move", "put"])
        return
    except Exception as error:  # noqa: B902 - anything else is a traceback from inside a model
        pytest.fail(f"assisted generation across devices failed with {type(error).__name__}: {error}")
    assert other_device != "meta", "a model on the meta device cannot generate, the fork should have said so"
    assert output.tolist() == expected


# ---- lengths -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoder_decoder", [False, True], ids=["decoder-only", "encoder-decoder"])
@pytest.mark.parametrize("room", [0, -2], ids=["prompt-at-max_length", "prompt-beyond-max_length"])
def test_prompt_already_at_max_length(encoder_decoder, room):
    """Greedy search still adds one token to a prompt at (or beyond) `max_length`; assisted generation must do the
    same, or refuse with a message about the length."""
    target, assistant = _target(encoder_decoder), _assistant(encoder_decoder)
    input_ids = _prompt(6, model=target)
    if encoder_decoder:
        decoder_input_ids = torch.tensor([[target.config.decoder_start_token_id, 7, 8, 9, 10, 11]], device=DEVICE)
        inputs = {"input_ids": input_ids, "decoder_input_ids": decoder_input_ids}
    else:
        inputs = {"input_ids": input_ids}
    max_length = 6 + room
    with torch.no_grad():
        greedy = target.generate(**inputs, max_length=max_length, do_sample=False)
        before = snapshot(assistant)
        try:
            assisted = target.generate(**inputs, max_length=max_length, do_sample=False, assistant_model=assistant)
        except ValueError as error:
            _assert_clear(str(error), what=["max_length"], todo=["max_new_tokens", "increase", "raise", "shorter"])
            assert snapshot(assistant) == before
            return
        finally:
            reset_assistant(assistant)
    assert assisted.tolist() == greedy.tolist()


# ---- state after errors --------------------------------------------------------------------------------------------


def _draft_length_is_sane(assistant):
    value = getattr(assistant, "max_assistant_tokens", None)
    return value is None or (isinstance(value, (int, float)) and math.isfinite(value) and value >= 1)


class _FailingCriteria(transformers.StoppingCriteria):
    """A stopping criterion that raises on its n-th call: an exception in the middle of assisted decoding."""

    def __init__(self, fail_at):
        self.calls = 0
        self.fail_at = fail_at

    def __call__(self, input_ids, scores, **kwargs):
        self.calls += 1
        if self.calls >= self.fail_at:
            raise RuntimeError("interrupted on purpose")
        return False


@pytest.mark.parametrize("encoder_decoder", [False, True], ids=["decoder-only", "encoder-decoder"])
def test_models_usable_after_errors(encoder_decoder):
    """Errors before and in the middle of assisted decoding leave a sane draft length, and the next assisted call
    gives greedy's tokens."""
    target, assistant = _target(encoder_decoder), _assistant(encoder_decoder)
    input_ids = _prompt(5, model=target)
    assistant.max_assistant_tokens = 7.0
    try:
        with _Unchanged(target, assistant), torch.no_grad():
            with pytest.raises(ValueError):
                target.generate(input_ids, max_new_tokens=5, assistant_model=assistant, use_cache=False)
            with pytest.raises(ValueError):
                target.generate(input_ids, max_new_tokens=5, num_return_sequences=2, assistant_model=assistant)
        assert assistant.max_assistant_tokens == 7.0

        with torch.no_grad(), pytest.raises(RuntimeError, match="interrupted on purpose"):
            target.generate(
                input_ids,
                max_new_tokens=20,
                assistant_model=assistant,
                stopping_criteria=transformers.StoppingCriteriaList([_FailingCriteria(fail_at=3)]),
            )
        assert _draft_length_is_sane(assistant), assistant.max_assistant_tokens

        greedy, assisted = _greedy_and_assisted(target, assistant, input_ids=input_ids, max_new_tokens=12)
        assert assisted == greedy
        assert _draft_length_is_sane(assistant), assistant.max_assistant_tokens
    finally:
        reset_assistant(assistant)  # the cached assistant starts the next test from the default


def test_bark_semantic_generate_refuses_an_assistant():
    """Bark's semantic model is prompted by its own `generate` with `input_embeds` built from its embedding layer,
    which an assistant cannot share (stock 4.31.0 dropped them in assisted decoding and returned other tokens). Through
    the generation mixin, with `input_ids`, it is supported like every other causal model."""
    from transformers.models.bark.generation_configuration_bark import BarkSemanticGenerationConfig

    target = get_model("BarkSemanticModel")
    config = BarkSemanticGenerationConfig(semantic_vocab_size=target.config.output_vocab_size)
    with torch.no_grad(), pytest.raises(ValueError) as raised:
        target.generate(
            torch.ones((1, 4), dtype=torch.long), semantic_generation_config=config, assistant_model=target
        )
    message = str(raised.value)
    assert message.startswith(f"{UNSUPPORTED_PREFIX} BarkSemanticModel: "), message
    _assert_clear(message, what=["input_embeds"], todo=["without `assistant_model`"])
    assert not hasattr(target, "max_assistant_tokens")


@pytest.mark.parametrize("source", ["assistant", "lookup"])
@pytest.mark.parametrize("class_name", ["LlamaForCausalLM", "GPTNeoXForCausalLM", "OpenLlamaForCausalLM"])
def test_dynamic_rotary_scaling_past_max_position_embeddings(class_name, source):
    """Dynamic rotary scaling takes its base from the length of each forward pass past `max_position_embeddings`: a
    pass over several candidates rotates them otherwise than greedy search's one-token passes (outputs differed). A
    call that can go past it is refused before any forward pass, naming `rope_scaling` and what to do; a call that
    stays within it runs, equal to greedy search."""
    from support.tiny_models import tiny_model

    cls = getattr(transformers, class_name)
    overrides = {"max_position_embeddings": 24, "rope_scaling": {"type": "dynamic", "factor": 2.0}}
    if class_name == "GPTNeoXForCausalLM":
        overrides["rotary_pct"] = 1.0  # a tiny head's default share is too small for dynamic scaling
    model = tiny_model(cls, seed=0, **overrides)
    prompt = torch.tensor([[5, 9, 13, 17, 21, 25, 29, 33]], device=model.device)
    if source == "assistant":
        candidates = {"assistant_model": model, "num_assistant_tokens_schedule": "constant"}
    else:
        candidates = {"prompt_lookup_num_tokens": 3}
    kwargs = dict(do_sample=False, pad_token_id=0)
    calls = []
    handle = model.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        with pytest.raises(ValueError, match=r"rope_scaling=.*`max_position_embeddings` \(24\).*at most 24 tokens"):
            model.generate(prompt, max_new_tokens=20, **kwargs, **candidates)
    finally:
        handle.remove()
    assert not calls, "a forward pass ran before the refusal"
    greedy = model.generate(prompt, max_new_tokens=16, **kwargs)
    assert torch.equal(model.generate(prompt, max_new_tokens=16, **kwargs, **candidates), greedy)
