"""The draft length of assisted generation: per call, chosen by the assistant's generation config.

v4.31.0 kept the draft length on the assistant (`assistant_model.max_assistant_tokens`, 5 at first, +2 after a round
whose candidates were all accepted, -1 otherwise) and carried it over between calls, so that one call with a poor
prompt left every later call drafting one token, and two threads sharing an assistant raced on it. The series reads
`num_assistant_tokens` and `num_assistant_tokens_schedule` from the assistant's generation config at every call:
"heuristic" (v4.31.0's rule, also what code that sets `max_assistant_tokens` gets, from that value), "constant", and
"adaptive" (the default: as many candidates as pay, none included), and never writes to the assistant.

What each test fails on: stock 4.31.0 fails all but three (the seeded sampling calls, which it runs with its own
rule, and BART with a prompt of ones): it writes the value back and carries it over, ignores the generation config,
drafts past `max_length` and, with a padded prompt, returns other tokens than greedy search (#25020). A round must be
judged by the candidates it actually drafted: a round that drafted nothing changes nothing, and a draft cut short near
`max_length` that is accepted entirely counts as accepted (`test_heuristic_follows_the_rounds` fails on a loop that
compares the matches with the value instead).
"""

import copy
import threading

import pytest
import torch
from transformers import BartForConditionalGeneration, GPT2LMHeadModel
from transformers.generation import draft_length

from integration._common import assert_same_tokens, run
from support.assistants import reset_assistant
from support.tiny_models import draft_model, generate, generation_inputs, tiny_model

CLASSES = {"gpt2": GPT2LMHeadModel, "bart": BartForConditionalGeneration}
_MODELS = {}


def _target(name):
    if name not in _MODELS:
        _MODELS[name] = tiny_model(CLASSES[name], seed=0)
    return _MODELS[name]


class _Rounds:
    """Records, per forward pass of the model (one per round) and per thread, how many positions it saw in total
    (cache + new) and how many times the assistant ran since the model's previous forward pass (the candidates drafted
    in that round)."""

    def __init__(self, target, assistant):
        self.rounds = {}  # thread id -> [[total positions, candidates drafted], ...]
        self._drafted = {}
        self._handles = [
            target.register_forward_pre_hook(self._target, with_kwargs=True),
            assistant.register_forward_pre_hook(self._assistant),
        ]

    def _assistant(self, module, args):
        thread = threading.get_ident()
        self._drafted[thread] = self._drafted.get(thread, 0) + 1

    def _target(self, module, args, kwargs):
        thread = threading.get_ident()
        ids = kwargs.get("decoder_input_ids")
        if ids is None:
            ids = kwargs.get("input_ids", args[0] if args else None)
        past = kwargs.get("past_key_values")
        cached = past[0][0].shape[2] if past is not None else 0
        self.rounds.setdefault(thread, []).append([cached + ids.shape[1], self._drafted.pop(thread, 0)])

    def of(self, thread=None):
        return self.rounds[thread if thread is not None else threading.get_ident()]

    def remove(self):
        for handle in self._handles:
            handle.remove()


def _assisted(target, assistant, inputs, schedule=None, legacy_start=None, threads=None):
    """Assisted generation with `schedule` = (name, num_assistant_tokens) set on the assistant's generation config (or
    `max_assistant_tokens = legacy_start` set on it), without the suite's reset of the assistant."""
    reset_assistant(assistant)
    if schedule is not None:
        assistant.generation_config.num_assistant_tokens_schedule = schedule[0]
        assistant.generation_config.num_assistant_tokens = schedule[1]
    if legacy_start is not None:
        assistant.max_assistant_tokens = legacy_start
    with torch.no_grad():
        return generate(target, assistant_model=assistant, **inputs)


def _apply_rule(value, drafted, accepted):
    if drafted == 0:
        return value
    return value + 2.0 if accepted == drafted else max(1.0, value - 1.0)


def _check_heuristic(rounds, final_length, start):
    """The candidates drafted in each round follow v4.31.0's rule from `start`, capped by `max_length`."""
    lengths = [total - drafted for total, drafted in rounds]  # tokens at the start of each round
    value = float(start)
    for index, (_, drafted) in enumerate(rounds):
        next_length = lengths[index + 1] if index + 1 < len(lengths) else final_length
        room = final_length - lengths[index] - 1
        assert drafted == min(int(value), room) or (index + 1 == len(rounds) and drafted < int(value)), (
            f"round {index} drafted {drafted}, the rule gives {int(value)} (room {room}); rounds (positions seen, "
            f"candidates drafted): {rounds}"
        )
        value = _apply_rule(value, drafted, next_length - lengths[index] - 1)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_heuristic_follows_the_rounds(name):
    """A draft assistant (some rounds accepted, some not), 16 tokens: each round drafts what the rule gives from 5,
    capped by the room left before `max_length`."""
    target = _target(name)
    assistant = draft_model(target)
    inputs = dict(generation_inputs(target, "plain"), max_new_tokens=16)
    greedy = run(target, **inputs)
    recorder = _Rounds(target, assistant)
    try:
        assisted = _assisted(target, assistant, inputs, schedule=("heuristic", 5))
    finally:
        recorder.remove()
    assert_same_tokens(greedy, assisted)
    rounds = recorder.of()
    assert any(drafted for _, drafted in rounds), f"no candidate drafted: {rounds}"
    _check_heuristic(rounds, assisted.shape[1], 5)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_each_call_starts_anew(name):
    """Two calls in a row: the second starts from `num_assistant_tokens` again, whatever the first left."""
    target = _target(name)
    assistant = draft_model(target)
    inputs = dict(generation_inputs(target, "plain"), max_new_tokens=16)
    firsts = []
    for _ in range(2):
        recorder = _Rounds(target, assistant)
        try:
            _assisted(target, assistant, inputs, schedule=("heuristic", 3))
        finally:
            recorder.remove()
        firsts.append([drafted for _, drafted in recorder.of() if drafted][0])
    assert firsts == [3, 3], f"the first round of each call drafted {firsts}"


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_assistant_is_not_changed_by_a_call(name):
    target = _target(name)
    assistant = draft_model(target)
    reset_assistant(assistant)
    before = (set(vars(assistant)), assistant.generation_config.to_dict())
    inputs = dict(generation_inputs(target, "plain"), max_new_tokens=12)
    with torch.no_grad():
        generate(target, assistant_model=assistant, **inputs)
    assert (set(vars(assistant)), assistant.generation_config.to_dict()) == before


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_legacy_attribute_starts_the_heuristic(name):
    """Code written against v4.31.0 sets `assistant_model.max_assistant_tokens`: the heuristic starts from it, and the
    call leaves it as it was."""
    target = _target(name)
    assistant = draft_model(target)
    inputs = dict(generation_inputs(target, "plain"), max_new_tokens=16)
    greedy = run(target, **inputs)
    recorder = _Rounds(target, assistant)
    try:
        assisted = _assisted(target, assistant, inputs, schedule=("constant", 9), legacy_start=2.0)
    finally:
        recorder.remove()
    assert_same_tokens(greedy, assisted)
    _check_heuristic(recorder.of(), assisted.shape[1], 2)
    assert assistant.max_assistant_tokens == 2.0
    reset_assistant(assistant)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_constant_schedule(name):
    target = _target(name)
    assistant = draft_model(target)
    inputs = dict(generation_inputs(target, "plain"), max_new_tokens=16)
    greedy = run(target, **inputs)
    recorder = _Rounds(target, assistant)
    try:
        assisted = _assisted(target, assistant, inputs, schedule=("constant", 3))
    finally:
        recorder.remove()
    assert_same_tokens(greedy, assisted)
    final_length = assisted.shape[1]
    for total, drafted in recorder.of():
        room = final_length - (total - drafted) - 1
        assert drafted == min(3, room), f"rounds (positions seen, candidates drafted): {recorder.of()}"


def test_threads_get_their_own_draft_lengths():
    """Two threads share a model and its assistant, each with its own prompt: each call follows the rule from 5, as
    if it ran alone, and returns greedy's tokens."""
    target = _target("gpt2")
    assistant = draft_model(target)
    reset_assistant(assistant)
    first = generation_inputs(target, "plain")
    prompts = [first, dict(first, input_ids=first["input_ids"].flip(-1))]
    inputs = [dict(prompt, max_new_tokens=24) for prompt in prompts]
    greedy = [run(target, **one) for one in inputs]
    recorder = _Rounds(target, assistant)
    results, errors, idents = [None, None], [], [None, None]
    barrier = threading.Barrier(2)

    def work(index):
        try:
            idents[index] = threading.get_ident()
            barrier.wait()
            with torch.no_grad():
                results[index] = target.generate(**inputs[index], assistant_model=assistant)
        except Exception as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    finally:
        recorder.remove()
    assert not errors, errors
    for index in range(2):
        assert_same_tokens(greedy[index], results[index], f"(thread {index})")
        _check_heuristic(recorder.of(idents[index]), results[index].shape[1], 5)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_adaptive_is_greedy_exact(name):
    target = _target(name)
    assistant = draft_model(target)
    inputs = dict(generation_inputs(target, "left_pad" if name == "gpt2" else "plain"), max_new_tokens=24)
    greedy = run(target, **inputs)
    assert_same_tokens(greedy, _assisted(target, assistant, inputs, schedule=("adaptive", 5)))


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_adaptive_does_not_run_an_assistant_that_cannot_pay(name):
    """An assistant as large as the model (a copy of it, whose candidates are all accepted) cannot make generation
    faster: a round of k candidates costs k of its forward passes on top of the model's. The adaptive schedule never
    runs it; the heuristic drafts at every round."""
    target = _target(name)
    assistant = copy.deepcopy(target)
    inputs = dict(generation_inputs(target, "plain"), max_new_tokens=16)
    greedy = run(target, **inputs)
    recorder = _Rounds(target, assistant)
    try:
        assisted = _assisted(target, assistant, inputs, schedule=("adaptive", 5))
    finally:
        recorder.remove()
    assert_same_tokens(greedy, assisted)
    assert sum(drafted for _, drafted in recorder.of()) == 0, f"rounds: {recorder.of()}"


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_adaptive_seeded_sampling_is_reproducible(name):
    """With sampling, the adaptive schedule decides from the acceptance and the models' sizes, not from timings: the
    same seed gives the same tokens."""
    target = _target(name)
    assistant = draft_model(target)
    inputs = dict(generation_inputs(target, "plain"), max_new_tokens=24, do_sample=True, top_k=4)
    outputs = [_assisted(target, assistant, inputs, schedule=("adaptive", 5)) for _ in range(3)]
    for output in outputs[1:]:
        assert_same_tokens(outputs[0], output, "(two seeded sampling calls)")


class _LateDraft(draft_length.DraftLengthSchedule):
    """Drafts one candidate in the first round (as the adaptive schedule does, the assistant reading the prompt), none
    in the next `wait` rounds, then 2 a round; records the rounds it is told to leave out."""

    name = "late"

    def __init__(self, wait):
        super().__init__()
        self.wait, self.rounds, self.excluded = wait, 0, []

    def num_candidates(self, max_candidates):
        if self.rounds == 0:
            return min(1, max_candidates)
        return min(2, max_candidates) if self.rounds > self.wait else 0

    def update(self, num_drafted, num_accepted):
        self.rounds += 1

    def exclude_round(self):
        self.excluded.append(self.rounds)


@pytest.mark.parametrize("rows", [1, 3])
def test_a_draft_that_rejoins_late_reads_what_it_missed_in_bounded_passes(rows):
    """An assistant that drafted nothing for 150 rounds after the first reads the tokens it missed in passes of 64
    tokens at most (`AssistantCandidates.catch_up_length`), not all at once (it held up to 200 positions of logits in
    one pass), and the schedule leaves that round out of the cost of its candidates; the tokens are greedy's. Rounds
    that miss fewer read them with their first draft step, as before."""
    from unittest import mock

    target = tiny_model(GPT2LMHeadModel, seed=0, n_positions=256)
    assistant = draft_model(target, n_positions=256)
    prompt = torch.tensor([[5 + (7 * i) % 60 for i in range(8)]] * rows, device=target.device)
    kwargs = dict(max_new_tokens=170, do_sample=False, pad_token_id=0)
    schedule = _LateDraft(wait=150)
    widths = []
    handle = assistant.register_forward_hook(lambda module, args, output: widths.append(output.logits.shape[1]))
    late = mock.patch("transformers.generation.utils.get_draft_length_schedule", return_value=schedule)
    try:
        with torch.no_grad(), late:
            assisted = target.generate(prompt, assistant_model=assistant, **kwargs)
    finally:
        handle.remove()
    with torch.no_grad():
        assert_same_tokens(target.generate(prompt, **kwargs), assisted)
    assert widths[0] == prompt.shape[1], widths
    assert max(widths) == 64, f"the assistant read {max(widths)} positions in one pass"
    assert schedule.excluded and set(schedule.excluded) == {151}, schedule.excluded
