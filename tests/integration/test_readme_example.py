"""The README's usage example runs as written, and shows assisted generation returning greedy search's tokens.

README.md holds the example twice, each in the ```python block right after its marker: `<!-- readme-example: hub -->`
as users write it with hub checkpoints, and `<!-- readme-example: local -->` the same calls on the checkpoints of
`make real-models`. The suite has no hub: the hub block is compiled and held to the same calls as the local one. The
local block runs as written, with the suite's Python and the repository root as the working directory (it reads
`build/real-models/`); it skips, saying so, without the checkpoints, like the other real-model tests.

What the local block prints, and this test checks: `assisted == greedy: True` for SmolLM2 with its draft (a left-padded
batch of two prompts), `prompt lookup == greedy: True` for prompt lookup decoding on the same batch, and Whisper base's
transcript of a clip followed by `| assisted == greedy: True` for the speech recognition pipeline with a draft that
shares its encoder; the stats of the assisted text call, from its output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.real_models import DEFAULT_DIR, real_models_dir, real_models_or_skip

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
HUB = "<!-- readme-example: hub -->"
LOCAL = "<!-- readme-example: local -->"

# What both blocks must show: the calls the README's text describes.
CALLS = (
    "assistant_model=assistant",
    "prompt_lookup_num_tokens=",
    "return_dict_in_generate=True",
    "assisted.assisted_decoding_stats",
    "draft.model.encoder = whisper.model.encoder",
    '"automatic-speech-recognition"',
    'generate_kwargs={"assistant_model": draft}',
)
TRANSCRIPT = " He might even have been made amiable himself."  # Whisper base, greedy (docs/real-models.md)


def example(marker: str) -> str:
    """The code of the ```python block right after `marker` in README.md."""
    text = README.read_text()
    assert text.count(marker) == 1, f"README.md must hold {marker!r} exactly once"
    match = re.match(r"\s*```python\n(.*?)\n```", text.split(marker, 1)[1], re.DOTALL)
    assert match, f"README.md has no ```python block right after {marker!r}"
    return match.group(1) + "\n"


@pytest.mark.parametrize("marker", [HUB, LOCAL])
def test_the_examples_compile_and_make_the_same_calls(marker):
    code = example(marker)
    compile(code, f"README.md {marker}", "exec")
    missing = [call for call in CALLS if call not in code]
    assert not missing, f"the README example after {marker} lacks {missing}"


@pytest.mark.real_models
def test_the_local_example_runs_as_written_and_assisted_equals_greedy():
    real_models_or_skip()
    if real_models_dir() != DEFAULT_DIR.resolve():
        pytest.skip(f"REAL_MODELS_DIR names {real_models_dir()}; the README example reads {DEFAULT_DIR}")
    # One thread, as the suite's own processes run (tests/conftest.py): the workers already take every core.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", example(LOCAL)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"the README example failed:\n{result.stdout}\n{result.stderr[-4000:]}"
    lines = result.stdout.splitlines()
    assert "assisted == greedy: True" in lines, result.stdout
    assert "prompt lookup == greedy: True" in lines, result.stdout
    assert f"{TRANSCRIPT} | assisted == greedy: True" in lines, result.stdout
    assert not any(line.endswith("== greedy: False") for line in lines), result.stdout
    stats = [line for line in lines if line.startswith("AssistedDecodingStats(")]
    assert len(stats) == 1, result.stdout
    assert all(int(re.search(r"num_rounds=(\d+)", line).group(1)) > 0 for line in stats), result.stdout
