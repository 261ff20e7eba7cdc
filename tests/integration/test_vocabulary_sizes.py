"""An assistant that shares the model's tokenizer but not its embedding size.

Real pairs differ in the size of their embedding matrices while sharing a tokenizer: Pythia's small models have
50304 rows, the large ones 50432; `resize_token_embeddings` pads to a multiple of 64 or adds rows nobody predicts.
Stock 4.31.0 assists them fine. The current series refuses every such pair up front:

    ValueError: ... the assistant (GPT2LMHeadModel) has a vocabulary size of 99 and the model ... one of 128

Contract: such pairs work and equal greedy; only a candidate id the model cannot embed is refused, where it happens,
with a ValueError naming the id and both sizes.

What each test fails on:
- `test_model_with_more_rows` and `test_assistant_with_more_rows`: the current series (the refusal above); pass on
  stock.
- `tests/reliability/test_clear_errors.py::test_assistant_with_another_vocabulary_size` checks the same with
  independent assistants: equal to greedy or the refusal of one id.
- `test_candidate_the_model_cannot_embed`: the current series (the refusal names no id) and stock (an IndexError
  deep in the embedding, or a device-side assert on CUDA).
- `test_assistant_head_wider_than_its_embeddings`: stock (an IndexError in the assistant's embedding) and a loop that
  checks only the tokens the model hands the assistant, not the candidates the assistant feeds itself.
"""

import re

import pytest
import torch
from transformers import BartForConditionalGeneration, GPT2LMHeadModel

from integration._common import ForwardCounter, assert_same_tokens, run
from support.tiny_models import TINY_VOCAB, draft_model, generation_inputs, tiny_model

PADDED_VOCAB = 128  # rows after resizing: what the tokenizer never produces
CLASSES = [GPT2LMHeadModel, BartForConditionalGeneration]


def _pad_rows(model, rows=PADDED_VOCAB):
    """`resize_token_embeddings` as users do, with the new output rows predicting nothing (zero logits, below the
    best of the random ones), as untrained padding rows of a real checkpoint."""
    model.resize_token_embeddings(rows)
    with torch.no_grad():
        model.get_output_embeddings().weight[TINY_VOCAB:] = 0
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias[:, TINY_VOCAB:] = 0
    return model


def _assert_within_tokenizer(output):
    assert int(output.max()) < TINY_VOCAB, "greedy output uses a padding row: the comparison would be meaningless"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_model_with_more_rows(cls):
    """The Pythia case: the model has more embedding rows than the assistant."""
    target = tiny_model(cls, seed=0)
    assistant = draft_model(target)  # shares its weights, before the resizing: some candidates accepted
    inputs = generation_inputs(target, "plain")  # prompt ids from the tokenizer's range
    _pad_rows(target)
    greedy = run(target, **inputs)
    _assert_within_tokenizer(greedy)
    assert_same_tokens(greedy, run(target, assistant, **inputs))


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_assistant_with_more_rows(cls):
    target = tiny_model(cls, seed=0)
    assistant = _pad_rows(draft_model(target))
    inputs = generation_inputs(target, "plain")
    greedy = run(target, **inputs)
    _assert_within_tokenizer(greedy)
    assert_same_tokens(greedy, run(target, assistant, **inputs))


class _Propose:
    """Makes the assistant's best candidate `token_id` at every step."""

    def __init__(self, model, token_id):
        self.token_id = token_id
        self._handle = model.register_forward_hook(self)

    def __call__(self, module, args, output):
        output.logits[..., self.token_id] += 1e4

    def remove(self):
        self._handle.remove()


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_candidate_the_model_cannot_embed(cls):
    target = tiny_model(cls, seed=0)
    assistant = _pad_rows(draft_model(target))
    bad_id = PADDED_VOCAB - 8
    proposing = _Propose(assistant, bad_id)
    counter = ForwardCounter(assistant)
    try:
        with pytest.raises(ValueError) as raised:
            run(target, assistant, **generation_inputs(target, "plain"))
    finally:
        proposing.remove()
        counter.remove()
    message = str(raised.value)
    numbers = set(re.findall(r"\d+", message))
    assert {
        str(bad_id),
        str(TINY_VOCAB),
        str(PADDED_VOCAB),
    } <= numbers, (
        f"the error must name the candidate id {bad_id} and both sizes ({TINY_VOCAB}, {PADDED_VOCAB}): {message!r}"
    )
    assert counter.count > 0, "refused before the assistant drafted anything: the pair itself is fine"


def test_assistant_head_wider_than_its_embeddings():
    """An assistant whose (untied) head predicts ids its own input embeddings do not hold: the candidate it is fed
    back at its next draft step, before the model sees it, is refused with the id and the sizes, not an IndexError
    deep in the embedding."""
    target = tiny_model(GPT2LMHeadModel, seed=0)
    assistant = draft_model(target)
    with torch.no_grad():
        head = torch.nn.Linear(assistant.config.n_embd, PADDED_VOCAB, bias=False)
        head.weight.zero_()
        head.weight[:TINY_VOCAB] = assistant.lm_head.weight
    assistant.lm_head = head  # wider than the TINY_VOCAB rows of its embeddings
    bad_id = PADDED_VOCAB - 8
    proposing = _Propose(assistant, bad_id)
    try:
        with pytest.raises(ValueError) as raised:
            run(target, assistant, **generation_inputs(target, "plain"))
    finally:
        proposing.remove()
    message = str(raised.value)
    assert "to the assistant" in message, message
    assert {str(bad_id), str(TINY_VOCAB)} <= set(re.findall(r"\d+", message)), message
