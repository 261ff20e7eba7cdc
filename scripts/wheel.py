"""Build a wheel of the patched fork: dist/transformers-4.31.0+assisted.N-py3-none-any.whl.

usage: python scripts/wheel.py [--out DIR]

N is the number of patches in the series. The local version label (PEP 440) keeps the fork apart from the release
on PyPI: `transformers.__version__` reports it, and `pip install` of the wheel works anywhere.

The build needs pip, setuptools and wheel only (`make wheel` runs it in build/wheel-venv, made from
requirements-wheel.txt): no torch and nothing of the test environment. What is checked:
- the build tree is pristine v4.31.0 + exactly patches/series (so N tells the truth) with nothing uncommitted (the
  wheel is made from the committed tree, `git archive HEAD`);
- setup.py and transformers/__init__.py set the version exactly once, and the wheel carries the local version;
- the wheel requires transformers 4.31.0's run-time dependencies, each pinned in constraints.txt, and not torch.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from series import (  # noqa: E402
    PATCHES,
    REPO,
    TREE,
    VERSION,
    SeriesError,
    dirty_files,
    fail,
    is_build_tree,
    read_series,
    tree_matches_series,
)

VERSION_FILES = {
    "setup.py": f'version="{VERSION}"',
    "src/transformers/__init__.py": f'__version__ = "{VERSION}"',
}
CONSTRAINTS = REPO / "constraints.txt"
# transformers 4.31.0's install_requires (setup.py), as normalized project names.
RUNTIME = {
    "filelock",
    "huggingface-hub",
    "numpy",
    "packaging",
    "pyyaml",
    "regex",
    "requests",
    "tokenizers",
    "safetensors",
    "tqdm",
}
BUILD_TOOLS = ("setuptools", "wheel")


def normalize(name: str) -> str:
    """A project name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def local_version(patches: Path = PATCHES) -> str:
    return f"{VERSION}+assisted.{len(read_series(patches))}"


def pinned_names(constraints: Path = CONSTRAINTS) -> set[str]:
    """The projects constraints.txt pins (`name==version` lines)."""
    names = set()
    for line in constraints.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(normalize(line.split("==", 1)[0]))
    return names


def check_tree(tree: Path, patches: Path) -> None:
    if not is_build_tree(tree):
        raise SeriesError(f"{tree} is not a tree made by `make apply`")
    dirty = dirty_files(tree)
    if dirty:
        raise SeriesError(
            f"{tree} has uncommitted changes ({', '.join(dirty[:5])}), which the wheel would leave out: commit them "
            "and run `make export`, or `make apply FORCE=1` to discard them"
        )
    if not tree_matches_series(tree, patches):
        raise SeriesError(
            f"{tree} is not pristine v{VERSION} + {patches}/series: run `make apply` (or `make export` if the tree "
            "holds the newer commits)"
        )


def check_build_tools() -> None:
    missing = [name for name in BUILD_TOOLS if importlib.util.find_spec(name) is None]
    if missing:
        raise SeriesError(
            f"{sys.executable} has no {' and no '.join(missing)}: run this through `make wheel`, whose "
            "build/wheel-venv has the pinned build tools (requirements-wheel.txt)"
        )


def check_wheel(wheel: Path, version: str, constraints: Path) -> None:
    """The wheel's name, version and requirements are what the fork promises."""
    expected = f"transformers-{version}-py3-none-any.whl"
    if wheel.name != expected:
        raise SeriesError(f"the build made {wheel.name}, not {expected}")
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"transformers-{version}.dist-info/METADATA").decode()
        init = archive.read("transformers/__init__.py").decode()
    if f"\nVersion: {version}\n" not in metadata or f'__version__ = "{version}"' not in init:
        raise SeriesError(f"{wheel.name} does not carry the version {version} in its metadata and __init__.py")
    requires = {
        normalize(re.match(r"[A-Za-z0-9._-]+", line[len("Requires-Dist: ") :]).group())
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ") and "extra ==" not in line
    }
    if requires != RUNTIME:
        raise SeriesError(
            f"{wheel.name} requires {sorted(requires)}, not transformers {VERSION}'s run-time set {sorted(RUNTIME)}"
        )
    unpinned = requires - pinned_names(constraints)
    if unpinned:
        raise SeriesError(f"{constraints.name} pins no version of {', '.join(sorted(unpinned))}")


def build_wheel(tree: Path, out: Path, version: str, constraints: Path = CONSTRAINTS) -> Path:
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
        built = Path(tmp) / "dist"
        command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w"]
        subprocess.run([*command, str(built), str(source)], check=True)
        (wheel,) = built.glob("*.whl")
        check_wheel(wheel, version, constraints)
        out.mkdir(parents=True, exist_ok=True)
        target = out / wheel.name
        shutil.move(wheel, target)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist")
    parser.add_argument("--tree", type=Path, default=TREE, help=argparse.SUPPRESS)
    parser.add_argument("--patches", type=Path, default=PATCHES, help=argparse.SUPPRESS)
    parser.add_argument("--constraints", type=Path, default=CONSTRAINTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    tree = args.tree.resolve()
    try:
        check_build_tools()
        check_tree(tree, args.patches)
        wheel = build_wheel(tree, args.out.resolve(), local_version(args.patches), args.constraints)
    except (SeriesError, subprocess.CalledProcessError) as error:
        fail(str(error))
    print(f"built {wheel}")


if __name__ == "__main__":
    main()
