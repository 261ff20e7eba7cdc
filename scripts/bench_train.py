"""Train the benchmark's target and draft models (`benchkit.train`): byte-level GPT-2 models on Python standard
library source files, cached under build/bench/trained/<key>/.

  python scripts/bench_train.py              # train unless cached, print the directory
  python scripts/bench_train.py --sampling   # also the draft distilled on the target's distributions
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit.train import main  # noqa: E402

if __name__ == "__main__":
    main()
