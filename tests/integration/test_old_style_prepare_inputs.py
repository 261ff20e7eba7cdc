"""Models whose `prepare_inputs_for_generation` was written the v4.31.0 way: given a cache, keep the last token only.

Every `trust_remote_code` model of that era (MPT, Falcon's and Baichuan's remote code...) and every user subclass that
overrides the method look like the classes below, which are defined here, outside the transformers tree, the way
remote code is. Stock 4.31.0 never called the method in assisted generation, so these models worked there; the
patch series feeds several candidate tokens through it and must complete what the method drops (the other
candidate tokens, their positions as the model derives them, token types and other per-token inputs), warning once
that it does so, instead of crashing deep in the model:

    RuntimeError: The size of tensor a (10) must match the size of tensor b (14) at non-singleton dimension 3

Where the inputs cannot be completed consistently, it must refuse with a clear ValueError before any forward pass.

What each test fails on:
- `test_old_style_equals_greedy[*-plain]`: the current series (the crash above; the encoder-decoder one is refused
  because its method "keeps only the last token when given a cache"); passes on stock.
- `test_old_style_equals_greedy[*-left_pad|token_type_ids|enc_mask]`: the current series (the crash), and stock
  (#25020: stock drops the padding, the token types and the encoder mask).
- `test_old_style_warns_once`: the current series (it crashes) and stock (no warning: it ignores the method).
- `test_inputs_embeds_only_is_refused`: the current series (deep size error) and stock (stock never calls the
  method, so it returns greedy's tokens: this refusal is the fix's contract, not stock behaviour).
"""

import pytest
import torch
from transformers import BartForConditionalGeneration, GPT2LMHeadModel, LlamaForCausalLM

from integration._common import ForwardCounter, assert_same_tokens, captured_warnings, run
from support.tiny_models import draft_model, generation_inputs, tiny_model

# ---- the old-style classes -----------------------------------------------------------------------------------------


def _positions_from_mask(attention_mask, past_key_values, position_ids):
    """v4.31.0's position ids for a left-padded batch: counted over the attended tokens; the last one with a cache."""
    if attention_mask is not None and position_ids is None:
        position_ids = attention_mask.long().cumsum(-1) - 1
        position_ids.masked_fill_(attention_mask == 0, 1)
        if past_key_values:
            position_ids = position_ids[:, -1].unsqueeze(-1)
    return position_ids


class OldStyleGPT2LMHeadModel(GPT2LMHeadModel):
    """GPT-2 with v4.31.0's method: the last token, its token type and its position once there is a cache."""

    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, **kwargs):
        token_type_ids = kwargs.get("token_type_ids")
        if past_key_values:
            input_ids = input_ids[:, -1].unsqueeze(-1)
            if token_type_ids is not None:
                token_type_ids = token_type_ids[:, -1].unsqueeze(-1)
        attention_mask = kwargs.get("attention_mask")
        position_ids = _positions_from_mask(attention_mask, past_key_values, kwargs.get("position_ids"))
        return {
            "input_ids": input_ids,
            "past_key_values": past_key_values,
            "use_cache": kwargs.get("use_cache"),
            "position_ids": position_ids,
            "attention_mask": attention_mask,
            "token_type_ids": token_type_ids,
        }


class OldStyleLlamaForCausalLM(LlamaForCausalLM):
    """A Llama-style remote-code model (Falcon's and Baichuan's look alike): the last token and its position."""

    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, attention_mask=None, **kwargs):
        if past_key_values:
            input_ids = input_ids[:, -1:]
        position_ids = _positions_from_mask(attention_mask, past_key_values, kwargs.get("position_ids"))
        return {
            "input_ids": input_ids,
            "position_ids": position_ids,
            "past_key_values": past_key_values,
            "use_cache": kwargs.get("use_cache"),
            "attention_mask": attention_mask,
        }


class OldStyleBartForConditionalGeneration(BartForConditionalGeneration):
    """An encoder-decoder model with v4.31.0's method: the last decoder token once there is a cache."""

    def prepare_inputs_for_generation(
        self, decoder_input_ids, past_key_values=None, attention_mask=None, encoder_outputs=None, **kwargs
    ):
        if past_key_values is not None:
            decoder_input_ids = decoder_input_ids[:, -1:]
        return {
            "input_ids": None,
            "encoder_outputs": encoder_outputs,
            "past_key_values": past_key_values,
            "decoder_input_ids": decoder_input_ids,
            "attention_mask": attention_mask,
            "use_cache": kwargs.get("use_cache"),
        }


class EmbedsOnlyGPT2LMHeadModel(GPT2LMHeadModel):
    """A model that embeds the tokens itself and passes `inputs_embeds` only: nothing tells which tokens they were, so
    the candidate tokens cannot be added to them. Greedy search works with it (one token at a time)."""

    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, attention_mask=None, **kwargs):
        if past_key_values:
            input_ids = input_ids[:, -1:]
        position_ids = _positions_from_mask(attention_mask, past_key_values, None)
        return {
            "inputs_embeds": self.transformer.wte(input_ids),
            "position_ids": position_ids,
            "past_key_values": past_key_values,
            "use_cache": kwargs.get("use_cache"),
            "attention_mask": attention_mask,
        }


class CachePositionsGPT2LMHeadModel(GPT2LMHeadModel):
    """Keeps the last token with a cache and numbers it by the cache length, giving no positions without a cache (the
    model then numbers the prompt itself): nothing without the cache says which positions the new tokens take, so
    the inputs of several new tokens cannot be completed."""

    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, **kwargs):
        position_ids = None
        if past_key_values:
            position_ids = torch.full_like(input_ids[:, -1:], past_key_values[0][0].shape[2])
            input_ids = input_ids[:, -1:]
        return {
            "input_ids": input_ids,
            "past_key_values": past_key_values,
            "use_cache": kwargs.get("use_cache"),
            "position_ids": position_ids,
        }


OLD_STYLE = {
    cls.__name__: cls
    for cls in (OldStyleGPT2LMHeadModel, OldStyleLlamaForCausalLM, OldStyleBartForConditionalGeneration)
}
SCENARIOS = {
    "OldStyleGPT2LMHeadModel": ["plain", "left_pad", "token_type_ids"],
    "OldStyleLlamaForCausalLM": ["plain", "left_pad"],
    "OldStyleBartForConditionalGeneration": ["plain", "enc_mask"],
}
_MODELS = {}


def _model(cls, seed=0, assistant=False):
    key = (cls, seed, assistant)
    if key not in _MODELS:
        _MODELS[key] = tiny_model(cls, seed=seed, assistant=assistant)
    return _MODELS[key]


def _assistants(cls, target):
    """An old-style draft (some candidates accepted), the model itself (all accepted) and a stock-class assistant
    (the base class: an old-style model assisted by a current one)."""
    draft_key = (cls, "draft")
    if draft_key not in _MODELS:
        _MODELS[draft_key] = draft_model(target)
    return [
        ("old-style draft", _MODELS[draft_key]),
        ("itself", target),
        ("stock-class", _model(cls.__bases__[0], seed=1, assistant=True)),
    ]


@pytest.mark.parametrize(
    "class_name, scenario",
    [pytest.param(name, s, id=f"{name}-{s}") for name, scenarios in SCENARIOS.items() for s in scenarios],
)
def test_old_style_equals_greedy(class_name, scenario):
    cls = OLD_STYLE[class_name]
    target = _model(cls)
    inputs = generation_inputs(target, scenario)
    greedy = run(target, **inputs)
    if scenario != "plain":
        other = run(target, **generation_inputs(target, scenario, variant=1))
        assert not torch.equal(other, greedy), f"the tiny model ignores the input of scenario {scenario}"
    for label, assistant in _assistants(cls, target):
        assert_same_tokens(greedy, run(target, assistant, **inputs), f"({label} assistant)")


@pytest.mark.parametrize(
    "base", [OldStyleGPT2LMHeadModel, OldStyleBartForConditionalGeneration], ids=lambda c: c.__name__
)
def test_old_style_warns_once(base):
    """One warning naming the class, not one per round; the second call may repeat it at most once. A class of
    its own, so that no other test has had the warning logged already."""
    cls = type(f"Remote{base.__name__}", (base,), {"__module__": __name__})
    target = tiny_model(cls, seed=0)
    assistant = tiny_model(base.__bases__[0], seed=1, assistant=True)
    inputs = generation_inputs(target, "plain")
    greedy = run(target, **inputs)
    with captured_warnings() as first:
        assisted = run(target, assistant, **inputs)
    assert_same_tokens(greedy, assisted)
    with captured_warnings() as second:
        run(target, assistant, **inputs)
    naming = [message for message in first if cls.__name__ in message]
    assert len(naming) == 1, f"expected one warning naming {cls.__name__}, got {naming} (all: {first})"
    assert len([message for message in second if cls.__name__ in message]) <= 1


def test_inputs_embeds_only_equals_greedy():
    """A method that embeds the tokens itself and returns `inputs_embeds` only, keeping the last token with a cache:
    stock 4.31.0 ignores `prepare_inputs_for_generation` in assisted decoding and returns greedy's tokens, so the
    series must too. The embeddings are completed like the ids, from what the method prepares without a cache.

    Fails on the series without that completion (a size mismatch deep in the model)."""
    target = tiny_model(EmbedsOnlyGPT2LMHeadModel, seed=0)
    assistant = tiny_model(GPT2LMHeadModel, seed=1, assistant=True)
    inputs = generation_inputs(target, "plain")
    greedy = run(target, **inputs)
    assert_same_tokens(greedy, run(target, assistant, **inputs))
    assert_same_tokens(greedy, run(target, target, **inputs), "(itself)")


def test_inputs_that_cannot_be_completed_are_refused():
    """Where the inputs cannot be completed consistently, a ValueError naming the class, its method and the input comes
    before the forward pass of the round that needs them: only the first round (the prompt, as greedy search runs it)
    has run. Fails on the series that does not check (a wrong answer or a size mismatch deep in the model) and on
    stock (which ignores the method: greedy's tokens, with positions of its own)."""
    target = tiny_model(CachePositionsGPT2LMHeadModel, seed=0)
    assistant = tiny_model(GPT2LMHeadModel, seed=1, assistant=True)
    inputs = generation_inputs(target, "plain")
    run(target, **inputs)  # greedy search works with it
    counter = ForwardCounter(target)
    try:
        with pytest.raises(ValueError) as raised:
            run(target, assistant, **inputs)
    finally:
        counter.remove()
    message = str(raised.value)
    for part in ("CachePositionsGPT2LMHeadModel", "prepare_inputs_for_generation", "position_ids"):
        assert part in message, message
    assert counter.count == 1, f"{counter.count} forward passes of the model before the refusal (expected the first)"
