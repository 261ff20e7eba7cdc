"""The reproduction of upstream issue #25020, with tiny models: GPT-2 given `token_type_ids` generates something
else with an assistant than without one, because assisted decoding drops every input but the tokens."""

import warnings

import torch
from transformers import GPT2LMHeadModel

from support.assistants import reset_assistant
from support.tiny_models import generation_inputs, tiny_model


def _generate(model, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(**kwargs)


def test_gpt2_token_type_ids_assisted_equals_greedy():
    model = tiny_model(GPT2LMHeadModel, seed=0)
    assistant = tiny_model(GPT2LMHeadModel, seed=1, assistant=True)
    inputs = generation_inputs(model, "token_type_ids")
    assert inputs["token_type_ids"].device == model.device

    greedy = _generate(model, **inputs)
    # the token types must matter, or the comparison below would prove nothing
    other_types = _generate(model, **generation_inputs(model, "token_type_ids", variant=1))
    assert not torch.equal(greedy, other_types), "the tiny GPT-2 ignores its token types"

    reset_assistant(assistant)
    assisted = _generate(model, assistant_model=assistant, **inputs)
    assert torch.equal(assisted, greedy), f"greedy: {greedy.tolist()}\nassisted: {assisted.tolist()}"


def test_gpt2_token_type_ids_self_assisted_equals_greedy():
    """With the model as its own assistant every candidate is accepted: several tokens are verified at once."""
    model = tiny_model(GPT2LMHeadModel, seed=0)
    inputs = generation_inputs(model, "token_type_ids")
    greedy = _generate(model, **inputs)
    reset_assistant(model)
    assisted = _generate(model, assistant_model=model, **inputs)
    assert torch.equal(assisted, greedy), f"greedy: {greedy.tolist()}\nassisted: {assisted.tolist()}"
