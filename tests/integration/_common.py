"""Shared pieces of the integration tests: running greedy and assisted generation side by side, and capturing
what transformers logs."""

import logging
import warnings
from contextlib import contextmanager

import torch
import transformers

from support.assistants import reset_assistant
from support.tiny_models import generate


def run(model, assistant=None, **kwargs):
    """`model.generate(**kwargs)`, with `assistant` as `assistant_model` (its draft length reset first) when given,
    through `support.tiny_models.generate` (it seeds the global RNG and knows Bark's sub-models)."""
    if assistant is not None:
        reset_assistant(assistant)
        kwargs["assistant_model"] = assistant
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return generate(model, **kwargs)


def sequences(output):
    return output if torch.is_tensor(output) else output.sequences


def assert_same_tokens(greedy, assisted, what=""):
    greedy, assisted = sequences(greedy), sequences(assisted)
    assert greedy.shape == assisted.shape and torch.equal(greedy, assisted), (
        f"assisted generation differs from greedy generation{' ' + what if what else ''}:\n"
        f"  greedy:   {greedy.tolist()}\n  assisted: {assisted.tolist()}"
    )


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextmanager
def captured_warnings():
    """Collects what transformers logs at WARNING and above (its logger does not propagate to the root logger) and
    what `warnings.warn` emits, as one list of messages."""
    root = transformers.utils.logging.get_logger("transformers")
    handler = _Collect()
    old_level = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_warning()
    root.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield handler.messages
        handler.messages.extend(str(warning.message) for warning in caught)
    finally:
        root.removeHandler(handler)
        transformers.logging.set_verbosity(old_level)


class ForwardCounter:
    """Counts the forward passes of a module while registered."""

    def __init__(self, module):
        self.count = 0
        self._handle = module.register_forward_pre_hook(self._hook)

    def _hook(self, module, args):
        self.count += 1

    def remove(self):
        self._handle.remove()
