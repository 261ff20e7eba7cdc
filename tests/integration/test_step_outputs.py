"""Per-step `scores`, `attentions` and `hidden_states` of assisted generation equal greedy search's.

With `output_scores=True, output_attentions=True, output_hidden_states=True, return_dict_in_generate=True`, greedy
search returns one entry per generated token: the first covers the prompt, the others one position each. Assisted
generation must return the same: the same number of steps, the same shapes, the same values within float
tolerance (candidates verified together differ from one-at-a-time passes by rounding only). One test id per
supported class of the expectation table (`support/expectations.py`), with a draft assistant (some candidates
accepted, some rejected); skipped, with the reason, only where greedy search returns none of these outputs.

What fails:
- `test_step_outputs[GitForCausalLM]`: the current series from a cold start (greedy's steps hold the image tokens
  too: (1, 4, 198, 205) attention rows where assisted generation returns (1, 4, 1, 8)).
- `test_step_outputs[ElectraForCausalLM]` and `[Pix2StructForConditionalGeneration]` are known differences, strict
  xfails with the reason of the expectation table: greedy search runs Electra without a cache (its steps after the
  first hold every position, (1, 4, 8, 8), assisted generation's one), and Pix2Struct returns its self-attention
  weights as `cross_attentions` (greedy's rows grow with the step, (1, 4, 1, 2), (1, 4, 1, 3)...; assisted
  generation's keep the encoder length).
- The other classes pass on the current series; on stock 27 of them fail (among them BioGPT, CTRL, Falcon,
  GPT-BigCode, GPT-J, LED, M2M100, OpenLlama, PLBart, Pegasus, XGLM, the speech and vision encoder-decoders).
- `test_batched_step_outputs[ClassName]`: the same for a batch of three rows of different lengths (left padding, or a
  padded encoder mask; `support/batches.py`): every row's per-step outputs equal greedy search's on the same batch.
  Fails on stock and on the series without its batching patch (they refuse batches); the known differences above
  are strict xfails here too.
- `test_step_outputs_with_a_given_cache`: the current series (GPT-2, a 3-token prefix cache and a 9-token prompt:
  3 steps instead of greedy's 8, the first of shape (1, 9, 32) instead of (1, 6, 32)); stock too.
- `test_step_outputs_gptsan_spout`: the current series and stock (GPTSAN-japanese with a `spout`, whose projection
  takes the first cache position: greedy's attention rows are one key longer, (1, 4, 7, 8) against (1, 4, 7, 7)).
"""

import pytest
import torch
from models import harness
from transformers import GPT2LMHeadModel

from integration._common import assert_same_tokens, run
from support.batches import NOT_BATCHED, ROWS, batched_inputs
from support.expectations import EXPECTATIONS
from support.tiny_models import generation_inputs, tiny_model

NEW_TOKENS = 10
RTOL = 1e-4
ATOL = 1e-4
STEP_KEYS = (
    "scores",
    "attentions",
    "hidden_states",
    "encoder_attentions",
    "encoder_hidden_states",
    "decoder_attentions",
    "cross_attentions",
    "decoder_hidden_states",
)
STEP_OPTIONS = dict(
    output_scores=True, output_attentions=True, output_hidden_states=True, return_dict_in_generate=True
)


def _supported_classes():
    classes = harness.classes()
    return sorted(name for name, entry in EXPECTATIONS.items() if entry.supported and name in classes)


def _compare(path, greedy, assisted, problems):
    """Appends to `problems` every difference in structure, shape or value between two nested outputs."""
    if torch.is_tensor(greedy) or torch.is_tensor(assisted):
        if not (torch.is_tensor(greedy) and torch.is_tensor(assisted)):
            problems.append(f"{path}: {type(greedy).__name__} in greedy, {type(assisted).__name__} in assisted")
        elif greedy.shape != assisted.shape:
            problems.append(f"{path}: shape {tuple(greedy.shape)} in greedy, {tuple(assisted.shape)} in assisted")
        elif not torch.allclose(greedy, assisted, rtol=RTOL, atol=ATOL, equal_nan=True):
            finite = torch.isfinite(greedy) & torch.isfinite(assisted)
            same_inf = torch.equal(torch.isfinite(greedy), torch.isfinite(assisted))
            diff = (greedy[finite] - assisted[finite]).abs().max().item() if finite.any() else 0.0
            problems.append(f"{path}: values differ by up to {diff:.3g}" + ("" if same_inf else " (and -inf)"))
        return
    if isinstance(greedy, (tuple, list)) or isinstance(assisted, (tuple, list)):
        if greedy is None or assisted is None or len(greedy) != len(assisted):
            count = lambda x: "none" if x is None else len(x)  # noqa: E731
            problems.append(f"{path}: {count(greedy)} entries in greedy, {count(assisted)} in assisted")
            return
        for index, (a, b) in enumerate(zip(greedy, assisted, strict=True)):
            _compare(f"{path}[{index}]", a, b, problems)
        return
    if greedy is not None or assisted is not None:
        if (greedy is None) != (assisted is None):
            problems.append(f"{path}: {greedy!r:.30} in greedy, {assisted!r:.30} in assisted")


def _without_padded_rows(first_step, padding):
    """The first step's attentions or hidden states with the rows of padded prompt positions zeroed. Those queries
    attend to nothing, so their softmax spreads over whatever keys the pass holds: greedy search's prompt alone, or
    the prompt and the candidate tokens verified with it. They are no output of any token."""
    if first_step is None or padding is None:
        return first_step
    masked = ()
    for layer in first_step:
        # the prompt's rows are the last ones (GIT's image tokens come first)
        rows = torch.nn.functional.pad(padding, (layer.shape[-2] - padding.shape[1], 0), value=False)
        rows = rows[:, None, :, None] if layer.dim() == 4 else rows[:, :, None]
        masked += (layer.masked_fill(rows, 0.0),)
    return masked


def assert_same_step_outputs(greedy, assisted, attention_mask=None):
    """`attention_mask`: the left-padded mask of a decoder-only batch, whose padded rows of the first step are left
    out of the comparison (see `_without_padded_rows`)."""
    assert_same_tokens(greedy, assisted)
    padding = None if attention_mask is None else attention_mask == 0
    problems = []
    for key in STEP_KEYS:
        greedy_steps, assisted_steps = getattr(greedy, key, None), getattr(assisted, key, None)
        if key in ("attentions", "hidden_states") and greedy_steps and assisted_steps:
            greedy_steps = (_without_padded_rows(greedy_steps[0], padding),) + tuple(greedy_steps[1:])
            assisted_steps = (_without_padded_rows(assisted_steps[0], padding),) + tuple(assisted_steps[1:])
        _compare(key, greedy_steps, assisted_steps, problems)
    assert not problems, (
        "per-step outputs of assisted generation differ from greedy's:\n  "
        + "\n  ".join(problems[:12])
        + (f"\n  ... {len(problems) - 12} more" if len(problems) > 12 else "")
    )


def _has_step_outputs(output):
    return any(getattr(output, key, None) for key in STEP_KEYS if key != "scores")


def _cases():
    cases = []
    for name in _supported_classes():
        known = dict(EXPECTATIONS[name].known_failures)
        marks = [pytest.mark.xfail(strict=True, reason=known["step_outputs"])] if "step_outputs" in known else []
        cases.append(pytest.param(name, marks=marks))
    return cases


def _check_step_outputs(name, target, inputs):
    """Greedy search and assisted generation (with the class's draft) on `inputs`: the same per-step outputs."""
    inputs = dict(inputs, max_new_tokens=NEW_TOKENS, **STEP_OPTIONS)
    try:
        greedy = run(target, **inputs)
    except Exception as error:  # noqa: BLE001 - the class cannot return these outputs at all
        pytest.skip(f"greedy search returns no per-step outputs for {name}: {type(error).__name__}: {error}")
    if torch.is_tensor(greedy) or not _has_step_outputs(greedy):
        pytest.skip(f"greedy search returns no attentions or hidden states for {name}")
    assisted = run(target, harness.cached_draft(name), **inputs)
    attention_mask = None if target.config.is_encoder_decoder else inputs.get("attention_mask")
    assert_same_step_outputs(greedy, assisted, attention_mask)


@pytest.mark.parametrize("name", _cases())
def test_step_outputs(name):
    missing = harness.missing_requirement(name)
    if missing:
        pytest.skip(f"requires {missing}, which is not installed")
    target = harness.cached_model(name)
    _check_step_outputs(name, target, generation_inputs(target, "plain"))


@pytest.mark.parametrize("name", _cases())
def test_batched_step_outputs(name):
    missing = harness.missing_requirement(name)
    if missing:
        pytest.skip(f"requires {missing}, which is not installed")
    if name in NOT_BATCHED:
        pytest.skip(f"not batched: {NOT_BATCHED[name]}")
    target = harness.cached_model(name)
    inputs = batched_inputs(target, generation_inputs(target, "plain"))
    if inputs.get("input_ids") is not None and inputs["input_ids"].shape[0] != ROWS:
        pytest.skip("the class's prompt is not one row per sample")
    _check_step_outputs(name, target, inputs)


def test_step_outputs_with_a_given_cache():
    """A caller-supplied `past_key_values` covering the first 3 tokens of a 9-token prompt."""
    target = tiny_model(GPT2LMHeadModel, seed=0)
    prompt = generation_inputs(target, "plain")["input_ids"]
    prompt = torch.cat([prompt, prompt[:, :2]], dim=-1)
    assert prompt.shape[1] == 9
    with torch.no_grad():
        cache = target(prompt[:, :3], use_cache=True).past_key_values
    inputs = dict(input_ids=prompt, past_key_values=cache, max_new_tokens=8, **STEP_OPTIONS)
    greedy = run(target, **inputs)
    assert len(greedy.hidden_states) == 8
    assisted = run(target, harness.cached_draft("GPT2LMHeadModel"), **inputs)
    assert_same_step_outputs(greedy, assisted)


def test_step_outputs_gptsan_spout():
    target = harness.cached_model("GPTSanJapaneseForConditionalGeneration")
    inputs = dict(generation_inputs(target, "plain"), max_new_tokens=NEW_TOKENS, **STEP_OPTIONS)
    generator = torch.Generator().manual_seed(5)
    inputs["spout"] = torch.randn(1, target.config.d_spout, generator=generator).to(target.device)
    greedy = run(target, **inputs)
    without_spout = run(target, **{k: v for k, v in inputs.items() if k != "spout"})
    assert not torch.equal(greedy.sequences, without_spout.sequences), "the spout changes nothing"
    assisted = run(target, harness.cached_draft("GPTSanJapaneseForConditionalGeneration"), **inputs)
    assert_same_step_outputs(greedy, assisted)
