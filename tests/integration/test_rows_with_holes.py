"""Assisted generation of a batch whose rows keep all their accepted candidates (rows with holes).

For the decoder-only classes whose `_supports_rows_with_holes` says so (GPT-2, Llama, GPT-NeoX, OPT, Bloom), a
left-padded batch of 4 or 8 rows of different lengths, with an assistant that is a lightly noised copy of the model
(it agrees often, and differently per row) and a constant draft length of 4:

- every row equals batched greedy search of the same padded batch, also when rows end at different steps on an EOS;
- rows that are done leave the batch: the forward passes of both models narrow as rows end;
- the model runs at most 1.10 times the forward passes of the batch's slowest row generating alone, or one more
  (rows that stay aligned accept, each round, what the row accepting fewest accepts, and run far more);
- the holes are bounded: with drafts that agree rarely or unevenly, over 200 new tokens, the caches never hold more
  than `BatchRows.max_width` positions, batched greedy search's length and a tenth more (they grew to 1.9 times it);
- with sampling, the call runs and every row holds valid tokens, padding only after its EOS;
- with a logits processor that reads the sequences, a second length limit, or prompt lookup, the rows stay aligned
  and still equal greedy search.

Whisper, which declares it too, on batches of 4 and 8 clips of noise, with and without forced and begin-suppressed
tokens: equal to batched greedy search, and as many forward passes as the slowest clip alone.

The counting tests fail on the series before its rows group, whose rows stay aligned.
"""

import copy
from unittest import mock

import pytest
import torch
from transformers import (
    BloomForCausalLM,
    GPT2LMHeadModel,
    GPTNeoXForCausalLM,
    LlamaForCausalLM,
    OPTForCausalLM,
    StoppingCriteriaList,
    WhisperForConditionalGeneration,
)
from transformers.generation.candidates import BatchRows
from transformers.generation.stopping_criteria import MaxNewTokensCriteria

from support.tiny_models import tiny_model

CLASSES = [GPT2LMHeadModel, LlamaForCausalLM, GPTNeoXForCausalLM, OPTForCausalLM, BloomForCausalLM]
MAX_NEW_TOKENS = 20
PAD = 0
MAX_FORWARD_RATIO = 1.10


def _models(cls, noise=0.04):
    model = tiny_model(cls, seed=0)
    return model, _noised(model, noise)


def _noised(model, noise):
    """A copy of `model` with noise on its weights, drafting 4 candidates a round."""
    assistant = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in assistant.parameters():
            noise_tensor = torch.randn(parameter.shape, generator=generator).to(parameter.device)
            parameter.add_(noise * parameter.std().nan_to_num(0.0) * noise_tensor)
    assistant.generation_config.num_assistant_tokens = 4
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    return assistant


def _batch(model, rows, seed=0):
    """`rows` prompts of lengths 3 to 10, left-padded with `PAD`."""
    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    lengths = [3 + (7 * row) % 8 for row in range(rows)]
    width = max(lengths)
    input_ids = torch.full((rows, width), PAD, dtype=torch.long)
    attention_mask = torch.zeros((rows, width), dtype=torch.long)
    for row, length in enumerate(lengths):
        input_ids[row, width - length :] = torch.randint(5, vocab, (length,), generator=generator)
        attention_mask[row, width - length :] = 1
    device = model.device
    return input_ids.to(device), attention_mask.to(device)


def _generate(model, input_ids, attention_mask, assistant=None, **kwargs):
    kwargs = dict(dict(max_new_tokens=MAX_NEW_TOKENS, do_sample=False, pad_token_id=PAD), **kwargs)
    if assistant is not None:
        kwargs.update(assistant_model=assistant, num_assistant_tokens=4, num_assistant_tokens_schedule="constant")
    with torch.no_grad():
        return model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)


class _ForwardCount:
    """The forward passes of `model`, and the rows of each (`widths`)."""

    def __init__(self, model):
        self.count = 0
        self.widths = []
        self.handle = model.register_forward_hook(self._hook)

    def _hook(self, module, args, output):
        self.count += 1
        self.widths.append(output.logits.shape[0])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def _eos(greedy, prompt_width):
    """A token that the first row generates a few tokens in, and not before: rows end at different steps."""
    new_tokens = greedy[0, prompt_width:].tolist()
    return next((token for i, token in enumerate(new_tokens[3:], 3) if token not in new_tokens[:i]), None)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_class_supports_rows_with_holes(cls):
    model, _ = _models(cls)
    assert model._supports_rows_with_holes(64) is True


@pytest.mark.parametrize("rows", [4, 8])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_rows_equal_batched_greedy(cls, rows):
    model, assistant = _models(cls)
    input_ids, attention_mask = _batch(model, rows)
    greedy = _generate(model, input_ids, attention_mask)
    assisted = _generate(model, input_ids, attention_mask, assistant)
    assert assisted.tolist() == greedy.tolist()


@pytest.mark.parametrize("rows", [4, 8])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_rows_ending_on_eos_equal_batched_greedy(cls, rows):
    model, assistant = _models(cls)
    input_ids, attention_mask = _batch(model, rows, seed=1)
    eos = _eos(_generate(model, input_ids, attention_mask), input_ids.shape[1])
    assert eos is not None
    greedy = _generate(model, input_ids, attention_mask, eos_token_id=eos)
    assisted = _generate(model, input_ids, attention_mask, assistant, eos_token_id=eos)
    assert assisted.tolist() == greedy.tolist()
    # (the step where each row ends: its EOS, or the last one)
    ends = [row.index(eos) if eos in row else len(row) for row in greedy[:, input_ids.shape[1] :].tolist()]
    assert min(ends) < MAX_NEW_TOKENS and len(set(ends)) > 1, f"the rows end at steps {ends}"


def forward_counts(cls, rows):
    """The model's forward passes for the batch, and for its slowest row generating alone (unpadded)."""
    model, assistant = _models(cls)
    input_ids, attention_mask = _batch(model, rows)
    with _ForwardCount(model) as batch:
        _generate(model, input_ids, attention_mask, assistant)
    alone = []
    for row in range(rows):
        row_ids = input_ids[row : row + 1, attention_mask[row].bool()]
        with _ForwardCount(model) as count:
            _generate(model, row_ids, torch.ones_like(row_ids), assistant)
        alone.append(count.count)
    return batch.count, max(alone)


@pytest.mark.parametrize("rows", [4, 8])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_batch_runs_as_many_forward_passes_as_its_slowest_row(cls, rows):
    batch, slowest = forward_counts(cls, rows)
    assert slowest < MAX_NEW_TOKENS, "the assistant must agree in part"
    # (a round kept short of what rows accepted, to bound their holes, may cost one more)
    assert batch <= max(
        MAX_FORWARD_RATIO * slowest, slowest + 1
    ), f"{batch} forward passes for a batch whose slowest row runs {slowest}"


@pytest.mark.parametrize("eos", [False, True], ids=["length", "eos"])
@pytest.mark.parametrize("rows", [4, 8])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_rows_that_are_done_leave_the_batch(cls, rows, eos):
    """A row that is done (its EOS, or its length) is no longer drafted for nor verified: the forward passes of both
    models narrow as rows end, and the call still returns every row, in its place."""
    model, assistant = _models(cls)
    input_ids, attention_mask = _batch(model, rows, seed=1)
    kwargs = {}
    if eos:
        kwargs["eos_token_id"] = _eos(_generate(model, input_ids, attention_mask), input_ids.shape[1])
    greedy = _generate(model, input_ids, attention_mask, **kwargs)
    with _ForwardCount(model) as verified, _ForwardCount(assistant) as drafted:
        assisted = _generate(model, input_ids, attention_mask, assistant, **kwargs)
    assert assisted.tolist() == greedy.tolist()
    for widths in (verified.widths, drafted.widths):
        assert widths[0] == rows and widths[-1] < rows, f"rows per forward pass: {widths}"
        assert widths == sorted(widths, reverse=True), f"rows per forward pass: {widths}"


def test_rows_ride_along_with_a_model_kwarg_not_per_row():
    """A tensor model kwarg that is not one row per row of the batch (a head mask) cannot be cut to the rows left: the
    rows that are done stay in the batch, and the tokens are the same."""
    model, assistant = _models(GPT2LMHeadModel)
    input_ids, attention_mask = _batch(model, 4, seed=1)
    head_mask = torch.ones(model.config.n_layer, model.config.n_head, device=model.device)
    greedy = _generate(model, input_ids, attention_mask, head_mask=head_mask)
    with _ForwardCount(model) as verified:
        assisted = _generate(model, input_ids, attention_mask, assistant, head_mask=head_mask)
    assert assisted.tolist() == greedy.tolist()
    assert set(verified.widths) == {4}, f"rows per forward pass: {verified.widths}"


@pytest.mark.parametrize("rows", [4, 8])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_sampling_rows_hold_valid_tokens(cls, rows):
    model, assistant = _models(cls)
    input_ids, attention_mask = _batch(model, rows, seed=2)
    eos = _eos(_generate(model, input_ids, attention_mask), input_ids.shape[1])
    torch.manual_seed(0)
    sampled = _generate(model, input_ids, attention_mask, assistant, do_sample=True, eos_token_id=eos)
    width = input_ids.shape[1]
    assert sampled.shape[0] == rows and width < sampled.shape[1] <= width + MAX_NEW_TOKENS
    assert sampled[:, :width].tolist() == input_ids.tolist()
    new_tokens = sampled[:, width:]
    assert ((new_tokens >= 0) & (new_tokens < model.config.vocab_size)).all()
    for row in new_tokens.tolist():
        end = row.index(eos) + 1 if eos in row else len(row)
        assert end == len(row) or set(row[end:]) == {PAD}, "padding only after the row's EOS"
        assert end == len(row) or eos in row[:end]
    # the same seed gives the same tokens
    torch.manual_seed(0)
    again = _generate(model, input_ids, attention_mask, assistant, do_sample=True, eos_token_id=eos)
    assert again.tolist() == sampled.tolist()


def test_top_k_1_sampling_equals_batched_greedy():
    model, assistant = _models(GPT2LMHeadModel)
    input_ids, attention_mask = _batch(model, 4)
    greedy = _generate(model, input_ids, attention_mask)
    torch.manual_seed(0)
    sampled = _generate(model, input_ids, attention_mask, assistant, do_sample=True, top_k=1)
    assert sampled.tolist() == greedy.tolist()


def test_processor_reading_the_sequences_keeps_rows_aligned():
    model, assistant = _models(GPT2LMHeadModel)
    input_ids, attention_mask = _batch(model, 4)
    greedy = _generate(model, input_ids, attention_mask, repetition_penalty=1.5, no_repeat_ngram_size=2)
    assisted = _generate(model, input_ids, attention_mask, assistant, repetition_penalty=1.5, no_repeat_ngram_size=2)
    assert assisted.tolist() == greedy.tolist()


def test_undeclared_assistant_keeps_rows_aligned():
    """An assistant that does not declare it keeps the rows aligned: the same tokens, more forward passes."""
    model, assistant = _models(GPT2LMHeadModel)
    input_ids, attention_mask = _batch(model, 4)
    greedy = _generate(model, input_ids, attention_mask)
    assistant._supports_rows_with_holes = lambda cache_length: False
    with _ForwardCount(model) as aligned:
        assisted = _generate(model, input_ids, attention_mask, assistant)
    assert assisted.tolist() == greedy.tolist()
    del assistant._supports_rows_with_holes
    with _ForwardCount(model) as with_holes:
        _generate(model, input_ids, attention_mask, assistant)
    assert with_holes.count < aligned.count


@pytest.mark.parametrize("eos", [False, True])
def test_one_sync_per_round(eos):
    """A round reads what it needs (the most candidates a row keeps, whether rows are left, how many tokens they may
    still get) in one host-device sync, with or without an EOS token."""
    from integration.test_loop_cost import _Count

    model, assistant = _models(GPT2LMHeadModel)
    input_ids, attention_mask = _batch(model, 4)
    kwargs = {"eos_token_id": model.config.vocab_size - 1} if eos else {}
    counter = _Count(model, assistant)
    try:
        with counter.mode:
            _generate(model, input_ids, attention_mask, assistant, **kwargs)
    finally:
        counter.remove()
    at_forwards = counter.syncs_at_target_forwards
    per_round = [later - earlier for earlier, later in zip(at_forwards[:-1], at_forwards[1:], strict=True)]
    assert len(per_round) >= 2 and max(per_round) <= 1, f"host-device syncs per round: {per_round}"


def test_a_second_length_limit_keeps_rows_aligned():
    """A length limit of the caller's besides `max_new_tokens` is honoured: the rows stay aligned, as greedy search
    stops them."""
    model, assistant = _models(GPT2LMHeadModel)
    input_ids, attention_mask = _batch(model, 4)
    with pytest.warns(FutureWarning):  # (deprecated, but taken)
        limit = StoppingCriteriaList([MaxNewTokensCriteria(input_ids.shape[1], 7)])
    greedy = _generate(model, input_ids, attention_mask, stopping_criteria=limit)
    assisted = _generate(model, input_ids, attention_mask, assistant, stopping_criteria=limit)
    assert greedy.shape[1] == input_ids.shape[1] + 7 and assisted.tolist() == greedy.tolist()


def test_prompt_lookup_keeps_rows_aligned():
    """Prompt lookup drafts as many candidates in every row as the row finding fewest: on a CPU, verifying candidates
    that most rows reject cost more than the rounds the others saved (docs/design.md, the rows group)."""
    model, _ = _models(GPT2LMHeadModel)
    input_ids, attention_mask = _batch(model, 4)
    greedy = _generate(model, input_ids, attention_mask)
    with mock.patch.object(BatchRows, "keep_own_from", autospec=True, side_effect=BatchRows.keep_own_from) as spy:
        lookup = _generate(model, input_ids, attention_mask, prompt_lookup_num_tokens=4)
    assert lookup.tolist() == greedy.tolist() and spy.call_args.args[1] is None


def _whisper_batch(rows):
    model, assistant = _models(WhisperForConditionalGeneration)
    generator = torch.Generator().manual_seed(rows)
    features = torch.randn(rows, model.config.num_mel_bins, 2 * model.config.max_source_positions, generator=generator)
    return model, assistant, features.to(model.device)


WHISPER_PROMPTS = {"plain": {}, "forced": {"forced_decoder_ids": [[1, 5], [2, 6]], "begin_suppress_tokens": [7, 8]}}


@pytest.mark.parametrize("prompt", list(WHISPER_PROMPTS))
@pytest.mark.parametrize("rows", [4, 8])
def test_whisper_rows_equal_batched_greedy_and_run_as_many_forwards_as_the_slowest(rows, prompt):
    """Whisper's positions follow the decoder mask that rows with holes get; with forced and begin-suppressed tokens,
    the rows keep their own once those are behind them."""
    model, assistant, features = _whisper_batch(rows)
    kwargs = dict(max_new_tokens=16, do_sample=False, **WHISPER_PROMPTS[prompt])
    assisted_kwargs = dict(kwargs, assistant_model=assistant, num_assistant_tokens=4)
    assisted_kwargs["num_assistant_tokens_schedule"] = "constant"
    with torch.no_grad():
        greedy = model.generate(features, **kwargs)
        with mock.patch.object(BatchRows, "keep_own_from", autospec=True, side_effect=BatchRows.keep_own_from) as spy:
            with _ForwardCount(model) as batch:
                assisted = model.generate(features, **assisted_kwargs)
        alone = []
        for row in range(rows):
            with _ForwardCount(model) as count:
                model.generate(features[row : row + 1], **assisted_kwargs)
            alone.append(count.count)
    assert spy.call_args.args[1] == (0 if prompt == "plain" else 4)
    assert assisted.tolist() == greedy.tolist()
    assert batch.count <= MAX_FORWARD_RATIO * max(alone), f"{batch.count} forward passes, the rows alone {alone}"
    if min(alone) < max(alone):  # rows that are done leave the batch
        assert batch.widths[-1] < rows, f"rows per forward pass: {batch.widths}"


class _WidestPass:
    """The most positions a forward pass of `model` reads: its attention mask's width, the cache and the new tokens."""

    def __init__(self, model):
        self.width = 0
        self.handle = model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs):
        self.width = max(self.width, kwargs["attention_mask"].shape[1])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.remove()


@pytest.mark.parametrize("draft_length", [4, 10])
@pytest.mark.parametrize("agreement", ["rarely", "unevenly"])
@pytest.mark.parametrize("rows", [4, 8])
@pytest.mark.parametrize("cls", [GPTNeoXForCausalLM, LlamaForCausalLM], ids=lambda cls: cls.__name__)
def test_holes_are_bounded(cls, rows, agreement, draft_length):
    """Over 200 new tokens, with a draft of other weights (it agrees rarely) or a noisier copy (unevenly per row), the
    caches never hold more than `BatchRows.max_width` positions: batched greedy search's and a tenth more."""
    model = tiny_model(cls, seed=0, max_position_embeddings=512)
    if agreement == "rarely":
        assistant = tiny_model(cls, seed=5, max_position_embeddings=512)
    else:
        assistant = _noised(model, 0.3)
    input_ids, attention_mask = _batch(model, rows, seed=2)
    kwargs = dict(max_new_tokens=200, do_sample=False, pad_token_id=PAD)
    with torch.no_grad(), _WidestPass(model) as greedy_pass:
        greedy = model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    with torch.no_grad(), _WidestPass(model) as assisted_pass:
        assisted = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            assistant_model=assistant,
            num_assistant_tokens=draft_length,
            num_assistant_tokens_schedule="constant",
            **kwargs,
        )
    assert assisted.tolist() == greedy.tolist()
    max_length = input_ids.shape[1] + 200
    assert greedy_pass.width == max_length - 1
    assert assisted_pass.width <= max_length + max(16, max_length // 10), (assisted_pass.width, greedy_pass.width)


@pytest.mark.parametrize("cls", [LlamaForCausalLM, GPTNeoXForCausalLM], ids=lambda cls: cls.__name__)
def test_dynamic_rotary_scaling_keeps_rows_aligned(cls):
    """Dynamic rotary scaling takes its base from the cache length, which holes make longer than the sequence: where
    holes could push it past `max_position_embeddings`, rows stay aligned, and equal batched greedy search (rows
    differed, with `max_length` below `max_position_embeddings`)."""
    # (GPT-NeoX rotates all of each head: a tiny head's default share is too small for dynamic scaling)
    rotary = {"rotary_pct": 1.0} if cls is GPTNeoXForCausalLM else {}
    model = tiny_model(
        cls, seed=0, max_position_embeddings=40, rope_scaling={"type": "dynamic", "factor": 2.0}, **rotary
    )
    assistant = _noised(model, 0.2)
    input_ids, attention_mask = _batch(model, 12, seed=3)
    max_new_tokens = 40 - input_ids.shape[1] - 1
    assert not model._supports_rows_with_holes(40 + 16)
    greedy = _generate(model, input_ids, attention_mask, max_new_tokens=max_new_tokens)
    with mock.patch.object(BatchRows, "keep_own_from", autospec=True, side_effect=BatchRows.keep_own_from) as spy:
        assisted = _generate(model, input_ids, attention_mask, assistant, max_new_tokens=max_new_tokens)
    assert spy.call_args.args[1] is None
    assert assisted.tolist() == greedy.tolist()
    # without dynamic scaling, the same class keeps holes
    assert tiny_model(cls, seed=0, max_position_embeddings=40, **rotary)._supports_rows_with_holes(40 + 16)


def test_gpt2_rows_within_n_positions():
    """GPT-2's causal mask is a buffer of `n_positions`: a batch that batched greedy search runs to `max_length` just
    under it runs assisted too, its rows aligned (the holes pushed the cache past it: a size mismatch)."""
    model = tiny_model(GPT2LMHeadModel, seed=0, n_positions=64)
    assert not model._supports_rows_with_holes(62 + 16) and model._supports_rows_with_holes(64)
    for assistant, seed in ((tiny_model(GPT2LMHeadModel, seed=5, n_positions=64), 0), (_noised(model, 0.3), 1)):
        input_ids, attention_mask = _batch(model, 4, seed=seed)
        greedy = _generate(model, input_ids, attention_mask, max_new_tokens=None, max_length=62)
        assisted = _generate(model, input_ids, attention_mask, assistant, max_new_tokens=None, max_length=62)
        assert assisted.tolist() == greedy.tolist()


def test_a_processor_says_how_far_it_reads_the_sequences():
    """Whether a logits processor reads only the logits is the processor's to say (`input_ids_read_until`), so that a
    user's own can: one that reads nothing of the sequences lets the rows keep their own, one that says nothing keeps
    them aligned; both equal batched greedy search."""
    from transformers import LogitsProcessor, LogitsProcessorList

    class Sharpen(LogitsProcessor):
        input_ids_read_until = 0

        def __call__(self, input_ids, scores):
            return scores * 2.0

    class SharpenSilently(LogitsProcessor):
        def __call__(self, input_ids, scores):
            return scores * 2.0

    model, assistant = _models(GPT2LMHeadModel)
    input_ids, attention_mask = _batch(model, 4)
    for processor, keeps_own in ((Sharpen(), True), (SharpenSilently(), False)):
        processors = LogitsProcessorList([processor])
        greedy = _generate(model, input_ids, attention_mask, logits_processor=processors)
        with mock.patch.object(BatchRows, "keep_own_from", autospec=True, side_effect=BatchRows.keep_own_from) as spy:
            assisted = _generate(model, input_ids, attention_mask, assistant, logits_processor=processors)
        assert (spy.call_args.args[1] is not None) == keeps_own
        assert assisted.tolist() == greedy.tolist()
