"""Real English speech from Debian's pocketsphinx-testdata: the clips and their transcripts.

The package (unpacked with `dpkg-deb -x`) holds pocketsphinx's test recordings under
usr/share/pocketsphinx/test/data/, all 16 kHz, 16-bit, mono: `*.raw` files are headerless signed little-endian
samples, `*.wav` files are RIFF/WAVE. The transcripts come from the package too: `goforward.raw` is the utterance of
the `<move>` rule of `goforward.gram` ("go forward ten meters"); the LibriVox clips (Sense and Sensibility, chapter 1)
have `librivox/transcription` (`<s> words </s> (clip id)` per line). `numbers.raw` has no transcript in the package.

Written into the output folder: the clips under their own names, `clips.json` (file, format, sample rate, duration,
the package's transcript or null, and where that transcript comes from) and the package's `copyright` file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

from .checkpoint import write_json

DATA = Path("usr/share/pocketsphinx/test/data")
COPYRIGHT = Path("usr/share/doc/pocketsphinx-testdata/copyright")
SAMPLE_RATE = 16000
LIBRIVOX = [
    "sense_and_sensibility_01_austen_64kb-0870",
    "sense_and_sensibility_01_austen_64kb-0880",
    "sense_and_sensibility_01_austen_64kb-0890",
    "sense_and_sensibility_01_austen_64kb-0920",
    "sense_and_sensibility_01_austen_64kb-0930",
]


class SpeechError(ValueError):
    pass


def _grammar_rule(text: str, rule: str) -> str:
    match = re.search(rf"public <{rule}> = ([^;]+);", text)
    if match is None:
        raise SpeechError(f"goforward.gram has no public <{rule}> rule")
    return " ".join(match.group(1).split())


def _librivox_transcripts(text: str) -> dict[str, str]:
    transcripts = {}
    for line in text.splitlines():
        match = re.fullmatch(r"\s*<s>(.*)</s>\s*\((\S+)\)\s*", line)
        if match:
            transcripts[match.group(2)] = " ".join(match.group(1).split())
    return transcripts


def _duration(path: Path) -> float:
    if path.suffix == ".raw":
        size = path.stat().st_size
        if size % 2:
            raise SpeechError(f"{path.name}: an odd number of bytes is no 16-bit audio")
        return size / 2 / SAMPLE_RATE
    with wave.open(str(path)) as clip:
        if (clip.getframerate(), clip.getsampwidth(), clip.getnchannels()) != (SAMPLE_RATE, 2, 1):
            raise SpeechError(f"{path.name}: not 16 kHz 16-bit mono")
        return clip.getnframes() / SAMPLE_RATE


def extract(deb: Path, directory: Path, source: str) -> dict:
    """Unpacks `deb` and writes the clips, clips.json and the copyright file into `directory` (which must exist)."""
    if shutil.which("dpkg-deb") is None:
        raise SpeechError("dpkg-deb is not available: install Debian's dpkg (it unpacks the .deb)")
    with tempfile.TemporaryDirectory(prefix="real-models-deb-") as temporary:
        root = Path(temporary)
        result = subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], capture_output=True, text=True)
        if result.returncode != 0:
            raise SpeechError(f"dpkg-deb -x {deb.name} failed: {result.stderr.strip()}")
        data = root / DATA
        reference = _grammar_rule((data / "goforward.gram").read_text(), "move")
        librivox = _librivox_transcripts((data / "librivox" / "transcription").read_text())
        clips = {
            "goforward.raw": (data / "goforward.raw", reference, "goforward.gram, rule <move>"),
            "numbers.raw": (data / "numbers.raw", None, "no transcript in the package"),
        }
        for clip in LIBRIVOX:
            if clip not in librivox:
                raise SpeechError(f"librivox/transcription has no line for {clip}")
            clips[f"{clip}.wav"] = (data / "librivox" / f"{clip}.wav", librivox[clip], "librivox/transcription")
        entries = {}
        for name, (path, transcript, origin) in clips.items():
            shutil.copyfile(path, directory / name)
            entries[name] = {
                "format": "raw-s16le" if name.endswith(".raw") else "wav",
                "sample_rate": SAMPLE_RATE,
                "seconds": round(_duration(directory / name), 3),
                "transcript": transcript,
                "transcript_source": origin,
            }
        shutil.copyfile(root / COPYRIGHT, directory / "copyright")
    write_json(directory / "clips.json", {"source": source, "clips": entries})
    return {"clips": len(entries), "audio_seconds": round(sum(entry["seconds"] for entry in entries.values()), 1)}
