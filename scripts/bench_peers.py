"""Environments of the upstream releases the benchmark compares the patched fork with.

Upstream transformers 4.35 and 4.36 carry their own assisted generation (with their own draft-length heuristic). Each
release gets a virtual environment under build/bench/peers/, created on first use and reused afterwards, with every
dependency pinned: the project's torch (the CPU wheel on local disk) and the rest of the project's pins, except the
packages the release needs newer (tokenizers 0.15, a huggingface-hub of the same months, safetensors 0.4).

  python scripts/bench_peers.py            # create the missing environments, print their interpreters
  python scripts/bench_peers.py --check    # exit 1 if one is missing or stale (nothing is installed)
"""

import argparse
import hashlib
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
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
# tokenizers 0.15.0 wants huggingface-hub<0.18; 0.15.2 takes the hub of 4.36's months.
PEERS = {
    "4.35.2": ["transformers==4.35.2", "tokenizers==0.15.0", "huggingface-hub==0.17.3", "safetensors==0.4.1"],
    "4.36.2": ["transformers==4.36.2", "tokenizers==0.15.2", "huggingface-hub==0.20.1", "safetensors==0.4.1"],
}


def requirements(version):
    return PEERS[version] + SHARED


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
    check = subprocess.run(
        [str(python_of(version)), "-c", probe],
        capture_output=True,
        text=True,
    )
    if check.returncode != 0 or not check.stdout.startswith(version + " "):
        raise SystemExit(f"bench: the transformers {version} environment does not import:\n{check.stderr[-2000:]}")
    (env_dir / ".requirements").write_text(stamp(version) + "\n")
    return python_of(version)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("versions", nargs="*", default=list(PEERS))
    parser.add_argument("--check", action="store_true", help="only report whether the environments are ready")
    args = parser.parse_args()
    if args.check:
        missing = [version for version in args.versions if not ready(version)]
        for version in missing:
            print(f"missing or stale: {PEER_DIR / version}")
        sys.exit(1 if missing else 0)
    for version in args.versions:
        print(f"{version}: {ensure(version, quiet=True)}")


if __name__ == "__main__":
    main()
