"""Environments of the upstream releases the benchmark compares the patched fork with (`benchkit.peers`).

Each release gets a virtual environment under build/bench/peers/, created on first use and reused afterwards, with
every dependency pinned: the project's torch (the CPU wheel on local disk) and the rest of the project's pins, plus the
packages the release needs newer (see PEERS in scripts/benchkit/peers.py).

  python scripts/bench_peers.py            # create the missing environments, print their interpreters
  python scripts/bench_peers.py --check    # exit 1 if one is missing or stale (nothing is installed)
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit.peers import PEER_DIR, PEERS, ensure, ready  # noqa: E402


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
