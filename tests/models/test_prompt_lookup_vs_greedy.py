"""Prompt lookup decoding must return what greedy generation returns, for every class that can generate.

One test id per class and scenario, `test_prompt_lookup_vs_greedy[ClassName-scenario]`, in the scenarios of
`test_assisted_vs_greedy` that give the model other inputs (`plain`, `token_type_ids`, `left_pad`, `enc_mask`):

- `supported` classes: `generate(prompt_lookup_num_tokens=3)` returns greedy's sequences token for token, and its
  scores within `SCORE_ATOL`. The tiny models repeat themselves, so lookups find candidates and some are accepted; the
  test records how many.
- `refused` classes: prompt lookup raises a ValueError that names it, with the reason assisted generation gives.

Fails on the series before prompt lookup (`prompt_lookup_num_tokens` is an unused kwarg there).
"""

import pytest
import torch

from models import harness
from support.expectations import EXPECTATIONS
from support.outputs import sequences_and_scores
from support.stats import recorded_stats
from support.tiny_models import applicable_scenarios, generation_inputs

SCORE_ATOL = 1e-4
SCENARIOS = ("plain", "token_type_ids", "left_pad", "enc_mask")


def _params():
    params = []
    for name, cls in sorted(harness.classes().items()):
        entry = EXPECTATIONS.get(name)
        scenarios = ["plain"] if entry is not None and not entry.supported else applicable_scenarios(cls)
        params.extend(
            pytest.param(name, scenario, id=f"{name}-{scenario}") for scenario in scenarios if scenario in SCENARIOS
        )
    return params


@pytest.mark.parametrize("name, scenario", _params())
def test_prompt_lookup_vs_greedy(name, scenario, entry, record_property):
    target = harness.cached_model(name)
    kwargs = generation_inputs(target, scenario)
    lookup_kwargs = dict(kwargs, prompt_lookup_num_tokens=3)

    if not entry.supported:
        with pytest.raises(ValueError) as error:
            sequences_and_scores(target, lookup_kwargs)
        message = str(error.value)
        assert "Prompt lookup decoding" in message and f"not supported by {name}: {entry.reason}" in message, message
        return

    greedy, greedy_scores = sequences_and_scores(target, kwargs)
    with recorded_stats() as calls:
        lookup, lookup_scores = sequences_and_scores(target, lookup_kwargs)
    assert greedy.shape == lookup.shape and torch.equal(greedy, lookup), (
        f"prompt lookup differs from greedy generation ({scenario}):\n  greedy: {greedy.tolist()}\n"
        f"  lookup: {lookup.tolist()}"
    )
    if greedy_scores is not None and lookup_scores is not None:
        finite = torch.isfinite(greedy_scores)
        assert torch.equal(finite, torch.isfinite(lookup_scores)), "scores are -inf elsewhere than greedy's"
        max_diff = (greedy_scores[finite] - lookup_scores[finite]).abs().max().item() if finite.any() else 0.0
        assert max_diff <= SCORE_ATOL, f"scores differ by up to {max_diff:.3g} (tolerance {SCORE_ATOL})"
    stats = calls[-1] if calls else None
    if stats is not None:
        record_property("lookup_candidates", f"{stats.num_accepted} of {stats.num_drafted} accepted")
