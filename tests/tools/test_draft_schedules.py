"""scripts/draft_schedules.py replays a draft-length schedule on the positions where the draft disagrees with the
model's greedy continuation. Its comparisons only mean something if a replayed call drafts and accepts, round after
round, what a real assisted call does: checked here on a small pair that agrees on part of the tokens."""

import copy
import sys
from pathlib import Path

import pytest
import torch

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import draft_schedules  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
from transformers.generation import draft_length  # noqa: E402
from transformers.generation import utils as generation_utils  # noqa: E402

NEW_TOKENS = 40


class Recording(draft_length.DraftLengthSchedule):
    """Wraps a schedule and records (drafted, accepted) per round."""

    def __init__(self, schedule):
        super().__init__()
        self.schedule, self.rounds = schedule, []
        self.judges_prompt = schedule.judges_prompt
        self.prompt_positions = getattr(schedule, "prompt_positions", 0)

    def num_candidates(self, max_candidates):
        return self.schedule.num_candidates(max_candidates)

    def judge_prompt(self, num_positions, num_agreeing):
        self.rounds.append(("prompt", num_positions, num_agreeing))
        self.schedule.judge_prompt(num_positions, num_agreeing)

    def update(self, drafted, accepted):
        self.rounds.append((drafted, accepted))
        self.schedule.update(drafted, accepted)

    def stop_reason(self):
        return self.schedule.stop_reason()


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=16, n_positions=128, eos_token_id=None)
    target = GPT2LMHeadModel(config).eval()
    assistant = copy.deepcopy(target)
    with torch.no_grad():
        for parameter in assistant.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    prompt = torch.randint(0, config.vocab_size, (1, 8))
    kwargs = {"attention_mask": torch.ones_like(prompt), "max_new_tokens": NEW_TOKENS, "pad_token_id": 0}
    with torch.no_grad():
        sequence = target.generate(prompt, **kwargs)
        predicted = assistant(sequence).logits.argmax(-1)[0]
        expected = target(prompt).logits.argmax(-1)[0]
    mismatches = set(
        (predicted[prompt.shape[1] - 1 : -1] != sequence[0, prompt.shape[1] :]).nonzero().flatten().tolist()
    )
    assert 3 < len(mismatches) < NEW_TOKENS - 3, "the pair should agree on part of the tokens"
    # the agreement on the prompt that a real call reads in its first round (7 positions of the 8-token prompt)
    positions = prompt.shape[1] - 1
    prompt_agreement = (positions, int((predicted[:positions] == expected[:positions]).sum()))
    return target, assistant, prompt, kwargs, mismatches, prompt_agreement


@pytest.mark.parametrize(
    "make",
    [
        lambda: draft_length.ConstantDraftLength(3),
        lambda: draft_length.HeuristicDraftLength(5),
        lambda: draft_length.AdaptiveDraftLength(0.1, clock=None, judges_prompt=True),  # untimed: deterministic
    ],
    ids=["constant", "heuristic", "adaptive"],
)
def test_replay_drafts_and_accepts_what_a_real_call_does(pair, make, monkeypatch):
    target, assistant, prompt, kwargs, mismatches, prompt_agreement = pair
    real = Recording(make())
    monkeypatch.setattr(generation_utils, "get_draft_length_schedule", lambda *args, **kwargs: real)
    target.generate(prompt, assistant_model=assistant, **kwargs)

    replayed = Recording(make())
    draft_schedules.simulate(replayed, mismatches, NEW_TOKENS, per_candidate=0.2, prompt=prompt_agreement)
    assert replayed.rounds == real.rounds
    assert (("prompt", *prompt_agreement) in real.rounds) == real.judges_prompt


def test_the_adaptive_schedule_stays_near_greedy_with_a_draft_that_never_agrees():
    time, rounds, steps = draft_schedules.simulate(
        draft_length.AdaptiveDraftLength(0.1), set(range(128)), 128, per_candidate=0.3
    )
    # the first round's candidate and a few probes, less and less often
    assert rounds == 128 and steps <= 5
    assert time / draft_schedules.best_in_hindsight(set(range(128)), 128, 0.3) < 1.02
