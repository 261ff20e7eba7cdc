"""Property: greedy assisted generation returns exactly the tokens of greedy generation.

Random cases per model: prompt length 1-20, left padding (decoder-only) or encoder padding (encoder-decoder),
max_new_tokens 1-30, an assistant that is the target itself (every draft accepted, the draft length grows), a
different tiny model of the same class or of another class (drafts rejected, the draft length shrinks), a starting
draft length 1-10 and random token_type_ids where the model takes them.

The runs are derandomized (the same cases on every run) and write no example database; a failure prints the
shrunk, minimal `Case`. The default profile (20 cases per model) keeps the file to well under a minute on 2 cores;
`RELIABILITY_PROFILE=large` runs 500 cases per model (several minutes).
"""

import math
import os
from dataclasses import dataclass
from typing import Optional, Tuple

import pytest
import torch
import transformers
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from reliability._helpers import SPECS, accepts, get_model
from support.assistants import reset_assistant

transformers.logging.set_verbosity_error()

_COMMON_SETTINGS = dict(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    # No "explain" phase: it only adds coverage notes to a failure report and costs many extra runs.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("reliability-default", max_examples=20, **_COMMON_SETTINGS)
settings.register_profile("reliability-large", max_examples=500, **_COMMON_SETTINGS)
PROFILE = settings.get_profile(
    "reliability-large" if os.environ.get("RELIABILITY_PROFILE", "default") == "large" else "reliability-default"
)

MAX_PROMPT = 20
MAX_PADDING = 12
MAX_NEW_TOKENS = 30


@dataclass(frozen=True)
class Case:
    prompt: Tuple[int, ...]  # decoder-only: the prompt; encoder-decoder: the encoder input (Whisper: decoder prompt)
    padding: int  # left padding (decoder-only) or encoder padding (encoder-decoder)
    padding_side: str
    max_new_tokens: int
    assistant: str  # "itself", "sibling" (same class, other weights) or "foreign" (another class)
    draft_length: int
    token_type_ids: Optional[Tuple[int, ...]] = None
    decoder_prompt: Tuple[int, ...] = ()  # decoder tokens after the start token (encoder-decoder)
    features_seed: int = 0  # Whisper's input features


def _is_whisper(model):
    return model.config.model_type == "whisper"


@st.composite
def cases(draw, spec, model):
    config = model.config
    tokens = st.integers(min_value=3, max_value=config.vocab_size - 1)
    prompt = tuple(draw(st.lists(tokens, min_size=1, max_size=MAX_PROMPT)))
    whisper = _is_whisper(model)
    padding = 0 if whisper else draw(st.integers(min_value=0, max_value=MAX_PADDING))
    padding_side = "left"
    if config.is_encoder_decoder and padding:
        padding_side = draw(st.sampled_from(["right", "left"]))
    max_new_tokens = draw(st.integers(min_value=1, max_value=MAX_NEW_TOKENS))
    kinds = ["itself", "sibling"] + (["foreign"] if spec.foreign_assistant else [])
    assistant = draw(st.sampled_from(kinds))
    draft_length = draw(st.integers(min_value=1, max_value=10))
    token_type_ids = None
    if not config.is_encoder_decoder and accepts(model, "token_type_ids") and draw(st.booleans()):
        token_type_ids = tuple(draw(st.lists(st.integers(0, 1), min_size=len(prompt), max_size=len(prompt))))
    decoder_prompt = ()
    features_seed = 0
    if config.is_encoder_decoder and not whisper:
        decoder_prompt = tuple(draw(st.lists(tokens, max_size=3)))
    if whisper:
        features_seed = draw(st.integers(min_value=0, max_value=2**16))
    return Case(
        prompt,
        padding,
        padding_side,
        max_new_tokens,
        assistant,
        draft_length,
        token_type_ids,
        decoder_prompt,
        features_seed,
    )


def _pad_id(model):
    pad = model.config.pad_token_id
    return 0 if pad is None else pad


def _decoder_start(model):
    start = model.generation_config.decoder_start_token_id
    if start is None:
        start = model.config.decoder_start_token_id
    return 0 if start is None else start


def build_inputs(case, model):
    """generate() keyword arguments for a case (batch size 1)."""
    device = model.device
    config = model.config

    def tensor(values):
        return torch.tensor([list(values)], dtype=torch.long, device=device)

    if _is_whisper(model):
        generator = torch.Generator().manual_seed(case.features_seed)
        features = torch.randn(1, config.num_mel_bins, 2 * config.max_source_positions, generator=generator)
        return {
            "input_features": features.to(device),
            "decoder_input_ids": tensor((_decoder_start(model),) + case.prompt),
        }

    pads = (_pad_id(model),) * case.padding
    real = (1,) * len(case.prompt)
    holes = (0,) * case.padding
    if case.padding_side == "left":
        input_ids, attention_mask = pads + case.prompt, holes + real
    else:
        input_ids, attention_mask = case.prompt + pads, real + holes
    inputs = {"input_ids": tensor(input_ids), "attention_mask": tensor(attention_mask)}
    if case.token_type_ids is not None:
        inputs["token_type_ids"] = tensor((0,) * case.padding + case.token_type_ids)
    if config.is_encoder_decoder:
        inputs["decoder_input_ids"] = tensor((_decoder_start(model),) + case.decoder_prompt)
    return inputs


def pick_assistant(spec, target, kind):
    if kind == "itself":
        return target
    if kind == "sibling":
        return get_model(spec.class_name, seed=1, assistant=True, **spec.overrides)
    # Another architecture sharing the target's vocabulary.
    return get_model(spec.foreign_assistant, seed=2, assistant=True, vocab_size=target.config.vocab_size)


def _draft_length(assistant):
    return getattr(assistant, "max_assistant_tokens", None)


def _set_draft_length(assistant, value):
    assistant.max_assistant_tokens = value


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
@PROFILE
@given(data=st.data())
def test_assisted_generation_matches_greedy(spec, data):
    target = get_model(spec.class_name, **spec.overrides)
    case = data.draw(cases(spec, target), label="case")
    assistant = pick_assistant(spec, target, case.assistant)
    inputs = build_inputs(case, target)
    # Coverage of the edge cases, shown by `pytest --hypothesis-show-statistics`
    event(f"assistant: {case.assistant}")
    event("padding" if case.padding else "no padding")
    event("token_type_ids" if case.token_type_ids is not None else "no token_type_ids")
    for edge, hit in (("prompt length 1", len(case.prompt) == 1), ("max_new_tokens=1", case.max_new_tokens == 1)):
        if hit:
            event(edge)

    with torch.no_grad():
        greedy = target.generate(**inputs, max_new_tokens=case.max_new_tokens, do_sample=False)
        _set_draft_length(assistant, case.draft_length)
        try:
            assisted = target.generate(
                **inputs, max_new_tokens=case.max_new_tokens, do_sample=False, assistant_model=assistant
            )
            final_draft_length = _draft_length(assistant)
        finally:
            reset_assistant(assistant)  # the cached models start every case from the same state

    assert assisted.tolist() == greedy.tolist(), (
        f"{spec.name}: assisted generation diverged from greedy\n  greedy:   {greedy.tolist()}\n"
        f"  assisted: {assisted.tolist()}"
    )
    # The draft length grows and shrinks between iterations; it must stay a usable positive count.
    assert final_draft_length is not None and math.isfinite(final_draft_length) and final_draft_length >= 1
    if final_draft_length != case.draft_length:
        event("draft length grew" if final_draft_length > case.draft_length else "draft length shrank")
