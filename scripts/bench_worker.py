"""Benchmark worker: times generation with the transformers its interpreter imports (`benchkit.worker`).

Started by `scripts/bench.py`, once per side (stock 4.31.0, the upstream releases it is compared with, the patched
fork), with that side's interpreter, so that no two transformers versions ever share a process; it answers the
driver's JSON commands on stdin. `Worker` is the same class in this process for `scripts/cuda/bench_patched.py`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit.worker import Worker, main  # noqa: E402, F401

if __name__ == "__main__":
    main()
