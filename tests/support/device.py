"""The device the suite runs on, and the deterministic settings it runs with.

`DEVICE` is "cuda" when torch sees a GPU and "cpu" otherwise; the environment variable `DEVICE=cpu|cuda` overrides
the choice. Every tensor the suite creates goes to `DEVICE`. Importing this module also switches torch to
deterministic float32 arithmetic (no TF32), so that greedy and assisted decoding are compared on equal terms.
"""

import os

import torch


def _resolve_device() -> str:
    requested = os.environ.get("DEVICE", "").strip().lower()
    if requested in ("", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested not in ("cpu", "cuda"):
        raise ValueError(f"DEVICE must be 'cpu' or 'cuda' (or unset), got {requested!r}")
    if requested == "cuda" and not torch.cuda.is_available():
        raise ValueError("DEVICE=cuda was requested but torch.cuda.is_available() is False")
    return requested


DEVICE = _resolve_device()

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = False
torch.backends.cudnn.deterministic = True
if DEVICE == "cuda":
    # cuBLAS needs this to be deterministic; it must be set before the first cuBLAS call.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
