"""The one change the series makes to plain generation, on purpose: a fix of stock's, as later releases made it.

Whisper's `prepare_inputs_for_generation` in stock 4.31.0 drops a caller's decoder attention mask, and its decoder
numbers positions by the cache length: a left-padded decoder prompt attends its padding and numbers its tokens from
the padding on, so a padded row does not continue as it would alone. The series numbers Whisper's decoder positions
by the decoder mask where one is given (the `models` group), so that a padded row continues as the same prompt alone.
Fails on stock 4.31.0; without a decoder mask, plain generation is stock's (`tests/models/test_plain_unchanged.py`).
"""

import torch
from transformers import WhisperForConditionalGeneration

from support.tiny_models import generation_inputs, tiny_model


def test_whisper_left_padded_decoder_prompt_continues_as_alone():
    model = tiny_model(WhisperForConditionalGeneration, seed=0)
    features = generation_inputs(model, "plain")["input_features"][:1]
    start = model.generation_config.decoder_start_token_id
    alone = torch.tensor([[start, 11, 12]], device=model.device)
    padded = torch.tensor([[start, start, start, 11, 12]], device=model.device)  # (padded with the start token)
    mask = torch.tensor([[0, 0, 1, 1, 1]], device=model.device)
    kwargs = dict(max_new_tokens=8, do_sample=False, forced_decoder_ids=None, begin_suppress_tokens=None)
    kwargs["suppress_tokens"] = None
    with torch.no_grad():
        expected = model.generate(features, decoder_input_ids=alone, **kwargs)
        output = model.generate(features, decoder_input_ids=padded, decoder_attention_mask=mask, **kwargs)
    assert output[:, 2:].tolist() == expected.tolist()
