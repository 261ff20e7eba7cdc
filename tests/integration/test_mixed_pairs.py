"""Pairs of a decoder-only model and an encoder-decoder one, over the same vocabulary.

Stock 4.31.0 runs an encoder-decoder model with a decoder-only assistant (the distil-whisper shape: a small decoder
drafts the decoder's tokens) and a decoder-only model with an encoder-decoder assistant (its encoder reads the
prompt, its decoder the sequence), and returns greedy's tokens at batch size 1. The fork must too, in every form it
supports: batches, padded masks. A decoder-only assistant is also offered the model's encoder outputs, which its
`prepare_inputs_for_generation` may use, as distil-whisper's decoder-only assistants do (it then drafts what the
model's own decoder would).

What each test fails on:
- `test_mixed_pair[*-1]`: a fork that refuses such pairs (the series before this round refused both kinds).
- `test_mixed_pair[*-3]`: the same, and stock (it refuses batches).
- `test_decoder_only_assistant_reads_the_encoder_outputs`: a fork that gives a decoder-only assistant no encoder
  outputs (its drafts then miss, and the test sees no cross-attention input).
"""

import pytest
import torch
from transformers import BartForCausalLM, BartForConditionalGeneration, GPT2LMHeadModel

from integration._common import assert_same_tokens, run
from support.batches import batched_inputs
from support.tiny_models import generation_inputs, tiny_model


def _pair(kind):
    if kind == "encoder-decoder-model":
        return tiny_model(BartForConditionalGeneration, seed=0), tiny_model(GPT2LMHeadModel, seed=1, assistant=True)
    return tiny_model(GPT2LMHeadModel, seed=0), tiny_model(BartForConditionalGeneration, seed=1, assistant=True)


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("kind", ["encoder-decoder-model", "decoder-only-model"])
def test_mixed_pair(kind, rows):
    target, assistant = _pair(kind)
    inputs = generation_inputs(target, "plain")
    if rows > 1:
        inputs = batched_inputs(target, inputs)  # padded encoder masks, or left padding
        assert inputs["input_ids"].shape[0] == rows
    greedy = run(target, **inputs)
    assert_same_tokens(greedy, run(target, assistant, **inputs))


class EncoderOutputsBartForCausalLM(BartForCausalLM):
    """A decoder-only assistant that reads the encoder outputs it is offered, as distil-whisper's `WhisperForCausalLM`
    does in later releases: defined here, outside the tree, the way such an assistant's code is."""

    def prepare_inputs_for_generation(self, input_ids, encoder_outputs=None, **kwargs):
        model_inputs = super().prepare_inputs_for_generation(input_ids, **kwargs)
        if encoder_outputs is not None:
            model_inputs["encoder_hidden_states"] = encoder_outputs[0]
        return model_inputs


def _decoder_of(target):
    """The model's decoder and head as a decoder-only assistant: given the model's encoder outputs, it drafts the
    model's own tokens."""
    assistant = tiny_model(EncoderOutputsBartForCausalLM, seed=1)
    assistant.model.decoder.load_state_dict(target.model.decoder.state_dict())
    assistant.lm_head.load_state_dict(target.lm_head.state_dict())
    with torch.no_grad():
        target.final_logits_bias.zero_()  # the one weight of the model's head that a causal LM has not
    return assistant


def test_decoder_only_assistant_reads_the_encoder_outputs():
    target = tiny_model(BartForConditionalGeneration, seed=0)
    assistant = _decoder_of(target)
    inputs = generation_inputs(target, "plain")
    greedy = run(target, **inputs)
    seen = []
    handle = assistant.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs.get("encoder_hidden_states") is not None), with_kwargs=True
    )
    rounds = []
    target_handle = target.register_forward_hook(lambda *args: rounds.append(1))
    try:
        assisted = run(target, assistant, **inputs)
    finally:
        handle.remove()
        target_handle.remove()
    assert_same_tokens(greedy, assisted)
    assert seen and all(seen), "the assistant was not given the model's encoder outputs"
    new_tokens = greedy.shape[1] - 1
    assert len(rounds) <= 3, f"{len(rounds)} rounds for {new_tokens} tokens: the assistant's drafts missed"


def test_decoder_only_assistant_reads_the_encoder_outputs_in_a_batch():
    target = tiny_model(BartForConditionalGeneration, seed=0)
    assistant = _decoder_of(target)
    inputs = batched_inputs(target, generation_inputs(target, "plain"))
    greedy = run(target, **inputs)
    assert_same_tokens(greedy, run(target, assistant, **inputs))
