"""Shared code of the per-model tests and of `scripts/record_plain_outputs.py`.

The recording script runs this code on stock transformers 4.31.0 and stores the results in
`tests/models/data/stock-<device>.json`; the tests run the same code on the tree under test and compare. Keeping one
implementation is what makes the comparison meaningful.
"""

import ast
import functools
import hashlib
import inspect
import json
import os
import warnings
from pathlib import Path

import torch

from support.device import DEVICE
from support.expectations import EXPECTATIONS
from support.tiny_models import (
    applicable_scenarios,
    discover_generation_classes,
    draft_model,
    generate,
    generation_inputs,
    tiny_model,
)

DATA_DIR = Path(__file__).resolve().parent / "data"
SUPPORT_DIR = Path(__file__).resolve().parent.parent / "support"

# plain generation modes compared with stock: (name, generate() kwargs)
PLAIN_MODES = {
    "greedy": {},
    "beam": {"num_beams": 2},
    "contrastive": {"penalty_alpha": 0.6, "top_k": 4},
}
PLAIN_NEW_TOKENS = 8

# slicing cases: how many tokens the cache has not seen, relative to the captured greedy step
SLICING_CASES = {
    "one_token": 1,  # L = P + 1: greedy, sample, beam, contrastive
    "same_length": 0,  # L = P: the one-token path keeps the last token
    "several": 3,  # L = P + 3: assisted decoding's candidates
}
PER_POSITION_KEYS = ("position_ids", "token_type_ids", "decoder_position_ids", "decoder_token_type_ids")
TOKEN_KEYS = ("decoder_input_ids", "input_ids")


def data_file(device=DEVICE):
    return DATA_DIR / f"stock-{device}.json"


def factory_fingerprint():
    """Hash of the code that builds the models and inputs (its syntax tree: comments, docstrings and formatting do
    not count): recorded data is only valid for the same code."""
    digest = hashlib.sha256()
    for path in (SUPPORT_DIR / "tiny_models.py", Path(__file__)):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
                if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                    node.body = body[1:] or [ast.Pass()]
        digest.update(ast.dump(tree).encode())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def classes():
    return discover_generation_classes()


@functools.lru_cache(maxsize=None)
def cached_model(name, assistant=False):
    """The target (seed 0) or the assistant (seed 1, one layer where possible) of a class, built once per process.
    Callers must not modify it."""
    if assistant:
        return tiny_model(classes()[name], seed=1, assistant=True)
    return tiny_model(classes()[name], seed=0)


@functools.lru_cache(maxsize=None)
def cached_draft(name):
    """The draft assistant of a class (`support.tiny_models.draft_model` of its cached target)."""
    return draft_model(cached_model(name))


def missing_requirement(name):
    """The optional module a class needs and that is not installed, or None."""
    entry = EXPECTATIONS.get(name)
    if entry is None or entry.requires is None:
        return None
    try:
        __import__(entry.requires)
    except ImportError:
        return entry.requires
    return None


def error_name(error):
    return type(error).__name__


# ---- plain generation ----------------------------------------------------------------------------------------------


def plain_input_sets(name):
    """The inputs plain generation is compared on: the plain prompt, and the scenario with an extra input."""
    scenarios = applicable_scenarios(classes()[name])
    extra = [s for s in scenarios if s in ("token_type_ids", "left_pad", "enc_mask")]
    return ["plain"] + extra[:1]


def to_jsonable(output):
    """Generated sequences (ints) or audio (floats) as nested lists."""
    sequences = output if torch.is_tensor(output) else output.sequences
    sequences = sequences.detach().cpu()
    if sequences.dtype.is_floating_point:
        return {"float": sequences.tolist()}
    return {"int": sequences.tolist()}


def run_plain(name, inputs, mode):
    """Plain generation of `name` in `mode` on `inputs`: {"int"|"float": values} or {"error": exception class}."""
    model = cached_model(name)
    kwargs = generation_inputs(model, inputs)
    kwargs.update(PLAIN_MODES[mode], max_new_tokens=PLAIN_NEW_TOKENS)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return to_jsonable(generate(model, **kwargs))
    except Exception as error:  # recorded: plain generation must fail the same way after the series
        return {"error": error_name(error)}


# ---- prepare_inputs_for_generation ---------------------------------------------------------------------------------


def slicing_inputs(name):
    """Inputs for the captured step: padding (decoder-only) or an encoder mask, plus token types where they apply."""
    model = cached_model(name)
    scenarios = applicable_scenarios(classes()[name])
    base = next((s for s in ("left_pad", "enc_mask") if s in scenarios), "plain")
    kwargs = generation_inputs(model, base)
    if "token_type_ids" in scenarios:
        kwargs["token_type_ids"] = generation_inputs(model, "token_type_ids")["token_type_ids"]
    return kwargs


def capture_step(name, step=2):
    """Runs greedy generation and returns the (input_ids, kwargs) `prepare_inputs_for_generation` received at call
    `step` (0-based): at that call the cache holds every token of `input_ids` but the last one."""
    model = cached_model(name)
    kwargs = slicing_inputs(name)
    kwargs["max_new_tokens"] = step + 1
    original = model.prepare_inputs_for_generation
    calls = []

    def recorder(input_ids, **model_kwargs):
        calls.append((input_ids.clone(), dict(model_kwargs)))
        return original(input_ids, **model_kwargs)

    model.prepare_inputs_for_generation = recorder
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            generate(model, **kwargs)
    finally:
        del model.prepare_inputs_for_generation
    return calls[min(step, len(calls) - 1)]


def _extend(tensor, new_length, fill):
    if tensor.shape[-1] >= new_length:
        return tensor[..., :new_length]
    pad = torch.full(tensor.shape[:-1] + (new_length - tensor.shape[-1],), fill, dtype=tensor.dtype)
    return torch.cat([tensor, pad.to(tensor.device)], dim=-1)


def slicing_call(name, case, captured=None):
    """Calls `prepare_inputs_for_generation` as at the captured step, with `SLICING_CASES[case]` tokens unseen by
    the cache. Returns (the input_ids passed, the method's output)."""
    model = cached_model(name)
    input_ids, model_kwargs = captured if captured is not None else capture_step(name)
    unseen = SLICING_CASES[case]
    seen = input_ids.shape[-1] - 1
    new_length = seen + unseen
    if new_length <= input_ids.shape[-1]:
        ids = input_ids[..., :new_length]
    else:
        generator = torch.Generator().manual_seed(7)
        extra = torch.randint(5, 50, input_ids.shape[:-1] + (new_length - input_ids.shape[-1],), generator=generator)
        ids = torch.cat([input_ids, extra.to(input_ids.device)], dim=-1)
    kwargs = dict(model_kwargs)
    decoder_only = not model.config.is_encoder_decoder
    for key in ("attention_mask", "token_type_ids", "decoder_attention_mask"):
        value = kwargs.get(key)
        if not torch.is_tensor(value) or value.shape[-1] != input_ids.shape[-1]:
            continue  # an encoder mask, or a model-specific layout: left as generation passes it
        if key == "attention_mask" and not decoder_only:
            continue
        fill = 1 if "mask" in key else int(value[..., -1].flatten()[0])
        kwargs[key] = _extend(value, new_length, fill)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = model.prepare_inputs_for_generation(ids, **kwargs)
    return ids, output


def describe_output(output):
    """The integer tensors of a `prepare_inputs_for_generation` output (what slicing decides), as lists."""
    described = {}
    for key, value in sorted(output.items()):
        if torch.is_tensor(value) and not value.dtype.is_floating_point and value.dim() <= 3:
            described[key] = value.detach().cpu().tolist()
    return described


def token_key(output):
    for key in TOKEN_KEYS:
        if torch.is_tensor(output.get(key)):
            return key
    return None


def pifg_source(name):
    return inspect.getsource(classes()[name].prepare_inputs_for_generation)


# ---- recorded data -------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def load_recorded(device=DEVICE):
    path = data_file(device)
    if not path.exists():
        return None
    return json.loads(path.read_text())


def series_partial():
    return os.environ.get("SERIES_PARTIAL", "") not in ("", "0")
