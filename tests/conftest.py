"""Suite-wide set-up: report what the suite runs on, and refuse to run against the wrong transformers.

The tree transformers must be imported from is `TRANSFORMERS_TREE` (default: `build/transformers`, the patched
fork). `make test-stock` points it at `build/stock`. Tests that only exercise our own scripts do not import
transformers at all; the guard still runs, so that a test run never silently measures an unrelated install.
"""

import os
from pathlib import Path

import pytest
import torch

from support.device import DEVICE

REPO = Path(__file__).resolve().parent.parent


def expected_tree() -> Path:
    return Path(os.environ.get("TRANSFORMERS_TREE", REPO / "build" / "transformers")).resolve()


def _import_transformers():
    try:
        import transformers
    except ImportError as error:  # pragma: no cover - reported by the guard
        return None, error
    return transformers, None


def pytest_report_header(config):
    transformers, error = _import_transformers()
    where = Path(transformers.__file__).resolve().parent if transformers else f"not importable ({error})"
    version = transformers.__version__ if transformers else "-"
    return [
        f"device: {DEVICE}" + (f" ({torch.cuda.get_device_name(0)})" if DEVICE == "cuda" else ""),
        f"torch: {torch.__version__}, transformers: {version}",
        f"transformers imported from: {where}",
        f"expected tree: {expected_tree()}",
    ]


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes minutes (creates a virtual environment and installs into it)")
    config.addinivalue_line(
        "markers", "real_models: uses the real checkpoints of `make real-models` (skips, saying so, without them)"
    )
    # The tiny models gain nothing from intra-op threads, and pytest-xdist already runs one process per core: more
    # threads only oversubscribe the machine and make every test several times slower.
    torch.set_num_threads(1)


def pytest_sessionstart(session):
    transformers, error = _import_transformers()
    tree = expected_tree()
    if transformers is None:
        raise pytest.UsageError(f"transformers cannot be imported ({error}); run `make install` first")
    where = Path(transformers.__file__).resolve()
    if tree / "src" / "transformers" not in where.parents:
        raise pytest.UsageError(
            f"transformers was imported from {where.parent}, not from {tree}/src: the suite would test the wrong "
            "code. Run it through `make test` (or set TRANSFORMERS_TREE to the tree you mean)."
        )
