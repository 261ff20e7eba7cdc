"""Prompt lookup decoding: candidates looked up in each row's own tokens, verified as assisted decoding verifies them.

What each test fails on: the tip before prompt lookup (no `prompt_lookup_num_tokens`: a `ValueError` on the unused
kwarg), a lookup that reads padding or another row's tokens (other tokens than greedy search), a draft accepted past
an EOS, and a lookup that does not save forward passes on text that repeats.
"""

import copy

import pytest
import torch
from transformers import BartConfig, BartForConditionalGeneration, GPT2Config, GPT2LMHeadModel

from support.stats import recorded_stats

REPEATED = [5, 6, 7, 8, 9, 10, 11, 5, 6, 7, 8, 9, 10, 11, 5, 6, 7]


def _gpt2(seed=0, vocab=64):
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=2, n_positions=256)
    return GPT2LMHeadModel(config).eval()


def _copying_gpt2():
    """A tiny model trained a few steps to repeat a cycle, so that its greedy output repeats what the prompt holds."""
    model = _gpt2(seed=1)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = torch.tensor([REPEATED * 4])
    for _ in range(60):
        loss = model(input_ids=data, labels=data).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def _bart_config(vocab_size, d_model, layers, **kwargs):
    """A tiny Bart that starts its decoder with EOS (2), as Bart checkpoints do, with no forced tokens."""
    return BartConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_bos_token_id=None,
        forced_eos_token_id=None,
        **kwargs,
    )


@pytest.fixture(scope="module")
def copier():
    return _copying_gpt2()


def _forwards(model):
    calls = []
    handle = model.register_forward_pre_hook(lambda *_: calls.append(1))
    return calls, handle


def test_greedy_equality_at_batch_one_and_fewer_forwards(copier):
    prompt = torch.tensor([REPEATED])
    greedy = copier.generate(prompt, max_new_tokens=32, pad_token_id=0)
    calls, handle = _forwards(copier)
    try:
        lookup = copier.generate(
            prompt, max_new_tokens=32, pad_token_id=0, prompt_lookup_num_tokens=5, return_dict_in_generate=True
        )
    finally:
        handle.remove()
    assert torch.equal(greedy, lookup.sequences)
    stats = lookup.assisted_decoding_stats
    assert stats.num_accepted > 0
    assert len(calls) < 32, f"{len(calls)} forward passes for 32 tokens"


@pytest.mark.parametrize("seed", [0, 3])
def test_padded_batches_equal_batched_greedy(copier, seed):
    prompts = torch.tensor([[0, 0, 0] + REPEATED[:14], REPEATED[3:] + [5, 6, 7], [0] + REPEATED[:16]])
    mask = (torch.arange(prompts.shape[1])[None] >= torch.tensor([[3], [0], [1]])).long()
    model = copier if seed == 0 else _gpt2(seed)
    kwargs = dict(attention_mask=mask, max_new_tokens=24, pad_token_id=0)
    greedy = model.generate(prompts, **kwargs)
    lookup = model.generate(prompts, prompt_lookup_num_tokens=4, **kwargs)
    assert torch.equal(greedy, lookup)


def test_rows_that_finish_at_different_steps(copier):
    prompts = torch.tensor([REPEATED, REPEATED[2:] + [5, 6]])
    for eos in (9, 11, 7):
        kwargs = dict(max_new_tokens=24, pad_token_id=0, eos_token_id=eos)
        greedy = copier.generate(prompts, **kwargs)
        lookup = copier.generate(prompts, prompt_lookup_num_tokens=6, **kwargs)
        assert torch.equal(greedy, lookup), eos


def test_a_lookup_that_finds_nothing_is_greedy_search():
    model = _gpt2(seed=5)
    prompt = torch.arange(1, 20)[None]  # no token repeats
    greedy = model.generate(prompt, max_new_tokens=16, pad_token_id=0)
    lookup = model.generate(prompt, max_new_tokens=16, pad_token_id=0, prompt_lookup_num_tokens=3)
    assert torch.equal(greedy, lookup)


def test_sampling_keeps_the_model_distribution():
    """Speculative sampling with one-hot proposals: the first sampled token's frequencies match the model's."""
    model = _gpt2(seed=2, vocab=16)
    prompt = torch.tensor([[1, 2, 3, 1, 2, 3, 1, 2]])
    with torch.no_grad():
        probs = model(prompt).logits[0, -1].softmax(-1)
        # the second token given the lookup's candidate (3) as the first one
        probs_after = model(torch.cat([prompt, torch.tensor([[3]])], 1)).logits[0, -1].softmax(-1)
    torch.manual_seed(0)
    n = 3000
    with recorded_stats() as calls:
        outputs = model.generate(
            prompt.expand(n, -1), do_sample=True, top_k=0, max_new_tokens=2, pad_token_id=0, prompt_lookup_num_tokens=1
        )
    assert calls[-1].num_drafted > 0
    first = torch.bincount(outputs[:, -2], minlength=16).double() / n
    assert (first - probs).abs().max() < 0.04, (first, probs)
    after = outputs[outputs[:, -2] == 3, -1]
    if len(after) > 500:
        second = torch.bincount(after, minlength=16).double() / len(after)
        assert (second - probs_after).abs().max() < 0.08


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_beams=2), "prompt lookup decoding"),
        (dict(penalty_alpha=0.6, top_k=4), "prompt lookup decoding"),
        (dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.0), "prompt lookup decoding"),
        (dict(prompt_lookup_num_tokens=0), "positive integer"),
        (dict(max_matching_ngram_size=0), "positive integer"),
    ],
)
def test_validation_errors(kwargs, message):
    model = _gpt2()
    kwargs = {"prompt_lookup_num_tokens": 3, **kwargs}
    with pytest.raises(ValueError, match=message):
        model.generate(torch.tensor([REPEATED]), max_new_tokens=4, pad_token_id=0, **kwargs)


def test_with_an_assistant_is_refused():
    model = _gpt2()
    with pytest.raises(ValueError, match="assistant_model"):
        model.generate(
            torch.tensor([REPEATED]),
            max_new_tokens=4,
            pad_token_id=0,
            prompt_lookup_num_tokens=3,
            assistant_model=model,
        )


def test_encoder_decoder_looks_up_the_encoder_ids():
    torch.manual_seed(0)
    model = BartForConditionalGeneration(_bart_config(vocab_size=40, d_model=32, layers=1, max_position_embeddings=64))
    source = torch.tensor([[0] + list(range(4, 24)) + [2]])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(80):  # learn to copy the source
        loss = model(input_ids=source, labels=source).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    assert BartForConditionalGeneration._shares_encoder_decoder_vocabulary
    kwargs = dict(max_new_tokens=20, num_beams=1, no_repeat_ngram_size=0)
    greedy = model.generate(source, **kwargs)
    lookup = model.generate(source, prompt_lookup_num_tokens=6, return_dict_in_generate=True, **kwargs)
    assert torch.equal(greedy, lookup.sequences)
    assert lookup.assisted_decoding_stats.num_accepted > 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_return_sequences=2), "Prompt lookup decoding with greedy search returns one sequence"),
        (dict(use_cache=False), "without `prompt_lookup_num_tokens`"),
    ],
)
def test_errors_shared_with_assisted_generation_name_prompt_lookup(kwargs, message):
    model = _gpt2()
    with pytest.raises(ValueError, match=message):
        model.generate(
            torch.tensor([REPEATED]), max_new_tokens=4, pad_token_id=0, prompt_lookup_num_tokens=3, **kwargs
        )


def test_settings_on_a_generation_config_made_from_the_model_config_are_kept(copier, recwarn):
    """A model built from its config gets a generation config made from it, which `generate()` makes again: the lookup
    settings set on it are kept, as the draft settings are, without the warning about a modified model config."""
    model = copy.deepcopy(copier)
    assert model.generation_config._from_model_config
    model.generation_config.prompt_lookup_num_tokens = 4
    output = model.generate(torch.tensor([REPEATED]), max_new_tokens=8, pad_token_id=0, return_dict_in_generate=True)
    assert output.assisted_decoding_stats is not None and output.assisted_decoding_stats.num_drafted > 0
    assert not [w for w in recwarn if "modified the pretrained model configuration" in str(w.message)]


def test_a_decoder_start_token_is_not_looked_up():
    """Bart starts its decoder with EOS, which ends its encoder input too: a lookup of the start token drafted the
    start token again (EOS, never accepted). A decoder that holds its start token alone now drafts nothing."""
    torch.manual_seed(7)
    model = BartForConditionalGeneration(_bart_config(vocab_size=99, d_model=24, layers=2)).eval()
    source = torch.tensor([[71, 82, 18, 33, 46, 91, 2]])
    lengths = []
    handle = model.register_forward_pre_hook(
        lambda module, args, kwargs: lengths.append(kwargs["decoder_input_ids"].shape[1]), with_kwargs=True
    )
    try:
        lookup = model.generate(source, max_new_tokens=6, prompt_lookup_num_tokens=3)
    finally:
        handle.remove()
    assert torch.equal(lookup, model.generate(source, max_new_tokens=6))
    assert lengths[0] == 1, f"tokens per verification: {lengths}"


def test_a_prompt_that_fills_max_length():
    """A prompt longer than `max_length` (the default 20): greedy search warns and returns one token, and so does
    prompt lookup, which has no candidate to propose (it crashed on a negative number of candidates)."""
    model = _gpt2()
    prompt = torch.tensor([REPEATED + REPEATED[:7]])
    greedy = model.generate(prompt, pad_token_id=0)
    assert greedy.shape[1] == prompt.shape[1] + 1
    assert torch.equal(model.generate(prompt, pad_token_id=0, prompt_lookup_num_tokens=3), greedy)
