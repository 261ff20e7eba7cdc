"""Running generation for the per-model tests (kept out of tiny_models.py, whose code fingerprints the recorded
stock outputs)."""

import warnings

import torch

from support.assistants import reset_assistant
from support.tiny_models import generate


def sequences_and_scores(model, kwargs, assistant=None):
    """(sequences, scores stacked as [batch, steps, vocab] or None) of `generate(model, **kwargs)` with
    `output_scores`, with `assistant` as `assistant_model` (its draft length reset first) when given."""
    kwargs = dict(kwargs, output_scores=True, return_dict_in_generate=True)
    if assistant is not None:
        reset_assistant(assistant)
        kwargs["assistant_model"] = assistant
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = generate(model, **kwargs)
    if torch.is_tensor(output):  # custom `generate` methods that ignore return_dict_in_generate
        return output, None
    scores = getattr(output, "scores", None)
    return output.sequences, (torch.stack(scores, dim=1) if scores else None)
