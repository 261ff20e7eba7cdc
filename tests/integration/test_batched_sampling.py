"""Sampling with assisted generation and several rows: every row's tokens are samples of the target.

The rule is speculative sampling (`test_speculative_sampling.py` checks its exactness against the exact
distribution): each candidate is drawn from the assistant's distribution and kept with probability
`min(1, p / q)`, a rejected one is replaced with a sample of the residual, and the position after the last candidate
gets the target's own sample. In a batch of GPT-2, which declares `_supports_rows_with_holes`, every row keeps its
own accepted candidates (`test_rows_with_holes.py`); with that switched off, every row accepts as many as the row
that accepts the fewest. The distribution is checked both ways.
Checked three ways here, each failing on v4.31.0 and on the series without its batching patch (they refuse batches
and `num_return_sequences > 1`):

- `top_k=1` sampling with an assistant returns batched greedy search's tokens;
- `num_return_sequences` gives that many rows per prompt;
- on a vocabulary of 8 tokens, the pairs of the second and third new tokens of 3000 rows drawn with an assistant
  follow the same distribution as 3000 rows drawn by plain sampling (total variation distance below 0.12, seeded; two
  plain runs of 3000 rows lie about 0.07 apart), while the assistant's own samples lie far off (above 0.3, checked in
  the test). The assistant drafts by v4.31.0's rule from 5 candidates, so that every round verifies candidates.
"""

from unittest import mock

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.generation.candidates import BatchRows

VOCAB = 8
ROWS = 3000


def _model(seed, layers, scale):
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=layers, n_head=4, n_positions=64, eos_token_id=None)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # sharper distributions than the default initialization gives
        model.lm_head.weight.mul_(scale)
    # as an assistant: candidates in every round (the adaptive default drafts none that do not pay)
    model.generation_config.num_assistant_tokens_schedule = "heuristic"
    return model


def _pairs(sequences, prompt_length):
    # the second and third new tokens (the first one comes from the prompt's forward pass)
    first, second = sequences[:, prompt_length + 1], sequences[:, prompt_length + 2]
    counts = torch.bincount(first * VOCAB + second, minlength=VOCAB * VOCAB).float()
    return counts / counts.sum()


def test_top_k_1_equals_batched_greedy():
    target, assistant = _model(0, 2, 4.0), _model(1, 1, 8.0)
    input_ids = torch.tensor([[1, 2, 3, 4], [0, 0, 5, 6], [7, 1, 1, 2]])
    attention_mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1]])
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=10, pad_token_id=0)
    with torch.no_grad():
        greedy = target.generate(**kwargs, do_sample=False)
        torch.manual_seed(0)
        sampled = target.generate(**kwargs, do_sample=True, top_k=1, assistant_model=assistant)
    assert sampled.tolist() == greedy.tolist()


def test_num_return_sequences():
    target, assistant = _model(0, 2, 4.0), _model(1, 1, 8.0)
    input_ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 1]])
    with torch.no_grad():
        torch.manual_seed(0)
        sampled = target.generate(
            input_ids,
            max_new_tokens=6,
            do_sample=True,
            num_return_sequences=3,
            assistant_model=assistant,
            pad_token_id=0,
        )
    assert sampled.shape == (6, 10)
    assert sampled[:3, :4].tolist() == [[1, 2, 3, 4]] * 3 and sampled[3:, :4].tolist() == [[5, 6, 7, 1]] * 3


@pytest.mark.parametrize("rows", ["own", "aligned"])
def test_assisted_sampling_draws_from_the_target(rows):
    target, assistant = _model(0, 2, 4.0), _model(1, 1, 8.0)
    if rows == "aligned":
        target._supports_rows_with_holes = lambda cache_length: False
    prompt = torch.tensor([[1, 2, 3]])
    kwargs = dict(max_new_tokens=3, do_sample=True, num_return_sequences=ROWS, pad_token_id=0)
    with torch.no_grad():
        torch.manual_seed(0)
        plain = _pairs(target.generate(prompt, **kwargs), prompt.shape[1])
        torch.manual_seed(1)
        with mock.patch.object(BatchRows, "keep_own_from", autospec=True, side_effect=BatchRows.keep_own_from) as spy:
            assisted = _pairs(target.generate(prompt, assistant_model=assistant, **kwargs), prompt.shape[1])
        assert (spy.call_args.args[1] is not None) == (rows == "own")
        torch.manual_seed(2)
        the_assistants = _pairs(assistant.generate(prompt, **kwargs), prompt.shape[1])
    distance = 0.5 * (plain - assisted).abs().sum().item()
    assert distance < 0.12, f"assisted sampling is {distance:.3f} away from the target's distribution"
    # the test can tell: the assistant's own distribution is far from the target's
    assert 0.5 * (plain - the_assistants).abs().sum().item() > 0.3


def _share_encoder(target, assistant):
    """The distil-whisper idiom: the assistant runs the model's encoder, whose outputs it then reuses."""
    if hasattr(target, "model"):
        assistant.model.encoder = target.model.encoder
    else:
        assistant.encoder = target.encoder


@pytest.mark.parametrize("name", ["bart", "t5", "whisper"])
def test_num_return_sequences_with_a_shared_encoder(name):
    """An assistant sharing the model's encoder, with `num_return_sequences=3`: both decoders' cross-attention reads as
    many encoder rows as they have decoder rows, and `top_k=1` sampling returns greedy search's tokens in every row
    (the shared encoder outputs were expanded twice: Bart and T5 crashed, Whisper ran on 3 times the rows it needs)."""
    from transformers import BartForConditionalGeneration, T5ForConditionalGeneration, WhisperForConditionalGeneration

    from support.tiny_models import draft_model, generation_inputs, tiny_model

    cls = {
        "bart": BartForConditionalGeneration,
        "t5": T5ForConditionalGeneration,
        "whisper": WhisperForConditionalGeneration,
    }[name]
    target = tiny_model(cls, seed=0)
    assistant = draft_model(target)
    assistant.generation_config.num_assistant_tokens_schedule = "heuristic"
    _share_encoder(target, assistant)
    inputs = {key: value for key, value in generation_inputs(target, "plain").items() if key != "do_sample"}
    rows = []

    def record(module, args, kwargs):
        hidden, ids = kwargs.get("encoder_hidden_states"), kwargs.get("input_ids")
        if hidden is not None and ids is not None:
            rows.append((hidden.shape[0], ids.shape[0]))

    handles = [
        model.get_decoder().register_forward_pre_hook(record, with_kwargs=True) for model in (target, assistant)
    ]
    try:
        with torch.no_grad():
            greedy = target.generate(**inputs)
            rows.clear()
            sampled = target.generate(
                **inputs, do_sample=True, top_k=1, num_return_sequences=3, assistant_model=assistant
            )
    finally:
        for handle in handles:
            handle.remove()
    assert sampled.tolist() == greedy.repeat_interleave(3, dim=0).tolist()
    assert rows and all(encoder_rows == decoder_rows for encoder_rows, decoder_rows in rows), rows
