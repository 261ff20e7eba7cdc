"""Assisted generation with PEFT prompt learning (`peft==0.4.0`: prompt tuning, prefix tuning, p-tuning).

`PeftModel.generate` hands the generation to the base model with PEFT's `prepare_inputs_for_generation`, which puts
the virtual tokens in the first forward pass (as embeddings or as a prefix in the cache) and adds them to the
attention mask: the model's cache then holds more positions than its ids number. As the assistant, a `PeftModel`
(not a `PreTrainedModel`) has a training forward pass that adds the virtual tokens at every call.

Contract: equal to greedy generation of the PEFT model, with the PEFT model as the model, as the assistant, both,
and as its own assistant, for one prompt and a batch, with fewer and more virtual tokens than a round drafts.
Stock 4.31.0 returns the base model's tokens (it verifies without the virtual tokens) or crashes; the series before
the fix crashed. An encoder-decoder model tuned with prompt tuning or p-tuning is prompted with embeddings alone
(PEFT turns the ids into them): a decoder-only assistant takes part, an encoder-decoder one has nothing to encode
and is refused with that reason. Skipped where peft is not installed (`requirements-integration.txt`).
"""

import copy

import pytest
import torch
from transformers import GPT2LMHeadModel, T5ForConditionalGeneration

from integration._common import assert_same_tokens, captured_warnings, run
from support.batches import ROWS, batched_inputs
from support.tiny_models import draft_model, generation_inputs, tiny_model

peft = pytest.importorskip(
    "peft", reason="peft is not installed (pip install --no-deps -r requirements-integration.txt)"
)

KINDS = ["prompt_tuning", "prefix_tuning", "p_tuning"]
PAIRS = ["peft-model", "peft-assistant", "peft-both", "peft-self"]


def _prompt_learning(model, kind, task_type, num_virtual_tokens, seed=5):
    """The model wrapped for prompt learning, with wide random virtual tokens, so that they change its output."""
    config_class = {
        "prompt_tuning": peft.PromptTuningConfig,
        "prefix_tuning": peft.PrefixTuningConfig,
        "p_tuning": peft.PromptEncoderConfig,
    }[kind]
    kwargs = {"task_type": task_type, "num_virtual_tokens": num_virtual_tokens}
    if kind == "p_tuning":
        kwargs["encoder_hidden_size"] = 16
    torch.manual_seed(seed)
    wrapped = peft.get_peft_model(copy.deepcopy(model), config_class(**kwargs))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in wrapped.named_parameters():
            if "prompt_encoder" in name:
                values = torch.randn(parameter.shape, generator=generator) * (1.0 if parameter.dim() > 1 else 0.1)
                parameter.copy_(values.to(parameter.device, parameter.dtype))
    return wrapped.eval()


def _pair(model, draft, kind, task_type, pair, num_virtual_tokens):
    wrapped = _prompt_learning(model, kind, task_type, num_virtual_tokens)
    if pair == "peft-model":
        return wrapped, draft
    if pair == "peft-assistant":
        return model, _prompt_learning(draft, kind, task_type, num_virtual_tokens)
    if pair == "peft-both":
        return wrapped, _prompt_learning(draft, kind, task_type, num_virtual_tokens)
    return wrapped, wrapped


@pytest.mark.parametrize("batch_size", [1, ROWS])
@pytest.mark.parametrize("num_virtual_tokens", [1, 8])
@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("kind", KINDS)
def test_decoder_only(kind, pair, num_virtual_tokens, batch_size):
    base = tiny_model(GPT2LMHeadModel, seed=0)
    draft = draft_model(base)
    target, assistant = _pair(base, draft, kind, "CAUSAL_LM", pair, num_virtual_tokens)
    inputs = generation_inputs(base, "plain")
    if batch_size > 1:
        inputs = batched_inputs(base, inputs)
    greedy = run(target, **inputs)
    if pair != "peft-assistant":
        assert not torch.equal(greedy, run(base, **inputs)), "the virtual tokens change nothing: the test is void"
    with captured_warnings() as warnings:
        assisted = run(target, assistant, **inputs)
    assert_same_tokens(greedy, assisted, f"({kind}, {pair}, {num_virtual_tokens} virtual tokens)")
    # the virtual tokens are counted, not taken for a method written for one new token at a time
    assert not [message for message in warnings if "keeps fewer tokens" in message], warnings


@pytest.mark.parametrize("batch_size", [1, ROWS])
@pytest.mark.parametrize("pair", PAIRS)
def test_encoder_decoder_prefix_tuning(pair, batch_size):
    base = tiny_model(T5ForConditionalGeneration, seed=0)
    draft = draft_model(base)
    target, assistant = _pair(base, draft, "prefix_tuning", "SEQ_2_SEQ_LM", pair, 4)
    inputs = generation_inputs(base, "plain")
    if batch_size > 1:
        inputs = batched_inputs(base, inputs)
    assert_same_tokens(run(target, **inputs), run(target, assistant, **inputs), f"(prefix tuning, {pair})")


@pytest.mark.parametrize("kind", ["prompt_tuning", "p_tuning"])
def test_encoder_decoder_prompted_with_embeddings(kind):
    base = tiny_model(T5ForConditionalGeneration, seed=0)
    target = _prompt_learning(base, kind, "SEQ_2_SEQ_LM", 4)
    inputs = generation_inputs(base, "plain")
    greedy = run(target, **inputs)
    decoder_only = tiny_model(GPT2LMHeadModel, seed=3, assistant=True)
    assert_same_tokens(greedy, run(target, decoder_only, **inputs), f"({kind}, a decoder-only assistant)")
    for assistant in (draft_model(base), target):
        with pytest.raises(ValueError, match="nothing it can read"):
            run(target, assistant, **inputs)
