"""The assisted-generation benchmark (`scripts/bench.py`, `make bench`), by what varies.

  workloads.py  model pairs (built in every side's interpreter), cases (pair + new tokens), the batch prompts.
                A workload: a builder decorated with @pair and a Case line in CASES.
  peers.py      the upstream releases: pins and environments under build/bench/peers/, and the sides each runs.
                A peer: one Peer(...) in PEERS.
  settings.py   what a side sets: attention implementation and draft length (DraftLength: the one hook's input).
  sides.py      a side = (environment, settings); the sides of a run, in table order. Patched sides with other
                draft lengths: --patched-draft, --constant-draft (run_sides).
  train.py      the trained target/draft pair, and the draft distilled on the target's distributions for the
                sampling cases (`scripts/bench_train.py [--sampling]`).
  measure.py    the driver's measuring: worker processes, plan (repetitions, budget), warm-up, rotation, batches.
  clock.py      the worker's clock: forward hooks and round timestamps.
  counting.py   tensor operations and host-device syncs outside the forwards (worker) and their table (driver).
  worker.py     the worker: builds the models, applies the side's settings, times one generate call per command.
  summary.py    medians, paired ratios, token checks.
  report.py     benchmarks.md, its Batches section, the printed summary and the verdict lines.
  plots.py      the figures.
  cli.py        the command line.

The worker side (worker, clock, counting, workloads, settings) runs in every side's interpreter, 4.31 to 5.x, so it
uses no API that only some versions have without checking; the driver side imports neither torch nor transformers.
"""
