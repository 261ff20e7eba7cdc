"""Assisted generation of a batch must return, row for row, what greedy search returns on the same batch.

One test id per supported class, `test_batched_assisted_vs_greedy[ClassName]`: a batch of three prompts built from the
suite's own inputs of the class (`plain` scenario), with different lengths (left padding for decoder-only models, a
padded encoder mask for encoder-decoder models, where the class takes the mask) and an EOS token that one row
generates early, so that rows finish at different steps and get the padding token afterwards. Assisted and greedy
sequences must be equal and their scores equal within `SCORE_ATOL`, with the draft and with the model as its own
assistant. Fails on v4.31.0 and on the series without its batching patches (assisted generation refused batches).
"""

import pytest
import torch

from models import harness
from support.batches import NOT_BATCHED, ROWS, batched_inputs, pad_token
from support.expectations import EXPECTATIONS
from support.outputs import sequences_and_scores
from support.tiny_models import MAX_NEW_TOKENS, generation_inputs

SCORE_ATOL = 1e-4


def _cases():
    return [
        name
        for name, cls in sorted(harness.classes().items())
        if EXPECTATIONS.get(name) is not None and EXPECTATIONS[name].supported
    ]


@pytest.mark.parametrize("name", _cases())
def test_batched_assisted_vs_greedy(name, entry):
    if name in NOT_BATCHED:
        pytest.skip(f"not batched: {NOT_BATCHED[name]}")
    model = harness.cached_model(name)
    inputs = batched_inputs(model, generation_inputs(model, "plain"))
    if inputs.get("input_ids") is not None and inputs["input_ids"].shape[0] != ROWS:
        pytest.skip("the class's prompt is not one row per sample")
    greedy, _ = sequences_and_scores(model, inputs)
    # An EOS that the first row generates after a few tokens, and not before: the rows finish at different steps
    new_tokens = greedy[0, -MAX_NEW_TOKENS:].tolist()
    eos = next((token for i, token in enumerate(new_tokens[2:], 2) if token not in new_tokens[:i]), None)
    if eos is not None:
        inputs = dict(inputs, eos_token_id=eos, pad_token_id=pad_token(model))
    greedy, greedy_scores = sequences_and_scores(model, inputs)
    for label, assistant in (("draft", harness.cached_draft(name)), ("self", model)):
        assisted, assisted_scores = sequences_and_scores(model, inputs, assistant)
        assert assisted.tolist() == greedy.tolist(), f"{label} assistant: the sequences differ"
        if greedy_scores is not None and assisted_scores is not None:
            assert assisted_scores.shape == greedy_scores.shape, f"{label} assistant: the scores differ in shape"
            finite = torch.isfinite(greedy_scores)
            assert torch.equal(finite, torch.isfinite(assisted_scores)), f"{label} assistant: -inf scores differ"
            difference = (greedy_scores[finite] - assisted_scores[finite]).abs().max().item() if finite.any() else 0.0
            assert difference <= SCORE_ATOL, f"{label} assistant: scores differ by {difference:.3g}"
