"""A reader for CTranslate2's `model.bin` (binary version 6), the format faster-whisper checkpoints ship in.

The layout this reader relies on, all integers little-endian:

    u32     binary version (6)
    str     spec name ("WhisperSpec")
    u32     spec revision
    u32     number of variables N
    N x     variable:
              str     name ("encoder/layer_0/self_attention/linear_0/weight", ...)
              u8      rank R
              R x u32 dimensions
              u8      data type (see DTYPES)
              u32     size of the data in bytes
              bytes   the data, row-major (C order)
    u32     number of aliases M
    M x     alias: str alias name, str name of the variable it stands for
            (e.g. "decoder/projection/weight" -> "decoder/embeddings/weight": tied output projection)

where `str` is a u16 length L, counting a terminating NUL byte, then L bytes (UTF-8 text and the NUL). Scalars
(rank 0) carry the spec's settings: `encoder/num_heads` (int16), `decoder/activation` (int8), `decoder/pre_norm`...
The file must end right after the aliases: anything else is an error, so that a truncated or mis-joined file (the
base model ships split in two parts) is caught here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

BINARY_VERSION = 6
# CTranslate2's DataType enumeration (the values this reader can widen).
DTYPES = {
    0: np.dtype("<f4"),
    1: np.dtype("i1"),
    2: np.dtype("<i2"),
    3: np.dtype("<i4"),
    4: np.dtype("<f2"),
}


class Ct2FormatError(ValueError):
    pass


@dataclass
class Ct2Model:
    spec: str
    revision: int
    variables: dict[str, np.ndarray] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> np.ndarray:
        return self.variables[self.aliases.get(name, name)]

    def scalar(self, name: str) -> int:
        value = self.get(name)
        if value.shape != ():
            raise Ct2FormatError(f"{name} is no scalar (shape {value.shape})")
        return int(value)


class _Cursor:
    def __init__(self, data: bytes | memoryview, origin: str):
        self.data = memoryview(data)
        self.pos = 0
        self.origin = origin

    def take(self, size: int) -> memoryview:
        if self.pos + size > len(self.data):
            raise Ct2FormatError(f"{self.origin}: truncated at byte {self.pos} (wanted {size} more bytes)")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def unpack(self, fmt: str) -> int:
        (value,) = struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))
        return value

    def string(self) -> str:
        raw = bytes(self.take(self.unpack("H")))
        if not raw.endswith(b"\0"):
            raise Ct2FormatError(f"{self.origin}: string at byte {self.pos - len(raw)} is not NUL-terminated")
        return raw[:-1].decode("utf-8")


def read_ct2(data: bytes | memoryview, origin: str = "model.bin") -> Ct2Model:
    """Parses a whole `model.bin`; the arrays are copies in the stored data type (float16 stays float16)."""
    cursor = _Cursor(data, origin)
    version = cursor.unpack("I")
    if version != BINARY_VERSION:
        raise Ct2FormatError(f"{origin}: binary version {version}, this reader knows version {BINARY_VERSION}")
    model = Ct2Model(spec=cursor.string(), revision=cursor.unpack("I"))
    for _ in range(cursor.unpack("I")):
        name = cursor.string()
        shape = tuple(cursor.unpack("I") for _ in range(cursor.unpack("B")))
        dtype_id = cursor.unpack("B")
        size = cursor.unpack("I")
        if dtype_id not in DTYPES:
            raise Ct2FormatError(f"{origin}: {name} has data type {dtype_id}, which this reader does not know")
        dtype = DTYPES[dtype_id]
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if size != expected:
            raise Ct2FormatError(f"{origin}: {name} holds {size} bytes, shape {shape} of {dtype} needs {expected}")
        model.variables[name] = np.frombuffer(cursor.take(size), dtype=dtype).reshape(shape).copy()
    for _ in range(cursor.unpack("I")):
        alias = cursor.string()
        model.aliases[alias] = cursor.string()
    if cursor.pos != len(cursor.data):
        raise Ct2FormatError(f"{origin}: {len(cursor.data) - cursor.pos} bytes left after the aliases")
    for alias, target in model.aliases.items():
        if target not in model.variables:
            raise Ct2FormatError(f"{origin}: alias {alias} names {target}, which the file does not hold")
    return model


def read_ct2_parts(paths: list[Path]) -> Ct2Model:
    """Reads a `model.bin` stored as consecutive parts (joined in the order given)."""
    data = b"".join(Path(path).read_bytes() for path in paths)
    return read_ct2(data, origin=" + ".join(Path(path).name for path in paths))
