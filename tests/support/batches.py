"""Batches for the batched assisted-generation tests, built from the suite's single-prompt inputs of a class.

Three rows: the prompt rolled by the row's index (other tokens, other frames or patches per row), padded by 0, 2 and
3 positions where the class takes a mask: left padding for decoder-only models, a padded encoder mask (right
padding) for encoder-decoder models.
"""

import torch

from support.tiny_models import applicable_scenarios

ROWS = 3
PADDING = (0, 2, 3)
# Classes whose batch cannot be built from the single-prompt inputs of the suite.
NOT_BATCHED = {
    "RagTokenForGeneration": "its own `generate` ignores an assistant; its prompt is the retrieved context",
}


def pad_token(model):
    """The padding token of the model's generation config or config, else 0."""
    pad = getattr(model.generation_config, "pad_token_id", None)
    if pad is None:
        pad = getattr(model.config, "pad_token_id", None)
    return 0 if pad is None else pad


def batched_inputs(model, inputs):
    """Three rows from the inputs of one prompt: other tokens per row, and padding where the class takes a mask."""
    cls = type(model)
    scenarios = applicable_scenarios(cls)
    batch = {}
    for key, value in inputs.items():
        if torch.is_tensor(value) and value.shape[0] == 1:
            batch[key] = value.repeat(ROWS, *([1] * (value.dim() - 1)))
        else:
            batch[key] = value
    main = batch.get(getattr(cls, "main_input_name", "input_ids"))
    if torch.is_tensor(main) and main.is_floating_point():
        # speech features, images, patches: other values per row (patches and frames move as a whole)
        for row in range(1, ROWS):
            main[row] = main[row].roll(row, dims=-2 if main.dim() > 2 else -1)
    ids = batch.get("input_ids")
    if ids is None or ids.is_floating_point():
        return batch
    for row in range(1, ROWS):
        ids[row] = ids[row].roll(row)
    pad = pad_token(model)
    mask = batch.get("attention_mask")
    if mask is not None and mask.shape == ids.shape:
        if "left_pad" in scenarios:
            for row, count in enumerate(PADDING):
                ids[row, :count] = pad
                mask[row, :count] = 0
        elif "enc_mask" in scenarios:
            for row, count in enumerate(PADDING):
                if count:
                    ids[row, -count:] = pad
                    mask[row, -count:] = 0
    return batch
