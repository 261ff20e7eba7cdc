"""Models whose `prepare_inputs_for_generation` was written the v4.31.0 way: given a cache, keep the last token only.

Every `trust_remote_code` model of that era (MPT, Falcon's and Baichuan's remote code...) and every user subclass that
overrides the method look like the classes below, which are defined here, outside the transformers tree, the way
remote code is. Stock 4.31.0 never called the method in assisted generation: it ran the models on the new tokens,
a mask of ones and the cache, so these models worked there (with the #25020 bug). The fork builds the inputs with
the method, and must keep them working: a method that returns fewer tokens than the cache has not seen is run as
v4.31.0 ran it (the new tokens, the attention mask, the cache and the encoder outputs), with one warning naming the
class and saying that its other inputs are not used, instead of crashing deep in the model:

    RuntimeError: The size of tensor a (10) must match the size of tensor b (14) at non-singleton dimension 3

What each test fails on:
- `test_old_style_equals_greedy`: a fork that feeds the method's output as it is (the crash above, or too few
  candidate logits); passes on stock.
- `test_old_style_with_inputs_it_drops_warns`: the same crash; on stock it passes silently (stock drops the
  padding, the token types and the encoder mask without a word).
- `test_old_style_warns_once`: the crash, a warning per round, and stock (no warning).
- `test_inputs_embeds_only_equals_greedy`, `test_cache_positions_equals_greedy`: the crash.
"""

import pytest
import torch
from transformers import BartForConditionalGeneration, GPT2LMHeadModel, LlamaForCausalLM

from integration._common import assert_same_tokens, captured_warnings, run
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
    """A model that embeds the tokens itself and passes `inputs_embeds` only, the last token's once there is a cache.
    Greedy search works with it (one token at a time)."""

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
    model then numbers the prompt itself)."""

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


@pytest.mark.parametrize("class_name", sorted(OLD_STYLE))
def test_old_style_equals_greedy(class_name):
    """Without padding or token types, the inputs v4.31.0 gives the model are those greedy search gives it."""
    cls = OLD_STYLE[class_name]
    target = _model(cls)
    inputs = generation_inputs(target, "plain")
    greedy = run(target, **inputs)
    for label, assistant in _assistants(cls, target):
        assert_same_tokens(greedy, run(target, assistant, **inputs), f"({label} assistant)")


@pytest.mark.parametrize(
    "class_name, scenario",
    [pytest.param(name, s, id=f"{name}-{s}") for name, scenarios in SCENARIOS.items() for s in scenarios[1:]],
)
def test_old_style_with_inputs_it_drops_warns(class_name, scenario):
    """Padding, token types or an encoder mask: the model runs as on v4.31.0, and the warning says which inputs it
    does not get and that its output can differ from greedy search's. A class of its own per case, so that no other
    test has had the warning logged already."""
    base = OLD_STYLE[class_name]
    cls = type(f"Remote{base.__name__}{scenario.title().replace('_', '')}", (base,), {"__module__": __name__})
    target = tiny_model(cls, seed=0)
    inputs = generation_inputs(target, scenario)
    with captured_warnings() as warnings:
        assisted = run(target, draft_model(target), **inputs)
    assert assisted.shape == run(target, **inputs).shape
    naming = [message for message in warnings if cls.__name__ in message]
    assert len(naming) == 1, f"expected one warning naming {cls.__name__}, got {warnings}"
    for part in ("v4.31", "not used", "differ from greedy"):
        assert part in naming[0], naming[0]


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
    it is run on the new tokens, as v4.31.0 ran it, and returns greedy's tokens."""
    target = tiny_model(EmbedsOnlyGPT2LMHeadModel, seed=0)
    assistant = tiny_model(GPT2LMHeadModel, seed=1, assistant=True)
    inputs = generation_inputs(target, "plain")
    greedy = run(target, **inputs)
    assert_same_tokens(greedy, run(target, assistant, **inputs))
    assert_same_tokens(greedy, run(target, target, **inputs), "(itself)")


def test_cache_positions_equals_greedy():
    """A method that numbers the last token by the cache length: run on the new tokens, the model numbers them the
    same way itself."""
    target = tiny_model(CachePositionsGPT2LMHeadModel, seed=0)
    assistant = tiny_model(GPT2LMHeadModel, seed=1, assistant=True)
    inputs = generation_inputs(target, "plain")
    assert_same_tokens(run(target, **inputs), run(target, assistant, **inputs))
