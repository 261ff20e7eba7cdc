"""Unit tests of every `prepare_inputs_for_generation`: what it keeps of the inputs, given the cache.

The arguments are captured from a real greedy run (`harness.capture_step`: the real cache layout of each model,
encoder outputs, masks, token types), at a step where the cache holds all but the last token. The method is then
called with one token the cache has not seen (`one_token`, the path of greedy, sample, beam and contrastive search),
none (`same_length`) and three (`several`, assisted decoding's candidates):

- `supported` classes must return the unseen tokens (the last one for `one_token` and `same_length`, the last three
  for `several`), with `position_ids` / `token_type_ids` / `decoder_*` per-position inputs of the same length, and
  the one-token paths must return exactly what stock 4.31.0 returned (recorded in `data/`).
- `refused` classes keep the stock behaviour in every case.

With `SERIES_PARTIAL=1` (a prefix of the patch series), classes whose method is still the stock one are skipped.
"""

import pytest
import torch

from models import harness
from support.device import DEVICE

CASES = [(name, case) for name in sorted(harness.classes()) for case in harness.SLICING_CASES]


# What slicing keeps is integers: without a recording on this device, the CPU one serves (the captured step is
# checked to be the recorded one).
RECORDING_FALLS_BACK_TO_CPU = True


_CAPTURED = {}


def _captured(name):
    if name not in _CAPTURED:
        _CAPTURED[name] = harness.capture_step(name)
    return _CAPTURED[name]


@pytest.mark.parametrize("name, case", CASES, ids=[f"{n}-{c}" for n, c in CASES])
def test_slicing(name, case, entry, recorded):
    stock_source = recorded["sources"].get(name)
    if harness.series_partial() and stock_source == harness.pifg_source(name):
        pytest.skip("not patched in this prefix")
    stock = recorded["slicing"][name]
    if "error" in stock:
        with pytest.raises(Exception) as error:
            _captured(name)
        assert harness.error_name(error.value) == stock["error"], "greedy generation fails differently than stock"
        return
    stock = stock[case]
    if "error" in stock:
        with pytest.raises(Exception) as error:
            harness.slicing_call(name, case, _captured(name))
        assert harness.error_name(error.value) == stock["error"], f"the method fails differently than stock ({case})"
        return

    ids, output = harness.slicing_call(name, case, _captured(name))
    if ids.cpu().tolist() != stock["input_ids"]:
        if recorded["meta"]["device"] != DEVICE:
            pytest.skip(f"greedy generation on {DEVICE} differs from the {recorded['meta']['device']} recording")
        pytest.fail("the captured step differs from the recorded one")
    described = harness.describe_output(output)

    if not entry.slices:
        assert described == stock["output"], f"a refused class must keep the stock behaviour ({case})"
        return
    if _captured(name)[1].get("past_key_values") is None:
        # e.g. ElectraForCausalLM: its prepare_inputs_for_generation does not pass `use_cache`, and its model does
        # not default to the config's, so generation recomputes everything at every step
        assert described == stock["output"], f"the stock behaviour changed ({case})"
        if case == "several":
            pytest.skip("not proving anything: greedy generation of this class runs without a cache")
        return

    unseen = max(harness.SLICING_CASES[case], 1)
    key = harness.token_key(output)
    assert key is not None, f"no input_ids / decoder_input_ids in the output: {sorted(output)}"
    kept = output[key]
    assert kept.shape[-1] == unseen, f"{key} keeps {kept.shape[-1]} tokens, expected the {unseen} unseen by the cache"
    assert torch.equal(kept, ids[..., -unseen:]), f"{key} is not the last {unseen} tokens"
    for position_key in harness.PER_POSITION_KEYS:
        value = output.get(position_key)
        if torch.is_tensor(value):
            assert value.shape[-1] == unseen, f"{position_key} has length {value.shape[-1]}, {key} {unseen}"
    if case in ("one_token", "same_length"):
        assert described == stock["output"], f"the one-token path changed ({case}): stock returned {stock['output']}"
    else:
        # stock kept only the last token: its per-position values must be the last of the patched ones
        for position_key in (key,) + harness.PER_POSITION_KEYS:
            if position_key in described and position_key in stock["output"]:
                last = [row[-1:] for row in described[position_key]]
                assert last == stock["output"][position_key], f"the last {position_key} differs from stock's"
