"""Benchmark assisted generation: stock v4.31.0, upstream 4.35.2, 4.36.2 and 5.23.0, the patched fork, side by side.

Each side runs in its own worker process (`scripts/bench_worker.py`) started with that side's interpreter and settings,
so no two transformers versions share a process: stock and patched come from the project's virtual environments, the
upstream releases from environments this script creates under build/bench/peers/ (`scripts/bench_peers.py`, pinned,
created once and reused). A side is an environment and its settings (attention implementation, draft length): 5.23.0
runs twice, as it ships (its own draft-length defaults and sdpa attention) and with eager attention (what the 4.31
models run). The driver runs every side on the same models and inputs, one run after the other, the order rotating
every repetition, after a warm-up, and checks that every side produced the same tokens. Each side's draft length is
set to the same state before every call: stock, 4.35 and 4.36 their heuristic from 5 candidates, 5.23.0 its defaults,
the patched fork its defaults (the adaptive schedule; --patched-draft heuristic:5 runs 4.31's rule).

Cases (a model pair and a number of new tokens; nothing downloaded):
  trained     a byte-level GPT-2 target and a draft distilled from it, trained here on Python standard library
              source (`scripts/bench_train.py`, cached under build/bench/trained/): the headline, 128 new tokens
  trained-16  the same pair, 16 new tokens: short generations, where the first round weighs most
  draft       random GPT-2 small (124M) with a random 2-layer draft of the same vocabulary: the draft rarely agrees
  draft-16    the same, 16 new tokens
  self        the GPT-2 small target as its own assistant: every candidate is accepted
  partial     the target assisted by a noisy copy of itself: part of the candidates are rejected (cache cropping)
  encdec      a random T5-small-like target with a 2+2-layer T5 draft
  loop        tiny random GPT-2 models whose forwards cost little: the loop's own cost per round dominates
  sampling-t1.0, sampling-t0.7
              the trained target sampling 128 tokens (top_k 0, seeded per repetition, the same seed on every side)
              with a draft distilled on its distributions (`bench_train.py --sampling`): plain sampling (patched),
              the 4.31 rule (stock), speculative sampling (patched), 5.23.0's own; time per token and new tokens per
              target forward; the check is every run's length (sampled tokens differ from side to side)
  sampling-t0.7-greedy-draft
              the same with the trained case's draft, distilled on greedy outputs: why the above has its own

Batched speech recognition (asr-batch): a random Whisper pair (built from configs, seeded), a WhisperTokenizer built
here over the 256 bytes, the default WhisperFeatureExtractor and 8 synthetic recordings, through
pipeline("automatic-speech-recognition", ..., batch_size=B) for B = 1, 4, 8 with generate_kwargs={"assistant_model":
...} and without: on the patched fork, time per row, assisted over greedy paired per repetition, and the same texts and
tokens; skipped (and said so) while its pipeline raises with the assistant. The other versions are asked once what they
do with a batch of 8.

The patched fork also runs with constant draft lengths 1-10 (--constant-draft) on the cases whose drafts pay
(trained, encdec): the best constant length in hindsight, against the patched side's own schedule.

Batches (the trained pair, patched side only: stock 4.31.0 and the upstream releases refuse assisted generation of a
batch, which the driver checks on the sides it runs): for B = 1, 4, 8, B held-out prompts of different lengths, left
padded, generated as one batch with the assistant and with greedy search, and one prompt at a time with each. Every
batched assisted run must return batched greedy search's tokens row for row, every separate call greedy search's
tokens for its prompt alone. A second variant, rows ending on an EOS (the space byte, so that the rows end at
different steps, as real batches do), runs the batched ways at B = 4, 8 in the same repetitions, time per token over
the rows' real new tokens; it stops the run where an assisted call does not return that repetition's batched greedy
tokens. The section goes into benchmarks.md between its own markers, so that a `--batch-only` run replaces that
section alone.

The run ends with its verdict: the noise floor (greedy patched/stock) and assisted patched/stock on the trained pair,
patched over the best upstream side on it, assisted over greedy on the worst of the poor-draft cases (draft, draft-16,
partial, self), and patched over its best constant draft length on the worse of trained and encdec.

The code is the package scripts/benchkit/ (its __init__ says where what varies lives: workloads, sides and their
environments, measurement, counting, report, plots).

Usage:
  python scripts/bench.py --patched-python .venv/bin/python --stock-python .venv-stock/bin/python [--quick]
  python scripts/bench.py ... --peers ""          # stock and patched only
  python scripts/bench.py ... --peers 5.23.0      # one upstream release (both its sides)
  python scripts/bench.py ... --constant-draft 1-10 --patched-draft heuristic:5   # other patched draft lengths
  python scripts/bench.py --patched-python .venv/bin/python --batch-only [--quick]   # the batch table alone
  python scripts/bench.py --report-from build/bench/results.json   # rebuild the report of an earlier run
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit.cli import main  # noqa: E402

if __name__ == "__main__":
    main(description=__doc__.split("\n")[0])
