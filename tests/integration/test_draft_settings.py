"""The draft settings and the assistants users bring: what a call is given is what it does, and it says what it did.

- `num_assistant_tokens` and `num_assistant_tokens_schedule` given to `generate()` (as kwargs or in a
  `generation_config=`) override the assistant's generation config for that call only;
- the assistant's own settings survive its own `generate()`, whose config is regenerated from the model config;
- a call's `assisted_decoding_stats` (`return_dict_in_generate=True`) count its rounds, drafted and accepted
  candidates, per row too, and say why the schedule drafted nothing or stopped drafting (also logged at info
  verbosity); nothing is kept on the model;
- an assistant that is not a model is refused with a `TypeError` before any forward pass; pairs whose vocabularies
  differ by more than 10% get one warning; the device hint can be pasted;
- an encoder-decoder assistant with an encoder of its own runs it at its first draft only, never in a call that does
  not draft, and the cost prior of the adaptive schedule counts what runs per token only.

Every test fails on the series before these changes: the kwargs were ignored, the config was reset with a deprecation
warning, no stats existed, a string assistant raised `AttributeError`, and the assistant's encoder ran in every call.
"""

import copy
import logging
import warnings
from unittest import mock

import pytest
import torch
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel, WhisperConfig, WhisperForConditionalGeneration
from transformers.generation import draft_length
from transformers.utils import logging as hf_logging

from integration._common import assert_same_tokens
from support.stats import recorded_stats
from support.tiny_models import tiny_model

PROMPT = torch.tensor([[5, 17, 33, 9, 41, 2, 77, 18, 60, 3, 12, 90]])


def _gpt2(layers, width=64, vocab=128, seed=0):
    torch.manual_seed(seed)
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=2, vocab_size=vocab, n_positions=128)
    return GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="module")
def pair():
    target = _gpt2(2)
    assistant = _gpt2(1, seed=1)
    assistant.load_state_dict(
        {k: v for k, v in target.state_dict().items() if k in assistant.state_dict()}, strict=False
    )
    return target, assistant


def _greedy(model, **kwargs):
    return model.generate(PROMPT, max_new_tokens=24, do_sample=False, pad_token_id=0, **kwargs)


def _count_drafts(target, assistant, **kwargs):
    """The candidates drafted in each round of `_greedy(target, assistant_model=assistant, **kwargs)`."""
    rounds, pending = [], [0]

    def on_target(*_):
        rounds.append(pending[0])
        pending[0] = 0

    def on_assistant(*_):
        pending[0] += 1

    handles = [target.register_forward_pre_hook(on_target), assistant.register_forward_pre_hook(on_assistant)]
    try:
        output = _greedy(target, assistant_model=assistant, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return output, rounds[1:]  # the first round drafts with the prompt, at most one candidate


@pytest.mark.parametrize("how", ["kwargs", "generation_config"])
def test_draft_settings_given_to_generate_apply_to_that_call_only(pair, how):
    target, assistant = pair
    before = assistant.generation_config.to_dict()
    settings = {"num_assistant_tokens": 3, "num_assistant_tokens_schedule": "constant"}
    with recorded_stats() as calls:
        if how == "kwargs":
            output, rounds = _count_drafts(target, assistant, **settings)
        else:
            config = GenerationConfig(max_new_tokens=24, pad_token_id=0, **settings)
            output, rounds = _count_drafts(target, assistant, generation_config=config)
        assert_same_tokens(_greedy(target), output)
        assert rounds and all(drafted == 3 for drafted in rounds[:-1]), rounds
        assert calls[-1].schedule == "constant"
        assert assistant.generation_config.to_dict() == before
        # the next call without settings uses the assistant's own (the adaptive schedule)
        _greedy(target, assistant_model=assistant)
    assert calls[-1].schedule == "adaptive"


@pytest.mark.parametrize(
    "settings",
    [{"num_assistant_tokens": 0}, {"num_assistant_tokens": 2.5}, {"num_assistant_tokens_schedule": "fast"}],
)
def test_invalid_draft_settings_given_to_generate_are_refused(pair, settings):
    target, assistant = pair
    with pytest.raises(ValueError, match="num_assistant_tokens"):
        _greedy(target, assistant_model=assistant, **settings)


def test_the_assistants_settings_survive_its_own_generate(pair):
    _, assistant = pair
    assistant = copy.deepcopy(assistant)
    assert assistant.generation_config._from_model_config
    assistant.generation_config.num_assistant_tokens = 2
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the deprecation warning about a modified model config
        _greedy(assistant)
    assert assistant.generation_config.num_assistant_tokens == 2
    assert assistant.generation_config.num_assistant_tokens_schedule == "constant"


def test_a_modified_model_config_still_updates_the_generation_config(pair):
    _, assistant = pair
    assistant = copy.deepcopy(assistant)
    assistant.generation_config.num_assistant_tokens = 2
    assistant.config.pad_token_id = 7
    with pytest.warns(UserWarning, match="modified the pretrained model configuration"):
        _greedy(assistant)
    assert assistant.generation_config.pad_token_id == 7
    assert assistant.generation_config.num_assistant_tokens == 2


def test_the_stats_count_the_rounds_and_candidates(pair):
    target, assistant = pair
    output, rounds = _count_drafts(
        target,
        assistant,
        num_assistant_tokens=2,
        num_assistant_tokens_schedule="constant",
        return_dict_in_generate=True,
    )
    output, stats = output.sequences, output.assisted_decoding_stats
    assert not hasattr(target, "last_assisted_decoding_stats")  # nothing of the call stays on the model
    assert stats.num_accepted_per_row == [stats.num_accepted]
    assert stats.num_rounds == len(rounds) + 1
    assert stats.num_drafted == sum(rounds) + 2  # the first round drafts with the prompt
    assert 0 <= stats.num_accepted <= stats.num_drafted
    assert output.shape[1] - PROMPT.shape[1] == stats.num_accepted + stats.num_rounds
    assert stats.stop_reason is None


def test_a_schedule_that_drafts_nothing_says_why():
    """The model as its own assistant: drafting could never pay, so nothing is drafted (deterministic: the costs are
    never timed), and the call says why, once, at info verbosity."""
    target = tiny_model(GPT2LMHeadModel, seed=0, device="cpu")
    hf_logging.set_verbosity_info()
    try:
        with _captured(hf_logging.get_logger("transformers.generation.utils")) as messages, recorded_stats() as calls:
            output = target.generate(PROMPT, assistant_model=target, max_new_tokens=32, pad_token_id=0)
    finally:
        hf_logging.set_verbosity_warning()
    stats = calls[-1]
    assert_same_tokens(target.generate(PROMPT, max_new_tokens=32, pad_token_id=0), output)
    assert stats.num_drafted == 0 and stats.num_rounds == 32
    assert stats.stop_reason is not None and "acceptance" in stats.stop_reason
    messages = [message for message in messages if "Assisted decoding" in message]
    assert messages == [f"Assisted decoding drafted nothing: {stats.stop_reason}."]


def test_a_poor_assistant_stops_drafting():
    target = tiny_model(GPT2LMHeadModel, seed=0, device="cpu")
    poor = tiny_model(GPT2LMHeadModel, seed=7, assistant=True, device="cpu")  # its candidates are rejected
    output = target.generate(
        PROMPT, assistant_model=poor, max_new_tokens=64, pad_token_id=0, return_dict_in_generate=True
    )
    assert_same_tokens(target.generate(PROMPT, max_new_tokens=64, pad_token_id=0), output.sequences)
    stats = output.assisted_decoding_stats
    assert 0 < stats.num_drafted < 16 and stats.num_accepted < stats.num_drafted, stats


@pytest.mark.parametrize("assistant", ["gpt2", {"lm_head.weight": torch.zeros(2, 2)}, torch.nn.Linear(2, 2)])
def test_an_assistant_that_is_not_a_model_is_refused_before_any_forward_pass(pair, assistant):
    target, _ = pair
    calls = []
    handle = target.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        with pytest.raises(TypeError, match=f"`assistant_model`.*`{type(assistant).__name__}`"):
            _greedy(target, assistant_model=assistant)
    finally:
        handle.remove()
    assert calls == []


def test_a_string_assistant_is_told_how_to_load_it(pair):
    target, _ = pair
    with pytest.raises(TypeError, match=r"from_pretrained\('gpt2'\)"):
        _greedy(target, assistant_model="gpt2")


def test_vocabularies_of_other_sizes_warn_once_and_keep_the_tokens(pair):
    target, _ = pair
    other = _gpt2(1, vocab=200, seed=3)
    records = _warnings_of_two_calls(target, other)
    assert sum("do they share a tokenizer" in message for message in records) == 1
    assert not any("tokenizer" in message for message in _warnings_of_two_calls(target, pair[1]))


def _warnings_of_two_calls(target, assistant):
    """What the generation logger says in two calls with `assistant` (its `warning_once` cache cleared first), after
    checking that the first call returns greedy search's tokens."""
    logger = hf_logging.get_logger("transformers.generation.utils")
    logger.warning_once.cache_clear()
    with _captured(logger) as records:
        first = _greedy(target, assistant_model=assistant)
        _greedy(target, assistant_model=assistant)
    assert_same_tokens(_greedy(target), first)
    return records


class _captured:
    """The messages `logger` emits inside the block."""

    def __init__(self, logger):
        self.logger, self.messages = logger, []

    def __enter__(self):
        self.handler = logging.Handler()
        self.handler.emit = lambda record: self.messages.append(record.getMessage())
        self.logger.addHandler(self.handler)
        return self.messages

    def __exit__(self, *_):
        self.logger.removeHandler(self.handler)


def test_the_device_hint_can_be_pasted(pair):
    target, assistant = pair
    assistant = copy.deepcopy(assistant).to("meta")
    with pytest.raises(ValueError, match=r'assistant_model\.to\("cpu"\)'):
        _greedy(target, assistant_model=assistant)


# ----------------------------------------------------------------------------------------------------------------
# An encoder-decoder assistant with an encoder of its own
# ----------------------------------------------------------------------------------------------------------------


def _whisper_pair():
    config = WhisperConfig(
        vocab_size=96,
        d_model=32,
        encoder_layers=2,
        decoder_layers=4,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_mel_bins=16,
        max_source_positions=40,
        max_target_positions=96,
        decoder_start_token_id=1,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=None,
        suppress_tokens=None,
        begin_suppress_tokens=None,
    )
    torch.manual_seed(0)
    target = WhisperForConditionalGeneration(config).eval()
    draft_config = copy.deepcopy(config)
    draft_config.decoder_layers = 1
    assistant = WhisperForConditionalGeneration(draft_config).eval()
    assistant.load_state_dict(target.state_dict(), strict=False)  # the encoder copied, the first decoder layer
    features = torch.randn(2, 16, 80, generator=torch.Generator().manual_seed(0))
    return target, assistant, features


def _encoder_runs(assistant, call):
    runs = []
    handle = assistant.get_encoder().register_forward_pre_hook(lambda *_: runs.append(1))
    try:
        output = call()
    finally:
        handle.remove()
    return output, len(runs)


def test_an_own_encoder_runs_only_when_the_assistant_drafts():
    target, assistant, features = _whisper_pair()
    greedy = target.generate(features, max_new_tokens=12)
    # a short call cannot pay the encoder back: the default schedule does not run it
    with recorded_stats() as calls:
        output, runs = _encoder_runs(
            assistant, lambda: target.generate(features, assistant_model=assistant, max_new_tokens=12)
        )
    assert_same_tokens(greedy, output)
    assert runs == 0
    stats = calls[-1]
    assert stats.num_drafted == 0 and "encoder" in stats.stop_reason
    # a schedule that drafts runs it once, at its first draft
    output, runs = _encoder_runs(
        assistant,
        lambda: target.generate(
            features,
            assistant_model=assistant,
            max_new_tokens=12,
            num_assistant_tokens=2,
            num_assistant_tokens_schedule="constant",
        ),
    )
    assert_same_tokens(greedy, output)
    assert runs == 1


def test_a_lazy_encoder_takes_several_sequences_per_prompt():
    target, assistant, features = _whisper_pair()
    torch.manual_seed(0)
    output, runs = _encoder_runs(
        assistant,
        lambda: target.generate(
            features,
            assistant_model=assistant,
            max_new_tokens=8,
            do_sample=True,
            num_return_sequences=3,
            num_assistant_tokens_schedule="constant",
        ),
    )
    assert output.shape[0] == 6 and runs == 1


def test_a_shared_encoder_is_not_run_again():
    target, assistant, features = _whisper_pair()
    assistant.model.encoder = target.model.encoder
    greedy = target.generate(features, max_new_tokens=12)
    output, runs = _encoder_runs(
        assistant,
        lambda: target.generate(
            features, assistant_model=assistant, max_new_tokens=12, num_assistant_tokens_schedule="constant"
        ),
    )
    assert_same_tokens(greedy, output)
    assert runs == 1  # the model's own run, in generate()


def test_the_cost_prior_counts_what_runs_per_token():
    target, assistant, _ = _whisper_pair()
    # the decoder layers and the output projection; not the encoder, not the embedding lookups
    step = draft_length._step_size(target)
    decoder = target.get_decoder()
    lookups = sum(p.numel() for m in decoder.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters())
    layers = sum(p.numel() for p in decoder.parameters()) - lookups
    assert step == layers + target.get_output_embeddings().weight.numel()
    one_layer = sum(p.numel() for p in decoder.layers[0].parameters())
    assert draft_length._step_size(target) - draft_length._step_size(assistant) == 3 * one_layer
    # a GPT-2 draft of 3 of 4 layers is about 3/4 of the model per token, whatever the embeddings weigh
    model, draft = _gpt2(4, width=64, vocab=4096), _gpt2(3, width=64, vocab=4096)
    ratio = draft_length._step_size(draft) / draft_length._step_size(model)
    layer = sum(p.numel() for p in model.transformer.h[0].parameters())
    assert ratio == pytest.approx((3 * layer + 64 * 4096 + 128) / (4 * layer + 64 * 4096 + 128), rel=1e-3)


def test_an_assistant_that_agrees_is_tried_whatever_its_size():
    """A GPT-2 draft of 3 of the model's 4 layers, the model's last layer made the identity: both compute the same
    function, and the draft costs about 3/4 of the model per token by the prior. Its prompt agrees everywhere, so it is
    judged in the first round and drafts in the next rounds, which measure what it costs."""
    torch.manual_seed(0)
    config = GPT2Config(n_layer=4, n_embd=64, n_head=2, vocab_size=128, n_positions=128)
    target = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name in ("attn.c_proj", "mlp.c_proj"):
            projection = target.transformer.h[3].get_submodule(name)
            projection.weight.zero_()
            projection.bias.zero_()
    draft = GPT2LMHeadModel(GPT2Config(n_layer=3, n_embd=64, n_head=2, vocab_size=128, n_positions=128)).eval()
    draft.load_state_dict(target.state_dict(), strict=False)
    prompt = torch.randint(0, 128, (1, 24), generator=torch.Generator().manual_seed(1))
    assert 0.7 < draft_length._step_size(draft) / draft_length._step_size(target) < 0.8
    greedy = target.generate(prompt, max_new_tokens=32, pad_token_id=0)
    output = target.generate(
        prompt, assistant_model=draft, max_new_tokens=32, pad_token_id=0, return_dict_in_generate=True
    )
    assert_same_tokens(greedy, output.sequences)
    stats = output.assisted_decoding_stats
    assert stats.num_drafted >= 2 and stats.num_accepted == stats.num_drafted, stats


def test_the_model_as_its_own_assistant_is_not_tried():
    target = _gpt2(2)
    output = _greedy(target, assistant_model=target, return_dict_in_generate=True)
    assert output.assisted_decoding_stats.num_drafted == 0


def test_a_misspelt_assistant_kwarg_is_refused(pair):
    """`assistant_<name>` kwargs are validated against the assistant, as the model's are against the model: a typo
    raises stock's error for unused model kwargs, naming it (it was silently dropped)."""
    target, assistant = pair
    with pytest.raises(ValueError, match=r"not used by the model: \['atention_mask'\].*assistant_<name>"):
        _greedy(target, assistant_model=assistant, assistant_atention_mask=torch.ones_like(PROMPT))
    # a kwarg the assistant takes still passes
    _greedy(target, assistant_model=assistant, assistant_attention_mask=torch.ones_like(PROMPT))


@pytest.mark.parametrize("key", ["num_assistant_tokens", "prompt_lookup_num_tokens", "max_matching_ngram_size"])
def test_draft_settings_take_what_max_new_tokens_takes(pair, key):
    """Numpy integers pass (as for `max_new_tokens`); booleans are refused alike for every draft setting."""
    import numpy as np

    target, assistant = pair
    kwargs = {"assistant_model": assistant} if key == "num_assistant_tokens" else {"prompt_lookup_num_tokens": 3}
    assert_same_tokens(_greedy(target), _greedy(target, **{**kwargs, key: np.int64(3)}))
    with pytest.raises(ValueError, match=f"`{key}` must be a positive integer, but is True"):
        _greedy(target, **{**kwargs, key: True})


@pytest.mark.parametrize(
    "call, setting",
    [
        (dict(assistant=True, num_assistant_tokens=3), '`num_assistant_tokens` (the "adaptive" schedule'),
        (dict(num_assistant_tokens=3), "`num_assistant_tokens` (no `assistant_model`"),
        (dict(num_assistant_tokens_schedule="constant"), "`num_assistant_tokens_schedule` (no `assistant_model`"),
        (dict(prompt_lookup_num_tokens=3, num_assistant_tokens=3), "`num_assistant_tokens` (no `assistant_model`"),
        (dict(max_matching_ngram_size=3), "`max_matching_ngram_size` (no `prompt_lookup_num_tokens`"),
    ],
)
def test_settings_a_call_ignores_are_said(pair, call, setting):
    """A draft setting the call does not read warns, once, instead of passing silently."""
    from integration._common import captured_warnings

    target, assistant = pair
    call = dict(call)
    if call.pop("assistant", False):
        call["assistant_model"] = assistant
        assistant.generation_config.num_assistant_tokens_schedule = "adaptive"
    hf_logging.get_logger("transformers.generation.utils").warning_once.cache_clear()
    with captured_warnings() as messages:
        _greedy(target, **call)
        _greedy(target, **call)
    said = [message for message in messages if setting in message]
    assert len(said) == 1, messages
    # a setting the call reads says nothing
    with captured_warnings() as messages:
        _greedy(target, assistant_model=assistant, num_assistant_tokens=3, num_assistant_tokens_schedule="constant")
    assert not [message for message in messages if "ignores" in message], messages


def test_special_tokens_of_other_ids_warn_once(pair):
    """Whisper tiny.en assisting Whisper base: one id apart in size, under the 10% warning, but their EOS and decoder
    start ids differ, so that no candidate can be right. Special ids that differ warn once; equal ones say nothing."""
    target, assistant = pair
    other = copy.deepcopy(assistant)
    other.generation_config.eos_token_id = 7
    other.generation_config.bos_token_id = 8
    records = _warnings_of_two_calls(target, other)
    said = [message for message in records if "likely use different tokenizers" in message]
    assert len(said) == 1 and "`eos_token_id` ([50256] and [7])" in said[0] and "`bos_token_id`" in said[0], records
    assert not any("tokenizers" in message for message in _warnings_of_two_calls(target, assistant))


def test_an_assistant_that_cannot_read_the_models_inputs_is_refused(pair):
    """A speech model assisting a text model is refused before any forward pass, saying why (it failed deep inside the
    assistant's encoder, on token ids given to a convolution)."""
    target, _ = pair
    speech = tiny_model(WhisperForConditionalGeneration, seed=1)
    with pytest.raises(ValueError, match="reads `input_features`, but the model .* is given `input_ids`"):
        _greedy(target, assistant_model=speech)


@pytest.mark.parametrize("rows", ["own", "aligned"])
def test_the_stats_count_the_candidates_of_each_row(pair, rows):
    target, assistant = pair
    prompts = torch.cat([PROMPT, PROMPT.flip(1), PROMPT.roll(5, 1)])
    mask = torch.ones_like(prompts)
    mask[1, :4] = 0
    kwargs = {"attention_mask": mask, "max_new_tokens": 24, "pad_token_id": 0, "return_dict_in_generate": True}
    with mock.patch.object(GPT2LMHeadModel, "_supports_rows_with_holes", lambda self, cache_length: rows == "own"):
        output = target.generate(prompts, assistant_model=assistant, **kwargs)
    stats = output.assisted_decoding_stats
    assert len(stats.num_accepted_per_row) == 3
    # every row gets 24 tokens: the candidates it kept, and one of the model's in each round it takes part in
    for kept in stats.num_accepted_per_row:
        assert 24 - stats.num_rounds <= kept <= 23
    if rows == "aligned":
        assert stats.num_accepted_per_row == [stats.num_accepted] * 3
    assert_same_tokens(target.generate(prompts, **kwargs).sequences, output.sequences)


def test_the_default_schedule_runs_the_same_forward_passes_in_every_call(pair):
    """The default draft length reads no clock: identical calls draft the same candidates and run the same forward
    passes of both models, whatever the time each round takes (here, a clock that jumps around)."""
    target, assistant = pair
    counts = {"target": 0, "assistant": 0}
    handles = [
        target.register_forward_pre_hook(lambda *_: counts.__setitem__("target", counts["target"] + 1)),
        assistant.register_forward_pre_hook(lambda *_: counts.__setitem__("assistant", counts["assistant"] + 1)),
    ]
    ticks = iter(range(10**6))
    jumpy = mock.Mock(side_effect=lambda: (next(ticks) * 7919) % 101 / 10.0)
    calls = []
    try:
        with mock.patch.object(draft_length, "time", mock.Mock(thread_time=jumpy, perf_counter=jumpy)):
            for _ in range(5):
                counts.update(target=0, assistant=0)
                output = _greedy(target, assistant_model=assistant, return_dict_in_generate=True)
                calls.append((output.sequences.tolist(), dict(counts), output.assisted_decoding_stats))
    finally:
        for handle in handles:
            handle.remove()
    assert jumpy.call_count == 0, "the default schedule read the clock"
    assert calls[0][2].num_drafted > 0, calls[0][2]
    assert all(call == calls[0] for call in calls), [call[1:] for call in calls]
