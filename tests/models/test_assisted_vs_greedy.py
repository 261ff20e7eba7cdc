"""Assisted generation must return what greedy generation returns, for every class that can generate.

One test id per class and scenario, `test_assisted_vs_greedy[ClassName-scenario]`:

- `supported` classes (see `support/expectations.py`): the sequences of assisted and greedy generation must be
  equal token for token, and their scores equal within `SCORE_ATOL` (the largest difference is recorded as the
  `max_score_diff` property of the test). Each scenario runs with the assistants of `_assistants`, so that rejected,
  partly accepted and fully accepted candidates all occur; the number of verification rounds is recorded too.
  Where the greedy output does not change when the scenario's extra input changes (padding, token types, encoder
  mask), or where the model repeats one token, the comparison proves nothing: the test is skipped with a reason
  that says so, instead of passing.
- `refused` classes: assisted generation must raise a ValueError naming assisted generation, the class and the
  reason of the table (one id, `[ClassName-plain]`).
"""

import pytest
import torch

from models import harness
from support.expectations import EXPECTATIONS, refusal_message
from support.outputs import sequences_and_scores
from support.tiny_models import MAX_NEW_TOKENS, applicable_scenarios, generation_inputs

SCORE_ATOL = 1e-4
EXTRA_INPUT = {
    "token_type_ids": "the token type ids",
    "left_pad": "the padding of the prompt",
    "enc_mask": "the encoder attention mask",
}


def _cases():
    cases = []
    for name, cls in sorted(harness.classes().items()):
        entry = EXPECTATIONS.get(name)
        if entry is not None and not entry.supported:
            cases.append((name, "plain"))
        else:
            cases.extend((name, scenario) for scenario in applicable_scenarios(cls))
    return cases


def _continuation(sequences):
    # decoder-only outputs start with the prompt; the continuation is what differs between runs
    return sequences[..., -MAX_NEW_TOKENS:]


def _first_difference(a, b):
    a, b = a.flatten().tolist(), b.flatten().tolist()
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))


def _assistants(name, scenario, target):
    """(label, assistant) pairs the scenario compares with: `plain` an independently seeded one-layer model (nearly
    every candidate rejected) and a draft (the target without its last layer: some accepted, some rejected); `self`
    the target (every candidate accepted); the extra-input scenarios the draft and the target."""
    if scenario == "self":
        return [("self", target)]
    draft = ("draft", harness.cached_draft(name))
    if scenario == "plain":
        return [("independent", harness.cached_model(name, assistant=True)), draft]
    return [draft, ("self", target)]


class _Rounds:
    """Counts the forward passes of the target: one per verification round in assisted generation."""

    def __init__(self, model):
        self.count = 0
        self.handle = model.register_forward_hook(self)

    def __call__(self, *args):
        self.count += 1


def _compare(target, kwargs, assistant, label, greedy, greedy_scores, scenario):
    rounds = _Rounds(target)
    try:
        assisted, assisted_scores = sequences_and_scores(target, kwargs, assistant=assistant)
    finally:
        rounds.handle.remove()
    assert greedy.shape == assisted.shape and torch.equal(greedy, assisted), (
        f"assisted generation ({label} assistant) differs from greedy generation ({scenario}), first at flat "
        f"position {_first_difference(greedy, assisted)}:\n  greedy:   {greedy.tolist()}\n"
        f"  assisted: {assisted.tolist()}"
    )
    max_diff = None
    if greedy_scores is not None and assisted_scores is not None:
        assert greedy_scores.shape == assisted_scores.shape, "assisted and greedy scores differ in shape"
        assert torch.equal(torch.isfinite(greedy_scores), torch.isfinite(assisted_scores)), (
            f"scores of assisted generation ({label} assistant) are -inf elsewhere than greedy's, with equal "
            "sequences: the logits processors (the tiny models suppress their pad token) were not applied alike"
        )
        finite = torch.isfinite(greedy_scores)
        max_diff = (greedy_scores[finite] - assisted_scores[finite]).abs().max().item() if finite.any() else 0.0
        assert max_diff <= SCORE_ATOL, (
            f"scores of assisted generation ({label} assistant) differ by up to {max_diff:.3g} (tolerance "
            f"{SCORE_ATOL}), with equal sequences"
        )
    return max_diff, rounds.count


def _params():
    params = []
    for name, scenario in _cases():
        entry = EXPECTATIONS.get(name)
        known = dict(entry.known_failures) if entry is not None else {}
        marks = [pytest.mark.xfail(strict=True, reason=known[scenario])] if scenario in known else []
        params.append(pytest.param(name, scenario, id=f"{name}-{scenario}", marks=marks))
    return params


@pytest.mark.parametrize("name, scenario", _params())
def test_assisted_vs_greedy(name, scenario, entry, record_property):

    target = harness.cached_model(name)
    kwargs = generation_inputs(target, scenario)

    if not entry.supported:
        with pytest.raises(ValueError) as error:
            sequences_and_scores(target, kwargs, assistant=harness.cached_model(name, assistant=True))
        assert refusal_message(name) in str(error.value)
        return

    greedy, greedy_scores = sequences_and_scores(target, kwargs)
    diffs, rounds = [], []
    for label, assistant in _assistants(name, scenario, target):
        max_diff, count = _compare(target, kwargs, assistant, label, greedy, greedy_scores, scenario)
        diffs.append(max_diff)
        rounds.append(f"{label} {count}")
    known = [d for d in diffs if d is not None]
    record_property("max_score_diff", f"{max(known):.3g}" if known else "n/a")
    record_property("verification_rounds", ", ".join(rounds) + f" for {MAX_NEW_TOKENS} tokens")

    # A comparison only proves something if the greedy output depends on what the scenario exercises.
    if scenario in EXTRA_INPUT:
        changed, _ = sequences_and_scores(target, generation_inputs(target, scenario, variant=1))
        if changed.shape == greedy.shape and torch.equal(changed, greedy):
            pytest.skip(
                f"not proving anything: greedy output does not change with {EXTRA_INPUT[scenario]} "
                "(assisted output was equal)"
            )
    continuation = _continuation(greedy)
    if not continuation.dtype.is_floating_point and len(set(continuation.flatten().tolist())) == 1:
        pytest.skip("not proving anything: the model repeats one token (assisted output was equal)")
