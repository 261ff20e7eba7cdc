"""Assisted generation of checkpoints saved with `use_cache=False` in their config.

Models saved after training with gradient checkpointing carry `use_cache=False` (and their generation config takes
it from the config); Pix2Struct's text config says so by default. Greedy search runs them without a cache. Assisted
decoding verifies its candidates on the cache: it uses one unless the caller passes `use_cache=False` to
`generate()` explicitly, which is still refused, saying what to do.

Contract: equal to greedy generation (of the same model, uncached), for a GPT-2 whose config says `use_cache=False`
as the model, the assistant or both, for one prompt and a batch, and for Pix2Struct. Stock 4.31.0 refused such a
model ("assisted generate requires `use_cache=True`") and failed with such an assistant (`TypeError`).
"""

import pytest
import torch
from transformers import GenerationConfig, GPT2LMHeadModel, Pix2StructForConditionalGeneration

from integration._common import assert_same_tokens, run
from support.batches import ROWS, batched_inputs
from support.tiny_models import draft_model, generation_inputs, tiny_model


def _without_cache(model):
    """The model as a checkpoint saved with `use_cache=False` loads."""
    for config in (model.config, getattr(model.config, "text_config", None)):
        if config is not None:
            config.use_cache = False
    model.generation_config = GenerationConfig.from_model_config(model.config)
    assert model.generation_config.use_cache is False
    return model


@pytest.mark.parametrize("batch_size", [1, ROWS])
@pytest.mark.parametrize("without_cache", ["model", "assistant", "both"])
def test_config_without_cache(without_cache, batch_size):
    target = tiny_model(GPT2LMHeadModel, seed=0)
    assistant = draft_model(target)
    if without_cache in ("model", "both"):
        _without_cache(target)
    if without_cache in ("assistant", "both"):
        _without_cache(assistant)
    inputs = generation_inputs(target, "plain")
    if batch_size > 1:
        inputs = batched_inputs(target, inputs)
    assert_same_tokens(run(target, **inputs), run(target, assistant, **inputs), f"({without_cache} without a cache)")


def test_pix2struct_default_text_config():
    target = _without_cache(tiny_model(Pix2StructForConditionalGeneration, seed=0))
    assistant = _without_cache(draft_model(target))
    inputs = generation_inputs(target, "plain")
    assert_same_tokens(run(target, **inputs), run(target, assistant, **inputs), "(Pix2Struct)")


def test_explicit_use_cache_false_is_refused():
    target = tiny_model(GPT2LMHeadModel, seed=0)
    assistant = draft_model(target)
    inputs = generation_inputs(target, "plain")
    with pytest.raises(ValueError, match="use_cache=True"):
        run(target, assistant, **inputs, use_cache=False)
    assert torch.is_tensor(run(target, **inputs, use_cache=False))
