"""Environments of the upstream releases the benchmark compares the patched fork with.

Each release gets a virtual environment under build/bench/peers/, created on first use and reused afterwards, with its
dependencies pinned: the project's torch (the CPU wheel on local disk: torch==2.13.0 exactly, a looser spec pulls a
multi-GB CUDA build) and the rest of the project's pins, plus the packages the release needs newer.

Adding a peer is one `Peer(...)` in PEERS: its pins, and the sides it runs (one by default, with the draft length its
4.3x peers share; more for the settings worth comparing, each its own worker in the same environment).
"""

import hashlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .settings import DraftLength, Settings

REPO = Path(__file__).resolve().parents[2]
PEER_DIR = REPO / "build" / "bench" / "peers"

# The project's pins that the releases share with it (run-time requirements of requirements.txt).
SHARED = [
    "torch==2.13.0",
    "numpy==2.4.6",
    "regex==2026.11.19",
    "requests==2.34.2",
    "tqdm==4.70.1",
    "PyYAML==6.0.4",
    "filelock==4.3.1",
    "packaging==26.4",
    "certifi==2026.10.19.post1",
    "charset-normalizer==3.5.3",
    "fsspec==2026.9.0",
    "idna==3.20",
    "typing_extensions==4.16.0",
    "urllib3==2.8.0",
]


@dataclass(frozen=True)
class Peer:
    """An upstream release: `pins` (transformers and the libraries it needs newer than the project's; named in the
    report), `closure` (the rest of what those pull in, pinned too), and its sides: (suffix, settings, what the suffix
    means), the first with the empty suffix (the side named by the version alone)."""

    version: str
    pins: tuple
    closure: tuple = ()
    sides: tuple = (("", Settings(draft=DraftLength.heuristic()), ""),)

    def requirements(self):
        return list(self.pins) + list(self.closure) + SHARED


# 5.x's defaults are the release as shipped: its own draft length (`num_assistant_tokens` 20, schedule "constant",
# `assistant_confidence_threshold` 0.4) and attention (sdpa); the eager side runs the attention 4.31's models run.
RELEASE_DEFAULTS = Settings(draft=DraftLength.defaults())
PEERS = {
    peer.version: peer
    for peer in [
        # tokenizers 0.15.0 wants huggingface-hub<0.18; 0.15.2 takes the hub of 4.36's months.
        Peer(
            "4.35.2", ("transformers==4.35.2", "tokenizers==0.15.0", "huggingface-hub==0.17.3", "safetensors==0.4.1")
        ),
        Peer(
            "4.36.2", ("transformers==4.36.2", "tokenizers==0.15.2", "huggingface-hub==0.20.1", "safetensors==0.4.1")
        ),
        # 5.23.0 wants huggingface-hub>=1.31,<3 (its httpx2 client), tokenizers>=0.23.1,<0.24, safetensors>=0.8, and
        # typer (the `transformers` command line). The closure is what pip resolved for these pins with SHARED.
        Peer(
            "5.23.0",
            ("transformers==5.23.0", "tokenizers==0.23.3", "huggingface-hub==2.4.0", "safetensors==0.8.0"),
            closure=(
                "typer==0.29.2",
                "click==8.5.1",
                "rich==15.0.0",
                "markdown-it-py==4.3.0",
                "mdurl==0.1.2",
                "Pygments==2.21.0",
                "shellingham==1.5.4",
                "annotated-doc==0.0.7",
                "pydantic==2.14.4",
                "pydantic_core==2.50.5",
                "annotated-types==0.8.0",
                "typing-inspection==0.4.5",
                "hf-xet==1.8.0",
                "httpx2==2.16.2",
                "httpcore2==2.16.2",
                "anyio==4.16.0",
                "h11==0.16.0",
                "truststore==0.10.5",
            ),
            sides=(
                ("", RELEASE_DEFAULTS, ""),
                ("eager", Settings(attention="eager", draft=DraftLength.defaults()), "eager"),
            ),
        ),
    ]
}


def requirements(version):
    return PEERS[version].requirements()


def stamp(version):
    return hashlib.sha256("\n".join(requirements(version)).encode()).hexdigest()[:16]


def python_of(version):
    return PEER_DIR / version / "bin" / "python"


def ready(version):
    marker = PEER_DIR / version / ".requirements"
    return python_of(version).exists() and marker.exists() and marker.read_text().strip() == stamp(version)


def ensure(version, base_python=sys.executable, quiet=False):
    """The interpreter of the release's environment, created (or refreshed when the pins changed) if needed."""
    if version not in PEERS:
        raise SystemExit(f"bench: no pinned environment for transformers {version} (known: {', '.join(PEERS)})")
    if ready(version):
        return python_of(version)
    env_dir = PEER_DIR / version
    print(f"bench: creating the transformers {version} environment in {env_dir.relative_to(REPO)}", flush=True)
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    if not python_of(version).exists():
        subprocess.run([base_python, "-m", "venv", str(env_dir)], check=True)
    requirements_file = env_dir / "requirements.txt"
    requirements_file.write_text("\n".join(requirements(version)) + "\n")
    command = [str(python_of(version)), "-m", "pip", "install", "--disable-pip-version-check", "-r"]
    command += [str(requirements_file)]
    if quiet:
        command.append("--quiet")
    result = subprocess.run(command)
    if result.returncode != 0:
        raise SystemExit(f"bench: could not install transformers {version} and its pins (see pip's output above)")
    probe = "import torch, transformers; print(transformers.__version__, torch.__version__)"
    check = subprocess.run([str(python_of(version)), "-c", probe], capture_output=True, text=True)
    if check.returncode != 0 or not check.stdout.startswith(version + " "):
        raise SystemExit(f"bench: the transformers {version} environment does not import:\n{check.stderr[-2000:]}")
    (env_dir / ".requirements").write_text(stamp(version) + "\n")
    return python_of(version)
