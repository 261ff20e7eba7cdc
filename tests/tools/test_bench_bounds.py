"""The oracle of scripts/bench_bounds.py: what a lookup in the earlier tokens could propose and have accepted."""

import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import bench_bounds  # noqa: E402


def test_oracle_takes_the_continuation_accepted_furthest():
    # prompt: 1 2 3 4 | 2 3 9 ; new tokens: 2 3 4 5
    sequence = [1, 2, 3, 4, 2, 3, 9, 2, 3, 4, 5]
    accepted = bench_bounds.oracle_acceptance(sequence, prompt_length=7, num_new=4)
    assert accepted[0] == 0  # "9" never occurred before: nothing to propose
    # after "9 2": the first "2" continues "3 4 ..." (2 accepted), the second "3 9 ..." (1 accepted)
    assert accepted[1] == 2
    assert accepted[3] == 0  # the last position leaves room for the model's token alone


def test_oracle_never_counts_past_the_new_tokens():
    sequence = [5, 6, 5, 6, 5, 6]
    accepted = bench_bounds.oracle_acceptance(sequence, prompt_length=2, num_new=4, max_tokens=10)
    # (before the first new token, the prompt's last token "6" has no earlier occurrence to continue from)
    assert accepted == [0, 2, 1, 0]
