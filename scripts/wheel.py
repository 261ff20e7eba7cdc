"""Build a wheel of the patched fork: dist/transformers-4.31.0+assisted.N-py3-none-any.whl.

usage: python scripts/wheel.py [--out DIR]

N is the number of patches in the series. The local version label (PEP 440) keeps the fork apart from the release
on PyPI: `transformers.__version__` reports it, and `pip install` of the wheel works anywhere.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from series import PATCHES, REPO, TREE, VERSION, SeriesError, fail, read_series  # noqa: E402

VERSION_FILES = {
    "setup.py": f'version="{VERSION}"',
    "src/transformers/__init__.py": f'__version__ = "{VERSION}"',
}


def local_version(patches: Path = PATCHES) -> str:
    return f"{VERSION}+assisted.{len(read_series(patches))}"


def build_wheel(tree: Path, out: Path, version: str) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "transformers"
        source.mkdir()
        archive = subprocess.Popen(["git", "archive", "--format=tar", "HEAD"], cwd=tree, stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(source)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise SeriesError(f"git archive HEAD failed in {tree}")
        for name, pinned in VERSION_FILES.items():
            path = source / name
            text = path.read_text()
            if text.count(pinned) != 1:
                raise SeriesError(f"{name} of {tree} does not set the version as `{pinned}` exactly once")
            path.write_text(text.replace(pinned, pinned.replace(VERSION, version)))
        out.mkdir(parents=True, exist_ok=True)
        built = Path(tmp) / "dist"
        command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w"]
        subprocess.run([*command, str(built), str(source)], check=True)
        (wheel,) = built.glob("*.whl")
        target = out / wheel.name
        shutil.move(wheel, target)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist")
    parser.add_argument("--tree", type=Path, default=TREE, help=argparse.SUPPRESS)
    parser.add_argument("--patches", type=Path, default=PATCHES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        wheel = build_wheel(args.tree.resolve(), args.out.resolve(), local_version(args.patches))
    except (SeriesError, subprocess.CalledProcessError) as error:
        fail(str(error))
    print(f"built {wheel}")


if __name__ == "__main__":
    main()
