"""scripts/source_archive.py (`make source-archive`): the full-tree archive `make apply SOURCE=...` takes, written
from a clone of the tag or the unpacked tree, and apply.py's word on the sources when it finds none.

The stand-in for a clone is the pinned archive itself, unpacked (and, for the clone, committed and cloned again, so
that the files get a checkout's modes). Nothing here needs the network.
"""

import hashlib
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "source_archive.py"
APPLY = REPO / "scripts" / "apply.py"
sys.path.insert(0, str(REPO / "scripts"))

from series import ARCHIVE_NAME, ARCHIVE_SHA256, KNOWN_ARCHIVES  # noqa: E402

IDENTITY = ["-c", "user.name=Test", "-c", "user.email=test@example.invalid"]
# The tools the pinned archive was packed with: with them, the archive comes out byte for byte.
KNOWN_TOOLS = ("tar (GNU tar) 1.34", "gzip 1.12")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tools() -> tuple[str, str]:
    versions = [subprocess.run([tool, "--version"], capture_output=True, text=True).stdout for tool in ("tar", "gzip")]
    return tuple(version.splitlines()[0].strip() if version else "" for version in versions)


def make_archive(source: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(source), "--out", str(out), *args], capture_output=True, text=True
    )


def assert_the_pinned_archive(result: subprocess.CompletedProcess, out: Path) -> None:
    if tools() == KNOWN_TOOLS:
        assert result.returncode == 0, result.stdout + result.stderr
        assert sha256(out) == ARCHIVE_SHA256 and "byte for byte" in result.stdout
    else:  # another tar or gzip: the same files, maybe other bytes, and the script says what to do then
        assert result.returncode == 0 or "SOURCE=/path/to/transformers-v4.31.0" in result.stdout, result.stderr


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory) -> Path:
    for archive in (REPO / "build" / "cache" / ARCHIVE_NAME, *KNOWN_ARCHIVES):
        if archive.is_file():
            break
    else:
        pytest.skip(f"no {ARCHIVE_NAME} in build/cache/ or at {KNOWN_ARCHIVES}")
    root = tmp_path_factory.mktemp("release")
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    (top,) = root.iterdir()
    return top


def test_the_unpacked_tree_gives_the_pinned_archive_and_a_changed_one_is_refused(tmp_path, unpacked):
    out = tmp_path / "out" / ARCHIVE_NAME
    assert_the_pinned_archive(make_archive(unpacked, out), out)

    setup = unpacked / "setup.py"
    original = setup.read_bytes()
    setup.write_bytes(original + b"# changed\n")
    try:
        out.unlink()
        result = make_archive(unpacked, out)
    finally:
        setup.write_bytes(original)
    assert result.returncode == 1
    assert "not the v4.31.0 release's tree" in result.stderr
    assert not out.exists() and [path.name for path in out.parent.iterdir()] == []


def test_a_clone_of_the_tag_gives_the_pinned_archive(tmp_path, unpacked):
    # The unpacked files committed and tagged in a repository of their own (its work tree is the unpacked tree).
    upstream = tmp_path / "upstream.git"
    where = ["--git-dir", str(upstream), "--work-tree", str(unpacked)]
    for args in (["init", "-q"], ["add", "-A"], [*IDENTITY, "commit", "-qm", "v4.31.0"], ["tag", "v4.31.0"]):
        subprocess.run(["git", *where, *args], check=True)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--branch", "v4.31.0", str(upstream), str(clone)], check=True)
    commit = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    out = tmp_path / ARCHIVE_NAME

    # This stand-in is not upstream's commit: the pinned commit is refused like any other...
    result = make_archive(clone, out)
    assert result.returncode == 1 and "not at the pinned v4.31.0 commit" in result.stderr
    # ... and with its own commit pinned, its files make the pinned archive.
    assert_the_pinned_archive(make_archive(clone, out, "--pinned-commit", commit.strip()), out)


def test_apply_names_every_source_and_how_to_make_the_archive(tmp_path):
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    args = ["--tree", str(tmp_path / "tree"), "--cache", str(tmp_path / "cache"), "--patches", str(tmp_path)]
    args += ["--known-archive", str(tmp_path / ARCHIVE_NAME), "--git-url", str(tmp_path / "nowhere.git")]
    result = subprocess.run([sys.executable, str(APPLY), *args], capture_output=True, text=True, env=env)
    assert result.returncode == 1
    assert "SOURCE=git (a shallow clone of tag v4.31.0 from GitHub: it needs the network)" in result.stderr
    assert f"SOURCE=/path/to/{ARCHIVE_NAME}" in result.stderr and "SOURCE=/path/to/checkout" in result.stderr
    assert "`make source-archive SOURCE_DIR=/path/to/clone`" in result.stderr
    assert "With no network, choose" not in result.stderr
