"""Writing a transformers checkpoint directory: `model.safetensors` (float32) and the JSON files.

The safetensors layout: an unsigned 64-bit little-endian header length, the header (JSON: for each tensor its dtype,
shape and [begin, end) byte offsets into the data that follows, plus `__metadata__` {"format": "pt"}, which
transformers 4.31 requires), padded with spaces to a multiple of 8 bytes, then the tensors' bytes, row-major.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> int:
    """Writes `tensors` (each converted to contiguous little-endian float32) and returns the number of parameters."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    arrays = []
    offset = 0
    for name in sorted(tensors):
        array = np.ascontiguousarray(tensors[name], dtype="<f4")
        if not np.isfinite(array).all():
            raise ValueError(f"{name}: the converted weights hold NaN or infinite values")
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
        arrays.append(array)
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(encoded)))
        handle.write(encoded)
        for array in arrays:
            handle.write(array.tobytes())
    return sum(array.size for array in arrays)


def write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
