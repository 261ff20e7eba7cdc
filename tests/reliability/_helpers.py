"""Shared pieces of the reliability tests: the model set, cached tiny models and model-state snapshots."""

import functools
import hashlib
import inspect
import os
from dataclasses import dataclass, field

import torch
import transformers

from support.device import DEVICE
from support.tiny_models import tiny_model


@dataclass(frozen=True)
class ModelSpec:
    """One entry of the representative model set."""

    name: str
    class_name: str
    overrides: dict = field(default_factory=dict)
    # Another class (same vocabulary) that can act as a "foreign" assistant, or None.
    foreign_assistant: str = None

    @property
    def model_class(self):
        return getattr(transformers, self.class_name)

    def __repr__(self):
        return self.name


# The representative set named in the issue. GPT-BigCode runs with both cache layouts.
SPECS = [
    ModelSpec("gpt2", "GPT2LMHeadModel", foreign_assistant="LlamaForCausalLM"),
    ModelSpec("llama", "LlamaForCausalLM", foreign_assistant="GPT2LMHeadModel"),
    ModelSpec("bloom", "BloomForCausalLM", foreign_assistant="GPT2LMHeadModel"),
    ModelSpec("gpt_bigcode-mqa", "GPTBigCodeForCausalLM", {"multi_query": True}, "GPT2LMHeadModel"),
    ModelSpec("gpt_bigcode-mha", "GPTBigCodeForCausalLM", {"multi_query": False}, "GPT2LMHeadModel"),
    ModelSpec("opt", "OPTForCausalLM", foreign_assistant="GPT2LMHeadModel"),
    ModelSpec("gpt_neox", "GPTNeoXForCausalLM", foreign_assistant="GPT2LMHeadModel"),
    ModelSpec("falcon", "FalconForCausalLM", foreign_assistant="GPT2LMHeadModel"),
    ModelSpec("codegen", "CodeGenForCausalLM", foreign_assistant="GPT2LMHeadModel"),
    ModelSpec("bart", "BartForConditionalGeneration", foreign_assistant="T5ForConditionalGeneration"),
    ModelSpec("t5", "T5ForConditionalGeneration", foreign_assistant="BartForConditionalGeneration"),
    ModelSpec("whisper", "WhisperForConditionalGeneration"),
]
SPECS_BY_NAME = {spec.name: spec for spec in SPECS}


@functools.lru_cache(maxsize=None)
def _cached_model(class_name, seed, assistant, overrides):
    model = tiny_model(
        getattr(transformers, class_name), seed=seed, assistant=assistant, device=DEVICE, **dict(overrides)
    )
    model.eval()
    return model


def get_model(class_name, seed=0, assistant=False, **overrides):
    """A tiny model built once per process. Tests must leave it as they found it (see `snapshot`)."""
    return _cached_model(class_name, seed, assistant, tuple(sorted(overrides.items())))


def fresh_model(class_name, seed=0, assistant=False, **overrides):
    """A tiny model of its own, for tests that may break it."""
    model = tiny_model(getattr(transformers, class_name), seed=seed, assistant=assistant, device=DEVICE, **overrides)
    model.eval()
    return model


def accepts(model, argument):
    """Whether the model's forward takes `argument`."""
    return argument in inspect.signature(model.forward).parameters


def snapshot(model):
    """Everything about a model that generation must not change: weights, configs, mode and instance attributes."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    attributes = {
        key: value
        for key, value in vars(model).items()
        if not key.startswith("_") and isinstance(value, (int, float, str, bool, type(None)))
    }
    return {
        "weights": digest.hexdigest(),
        "config": model.config.to_json_string(use_diff=False),
        "generation_config": model.generation_config.to_json_string(use_diff=False),
        "training": model.training,
        "attributes": attributes,
    }


def timeout_scale():
    """Multiplier for wall-clock limits on slow or loaded machines."""
    return float(os.environ.get("RELIABILITY_TIMEOUT_SCALE", "1"))
