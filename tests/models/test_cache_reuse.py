"""Assisted decoding must not copy the caches per round: each forward pass gets the cache the previous one returned
(cropped as a view when candidates were rejected), for the model and for the assistant.

Forward hooks record the storage of every cache tensor a forward pass returns and of every one the next pass
receives; a copy (a `deepcopy` of the model kwargs, a `.clone()` in the crop) shows up as a storage that no earlier
pass returned. The second test checks that the hooks do catch such a copy.
"""

import copy
import warnings

import pytest
from transformers import BartForConditionalGeneration, GPT2LMHeadModel
from transformers.generation.utils import GenerationMixin

from support.assistants import reset_assistant
from support.tiny_models import draft_model, generation_inputs, tiny_model


def _storages(cache):
    return {tensor.untyped_storage().data_ptr() for layer in cache for tensor in layer}


class CacheTracker:
    """Counts the cache tensors that forward passes receive but no earlier forward pass returned."""

    def __init__(self, *models):
        self.returned, self.received, self.foreign, self.calls = set(), 0, 0, 0
        self.handles = []
        for model in models:
            self.handles.append(model.register_forward_pre_hook(self._before, with_kwargs=True))
            self.handles.append(model.register_forward_hook(self._after))

    def _before(self, module, args, kwargs):
        cache = kwargs.get("past_key_values")
        self.calls += 1
        if cache is not None:
            storages = _storages(cache)
            self.received += len(storages)
            self.foreign += len(storages - self.returned)

    def _after(self, module, args, output):
        if output.past_key_values is not None:
            self.returned |= _storages(output.past_key_values)

    def remove(self):
        for handle in self.handles:
            handle.remove()


def _assisted(model_class, scenario):
    model = tiny_model(model_class, seed=0)
    assistant = draft_model(model)
    inputs = generation_inputs(model, scenario)
    reset_assistant(assistant)
    tracker = CacheTracker(model, assistant)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.generate(assistant_model=assistant, **inputs)
    tracker.remove()
    return tracker


@pytest.mark.parametrize(
    "model_class, scenario", [(GPT2LMHeadModel, "left_pad"), (BartForConditionalGeneration, "enc_mask")]
)
def test_assisted_decoding_passes_the_caches_on_without_copying_them(model_class, scenario):
    tracker = _assisted(model_class, scenario)
    assert tracker.calls > 4 and tracker.received > 0, "too few rounds to tell"
    assert tracker.foreign == 0, f"{tracker.foreign} of {tracker.received} cache tensors received were copies"


def test_a_copied_cache_is_detected(monkeypatch):
    crop = GenerationMixin._crop_cache

    def copying_crop(self, past_key_values, max_length):
        return copy.deepcopy(crop(self, past_key_values, max_length))

    monkeypatch.setattr(GenerationMixin, "_crop_cache", copying_crop)
    tracker = _assisted(GPT2LMHeadModel, "left_pad")
    assert tracker.foreign > 0
