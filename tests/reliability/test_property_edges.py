"""Property, at the edges: batched assisted generation returns batched greedy search's tokens where failures hide.

Random cases per model: a left-padded batch of 1-4 rows, `max_length` within 3 tokens of the model's positional
limit (48 positions), configs that change what a class can do (rotary scaling, linear and dynamic, within its
limit), an assistant of other weights or of a smaller vocabulary (1-8 ids fewer), with one of the logits processors
that index the vocabulary by id (ids drawn among the last ones, which the smaller assistant lacks), a constant draft
length of 1-10; for Bart, also `num_return_sequences` with an assistant sharing its encoder, sampling with `top_k=1`
(each sequence is then greedy search's). The oracle is batched greedy search of the same padded batch.

Derandomized like `test_property_equivalence.py` (20 cases per model; `RELIABILITY_PROFILE=large`: 500). Each edge
failed on the series before its fix: a crash or other tokens near `n_positions` with rows of their own, with dynamic
rotary scaling, with a processor on a smaller assistant's logits, or with a shared encoder and `num_return_sequences`.
"""

import functools
import json
from dataclasses import dataclass
from typing import Tuple

import pytest
import torch
import transformers
from hypothesis import given
from hypothesis import strategies as st

from reliability.test_property_equivalence import PROFILE
from support.device import DEVICE
from support.tiny_models import tiny_model

transformers.logging.set_verbosity_error()

LIMIT = 48  # the positions of every model here


@dataclass(frozen=True)
class EdgeSpec:
    name: str
    class_name: str
    limit_key: str  # the config attribute that holds the positional limit
    overrides: str = "{}"  # more config overrides, as JSON (hashable)

    def __repr__(self):
        return self.name


EDGE_SPECS = [
    EdgeSpec("gpt2", "GPT2LMHeadModel", "n_positions"),
    EdgeSpec(
        "llama-linear",
        "LlamaForCausalLM",
        "max_position_embeddings",
        '{"rope_scaling": {"type": "linear", "factor": 2.0}}',
    ),
    EdgeSpec(
        "llama-dynamic",
        "LlamaForCausalLM",
        "max_position_embeddings",
        '{"rope_scaling": {"type": "dynamic", "factor": 2.0}}',
    ),
    EdgeSpec(
        "gpt_neox-dynamic",
        "GPTNeoXForCausalLM",
        "max_position_embeddings",
        '{"rope_scaling": {"type": "dynamic", "factor": 2.0}, "rotary_pct": 1.0}',
    ),
    EdgeSpec("opt", "OPTForCausalLM", "max_position_embeddings"),
    EdgeSpec("bloom", "BloomForCausalLM", "seq_length"),
    EdgeSpec("bart", "BartForConditionalGeneration", "max_position_embeddings"),
]
PROCESSORS = (
    "none",
    "bad_words_ids",
    "suppress_tokens",
    "sequence_bias",
    "repetition_penalty",
    "no_repeat_ngram_size",
)


@functools.lru_cache(maxsize=None)
def _model(spec, seed=0, assistant=False, vocab_delta=0):
    overrides = {spec.limit_key: LIMIT, **json.loads(spec.overrides)}
    if vocab_delta:
        overrides["vocab_size"] = _model(spec).config.vocab_size - vocab_delta
    model = tiny_model(
        getattr(transformers, spec.class_name), seed=seed, assistant=assistant, device=DEVICE, **overrides
    )
    return model.eval()


@dataclass(frozen=True)
class EdgeCase:
    prompts: Tuple[Tuple[int, ...], ...]
    margin: int  # max_length = LIMIT - margin
    vocab_delta: int  # the assistant's vocabulary is this much smaller (0: the same)
    processor: str
    processor_id: int
    draft_length: int
    return_sequences: int = 1  # > 1: sampling with top_k=1 and an assistant sharing the encoder (Bart)


@st.composite
def edge_cases(draw, spec, model):
    vocab = model.config.vocab_size
    rows = draw(st.integers(1, 4))
    tokens = st.integers(min_value=5, max_value=vocab - 1)
    prompts = tuple(tuple(draw(st.lists(tokens, min_size=1, max_size=12))) for _ in range(rows))
    return_sequences = 1
    if model.config.is_encoder_decoder:
        return_sequences = draw(st.sampled_from([1, 1, 2, 3]))
    return EdgeCase(
        prompts=prompts,
        margin=draw(st.integers(0, 3)),
        vocab_delta=draw(st.sampled_from([0, 0] + list(range(1, 9)))),
        processor=draw(st.sampled_from(PROCESSORS)),
        processor_id=draw(st.integers(vocab - 10, vocab - 1)),
        draft_length=draw(st.integers(1, 10)),
        return_sequences=return_sequences,
    )


def _inputs(case, model):
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    width = max(len(prompt) for prompt in case.prompts)
    input_ids = torch.full((len(case.prompts), width), pad, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, prompt in enumerate(case.prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
        attention_mask[row, width - len(prompt) :] = 1
    return {"input_ids": input_ids.to(model.device), "attention_mask": attention_mask.to(model.device)}


def _processor_kwargs(case):
    token = case.processor_id
    return {
        "none": {},
        "bad_words_ids": {"bad_words_ids": [[token], [7, 8]]},
        "suppress_tokens": {"suppress_tokens": [token, 9]},
        "sequence_bias": {"sequence_bias": {(token,): 3.0, (10,): -2.0}},
        "repetition_penalty": {"repetition_penalty": 1.3},
        "no_repeat_ngram_size": {"no_repeat_ngram_size": 2},
    }[case.processor]


@pytest.mark.parametrize("spec", EDGE_SPECS, ids=lambda spec: spec.name)
@PROFILE
@given(data=st.data())
def test_batched_assisted_generation_at_the_edges(spec, data):
    target = _model(spec)
    case = data.draw(edge_cases(spec, target), label="case")
    assistant = _model(spec, seed=1, assistant=True, vocab_delta=case.vocab_delta)
    inputs = _inputs(case, target)
    # (for Bart, the decoder's length, which its positions limit)
    kwargs = dict(max_length=LIMIT - case.margin, pad_token_id=0, eos_token_id=None, **_processor_kwargs(case))
    draft = dict(num_assistant_tokens=case.draft_length, num_assistant_tokens_schedule="constant")
    with torch.no_grad():
        greedy = target.generate(**inputs, do_sample=False, **kwargs)
        if case.return_sequences > 1:
            shared = tiny_model(type(assistant), seed=1, assistant=True, device=DEVICE, max_position_embeddings=LIMIT)
            shared.model.encoder = target.model.encoder
            torch.manual_seed(0)
            assisted = target.generate(
                **inputs,
                do_sample=True,
                top_k=1,
                num_return_sequences=case.return_sequences,
                assistant_model=shared.eval(),
                **draft,
                **kwargs,
            )
            greedy = greedy.repeat_interleave(case.return_sequences, dim=0)
        else:
            assisted = target.generate(**inputs, do_sample=False, assistant_model=assistant, **draft, **kwargs)
    assert assisted.tolist() == greedy.tolist(), (
        f"{spec.name}: batched assisted generation diverged from batched greedy search\n  greedy:   {greedy.tolist()}"
        f"\n  assisted: {assisted.tolist()}"
    )
