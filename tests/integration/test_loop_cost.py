"""What one round of assisted decoding costs around the forward passes: host-device synchronizations and rounds.

Counted, not timed (timing belongs in `make bench`): a sync is a call that makes the host wait for the device (on a
GPU, a stall of the pipeline), as `scripts/bench_worker.py` counts them (`.item()`, `bool()`, `int()`, `float()` or
an index of a tensor, `.tolist()`, `nonzero`, `.cpu()`, boolean-mask indexing), outside the forward passes of the
two models. The syncs of a round are those counted between two forward passes of the model (the verifications), so
the set-up of `generate` before the first one is left out; every round is held to the limit.

What each test fails on:
- `test_syncs_per_round`: stock 4.31.0 (one sync per draft step to look for EOS, four or five more per round to
  decide the number of matches), and a loop that checks the vocabulary of the candidates per round.
- `test_first_round_drafts`: a loop whose first round runs the prompt alone (one more verification per call than
  stock and upstream), for a model that does not declare it needs that.
- `test_first_round_of_a_model_that_numbers_its_prompt_apart`: a loop that drafts in the first round of RoBERTa,
  whose uncached forward pass numbers a padded prompt otherwise than the cached passes (other tokens than greedy).
- `test_rounds_without_candidates_cost_what_a_greedy_step_costs`: the series before its settings group, whose rounds
  without candidates ran one more operation than greedy search's step (a column of the finished rows sliced every
  round, the round's tokens sliced when all were kept, the last token sliced to look for EOS).
- `test_rounds_without_candidates_do_not_sync`: a loop that compares candidates (and reads their number of matches)
  in rounds that drafted none, which the adaptive draft length runs when drafting does not pay.
- `test_lookups_that_find_nothing_back_off_to_greedy_steps`: a prompt lookup that looks up in every round (every
  round of text that never repeats runs the lookup and one more sync).
"""

import copy
import importlib.util
from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, RobertaForCausalLM

from integration._common import assert_same_tokens, run
from support.assistants import reset_assistant
from support.stats import recorded_stats
from support.tiny_models import draft_model, generate, generation_inputs, tiny_model

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
# one sync reads the matches of a round and whether every row is finished (with an EOS token)
MAX_SYNCS_PER_ROUND = 1


def _is_sync():
    spec = importlib.util.spec_from_file_location("bench_counting_for_tests", SCRIPTS / "benchkit" / "counting.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.is_sync


class _Count:
    """Counts the syncs outside the forward passes of `models`, and the forward passes of the first one."""

    def __init__(self, *models):
        from torch.overrides import TorchFunctionMode

        is_sync = _is_sync()
        self.syncs = 0
        self.operations = 0  # the torch calls outside the forward passes, attribute reads left out
        self.depth = 0
        self.target_forwards = 0
        self.target_input_lengths = []  # the number of tokens given to each forward pass of the target
        self.syncs_at_target_forwards = []  # the syncs counted before each forward pass of the target
        self.operations_at_target_forwards = []  # the same for the operations
        counter = self

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = getattr(func, "__name__", "")
                if counter.depth == 0 and name != "__get__":
                    counter.operations += 1
                if counter.depth == 0 and is_sync(name, args):
                    counter.syncs += 1
                return func(*args, **(kwargs or {}))

        self.mode = Mode()
        self.handles = []
        for index, model in enumerate(models):
            self.handles.append(model.register_forward_pre_hook(self._enter(index == 0), with_kwargs=True))
            self.handles.append(model.register_forward_hook(self._leave))

    def _enter(self, is_target):
        def hook(module, args, kwargs):
            self.depth += 1
            if is_target and self.depth == 1:
                self.target_forwards += 1
                self.syncs_at_target_forwards.append(self.syncs)
                self.operations_at_target_forwards.append(self.operations)
                ids = kwargs.get("input_ids", args[0] if args else None)
                self.target_input_lengths.append(ids.shape[1])

        return hook

    def _leave(self, module, args, output):
        self.depth -= 1

    def remove(self):
        for handle in self.handles:
            handle.remove()


def _counted(target, assistant, max_new_tokens, **kwargs):
    inputs = dict(generation_inputs(target, "plain"), max_new_tokens=max_new_tokens, **kwargs)
    # an EOS token that the tiny model never picks: the loop looks for it every round
    inputs.update(eos_token_id=target.config.vocab_size - 1, pad_token_id=0)
    counter = _Count(target, assistant)
    try:
        with counter.mode:
            output = run(target, assistant, **inputs)
    finally:
        counter.remove()
    return counter, output


@pytest.mark.parametrize("assistant_kind", ["draft", "itself"])
def test_syncs_per_round(assistant_kind):
    target = tiny_model(GPT2LMHeadModel, seed=0)
    assistant = draft_model(target) if assistant_kind == "draft" else copy.deepcopy(target)
    counter, _ = _counted(target, assistant, 32)
    # the syncs between two verifications: those of a whole round (the first one's set-up of `generate` left out)
    at_forwards = counter.syncs_at_target_forwards
    per_round = [later - earlier for earlier, later in zip(at_forwards[:-1], at_forwards[1:], strict=True)]
    assert len(per_round) >= 2, "not enough rounds"
    assert max(per_round) <= MAX_SYNCS_PER_ROUND, f"host-device syncs per round: {per_round}"


def test_first_round_drafts():
    """A copy of the model as the assistant accepts every candidate: 5 drafted in the first round, 7 in the second,
    then what `max_length` leaves: 16 new tokens in 3 verifications, as on stock 4.31.0."""
    target = tiny_model(GPT2LMHeadModel, seed=0)
    counter, output = _counted(target, copy.deepcopy(target), 16)
    assert output.shape[1] - generation_inputs(target, "plain")["input_ids"].shape[1] == 16
    assert counter.target_forwards == 3, f"{counter.target_forwards} verifications for 16 tokens"


def test_first_round_of_a_model_that_numbers_its_prompt_apart():
    """RoBERTa's position ids come from the padding of `input_ids` in an uncached pass, and from the cache length in
    the cached ones: its first round runs the padded prompt alone (it declares so), and the output is greedy's."""
    target = tiny_model(RobertaForCausalLM, seed=0)
    assert target._verify_candidates_with_prompt is False
    inputs = generation_inputs(target, "left_pad")
    greedy = run(target, **inputs)
    assistant = copy.deepcopy(target)
    counter = _Count(target, assistant)
    try:
        assisted = run(target, assistant, **inputs)
    finally:
        counter.remove()
    assert_same_tokens(greedy, assisted)
    prompt_length = inputs["input_ids"].shape[1]
    assert (
        counter.target_input_lengths[0] == prompt_length
    ), f"the first verification got {counter.target_input_lengths[0]} tokens for a prompt of {prompt_length}"


def test_rounds_without_candidates_do_not_sync():
    """The model as its own assistant cannot pay: the adaptive schedule drafts nothing, and its rounds are steps of
    greedy search, with the one sync that tells whether every row is finished."""
    target = tiny_model(GPT2LMHeadModel, seed=0)
    assistant = copy.deepcopy(target)
    inputs = dict(generation_inputs(target, "plain"), max_new_tokens=16)
    inputs.update(eos_token_id=target.config.vocab_size - 1, pad_token_id=0)
    reset_assistant(assistant)
    assistant.generation_config.num_assistant_tokens_schedule = "adaptive"
    counter = _Count(target, assistant)
    try:
        with counter.mode, torch.no_grad():
            output = generate(target, assistant_model=assistant, **inputs)
    finally:
        counter.remove()
    assert_same_tokens(run(target, **inputs), output)
    at_forwards = counter.syncs_at_target_forwards
    per_round = [later - earlier for earlier, later in zip(at_forwards[:-1], at_forwards[1:], strict=True)]
    assert counter.target_forwards == 16 and max(per_round) <= 1, f"host-device syncs per round: {per_round}"


def _between_target_forwards(counts):
    return [later - earlier for earlier, later in zip(counts[:-1], counts[1:], strict=True)]


def test_rounds_without_candidates_cost_what_a_greedy_step_costs():
    """The model as its own assistant never pays: every round drafts nothing, and must run no more operations and
    syncs outside the forward passes than a step of greedy search does."""
    target = tiny_model(GPT2LMHeadModel, seed=0)
    greedy = _Count(target)
    inputs = dict(generation_inputs(target, "plain"), max_new_tokens=24)
    inputs.update(eos_token_id=target.config.vocab_size - 1, pad_token_id=0)
    try:
        with greedy.mode:
            run(target, **inputs)
    finally:
        greedy.remove()
    with recorded_stats() as calls:
        assisted, _ = _counted(target, target, 24, num_assistant_tokens_schedule="adaptive")
    assert calls[-1].num_drafted == 0
    greedy_steps = _between_target_forwards(greedy.operations_at_target_forwards)
    rounds = _between_target_forwards(assisted.operations_at_target_forwards)
    assert max(rounds) <= min(greedy_steps), f"operations per round {rounds}, per greedy step {greedy_steps}"
    assert _between_target_forwards(assisted.syncs_at_target_forwards) == _between_target_forwards(
        greedy.syncs_at_target_forwards
    )


def _counting_gpt2(vocab=64):
    """A GPT-2 whose greedy output is the last token plus one: its text never repeats, so lookups find nothing."""
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=vocab, n_embd=32, n_layer=1, n_head=2, n_positions=128, tie_word_embeddings=False)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for block in model.transformer.h:
            for projection in (block.attn.c_proj, block.mlp.c_proj):
                projection.weight.zero_()
                projection.bias.zero_()
        model.transformer.wpe.weight.zero_()
        model.lm_head.weight.copy_(model.transformer.ln_f(model.transformer.wte.weight).roll(1, dims=0))
    return model


def test_lookups_that_find_nothing_back_off_to_greedy_steps():
    """On text that never repeats, prompt lookup finds nothing: after each miss the next 1, 2, 4, then 8 rounds look
    nothing up and cost what a step of greedy search costs; only the 7 rounds of 40 that look up cost more."""
    target = _counting_gpt2()
    inputs = dict(input_ids=torch.arange(1, 9)[None], max_new_tokens=40, eos_token_id=63, pad_token_id=0)
    greedy = _Count(target)
    try:
        with greedy.mode, torch.no_grad():
            expected = target.generate(**inputs)
    finally:
        greedy.remove()
    lookup = _Count(target)
    try:
        with lookup.mode, torch.no_grad():
            output = target.generate(**inputs, prompt_lookup_num_tokens=4)
    finally:
        lookup.remove()
    assert torch.equal(output, expected) and lookup.target_forwards == 40
    greedy_step = min(_between_target_forwards(greedy.operations_at_target_forwards))
    rounds = _between_target_forwards(lookup.operations_at_target_forwards)
    costlier = [index for index, operations in enumerate(rounds) if operations > greedy_step]
    # lookups at rounds 0, 2, 5, 10, 19, 28 and 37, each counted before the forward pass of its round
    assert costlier == [1, 4, 9, 18, 27, 36], f"operations per round {rounds}, per greedy step {greedy_step}"
    assert lookup.syncs - greedy.syncs <= 7, f"{lookup.syncs} syncs, greedy search {greedy.syncs}"
