"""Write transformers-v4.31.0-full.tar.gz, the archive `make apply SOURCE=...` takes, from a clone of the tag.

usage: python scripts/source_archive.py SOURCE_DIR [--out PATH]     (make source-archive SOURCE_DIR=...)

SOURCE_DIR is any clone of tag v4.31.0 (`git clone --branch v4.31.0 <upstream>`, shallow or not), or the unpacked
full tree. Its files are checked as apply.py checks a directory: a clone must be at the pinned commit with nothing
uncommitted; either way, the files (as `git add --all` sees them) must make the release's git tree. Those files are
then packed as the pinned archive was: GNU tar format, members sorted by name under `transformers-v4.31.0/`, owner
and group 0 without names, every mtime 2023-07-18 00:00 UTC, modes 0664 (0775 for executables and folders, 0755 for
the top folder), compressed with `gzip -n`. With GNU tar 1.34 and gzip 1.12 that gives the pinned sha256 byte for
byte. Another tar or gzip can write other bytes for the same files: the script then says so. apply.py refuses such an
archive (it checks an archive by its sha256 before unpacking it); take the files in as a directory instead
(SOURCE=DIR: apply.py checks a directory by its git tree id, which does not depend on how the files were packed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from apply import fetch_local, sha256  # noqa: E402

from series import (  # noqa: E402
    ARCHIVE_NAME,
    ARCHIVE_SHA256,
    BUILD,
    PINNED_COMMIT,
    RELEASE_TREE_ID,
    UPSTREAM_TAG,
    VERSION,
    SeriesError,
    fail,
    git,
)

TOP = f"transformers-{UPSTREAM_TAG}"
# Every member's mtime in the pinned archive.
MTIME = int(datetime.fromisoformat("2023-07-18T00:00:00+00:00").timestamp())
TAR_OPTIONS = ["--sort=name", "--format=gnu", "--owner=0", "--group=0", "--numeric-owner", f"--mtime=@{MTIME}"]


def check_tools() -> None:
    version = subprocess.run(["tar", "--version"], capture_output=True, text=True).stdout
    if "GNU tar" not in version:
        raise SeriesError(
            "packing the archive needs GNU tar (for --sort=name and the GNU format); take the files in with "
            "SOURCE=/path/to/the/directory instead, which apply.py checks by its git tree id"
        )
    if shutil.which("gzip") is None:
        raise SeriesError("packing the archive needs gzip")


def release_tree(source: Path, workdir: Path, pinned: str) -> tuple[Path, str]:
    """The release's files, checked: a repository holding them, and their git tree id."""
    files = fetch_local(source, workdir, pinned)
    git("init", "--quiet", cwd=files)
    git("add", "--all", cwd=files)
    tree_id = git("write-tree", cwd=files).stdout.strip()
    if tree_id != RELEASE_TREE_ID:
        raise SeriesError(
            f"the files of {source} are not the v{VERSION} release's tree (git tree id {tree_id}, expected "
            f"{RELEASE_TREE_ID}): files were changed, added or removed"
        )
    return files, tree_id


def stage(repository: Path, tree_id: str, destination: Path) -> Path:
    """The files of `tree_id`, exactly (no ignored or untracked file, no empty folder), with the archive's modes."""
    archive = subprocess.Popen(
        ["git", "archive", "--format=tar", f"--prefix={TOP}/", tree_id], cwd=repository, stdout=subprocess.PIPE
    )
    with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
        tar.extractall(destination, filter="data")
    if archive.wait() != 0:
        raise SeriesError(f"git archive {tree_id} failed in {repository}")
    top = destination / TOP
    for folder, names, files in os.walk(top):
        for name in names + files:
            path = Path(folder) / name
            if path.is_symlink():
                continue
            executable = path.is_dir() or path.stat().st_mode & 0o100
            path.chmod(0o775 if executable else 0o664)
    top.chmod(0o755)
    return top


def pack(top: Path, out: Path) -> None:
    partial = out.with_name(out.name + ".tmp")
    with partial.open("wb") as handle:
        tar = subprocess.Popen(
            ["tar", *TAR_OPTIONS, "-C", str(top.parent), "-cf", "-", top.name], stdout=subprocess.PIPE
        )
        gzip = subprocess.run(["gzip", "-n"], stdin=tar.stdout, stdout=handle)
        if tar.wait() != 0 or gzip.returncode != 0:
            partial.unlink(missing_ok=True)
            raise SeriesError(f"tar or gzip failed while writing {out}")
    partial.rename(out)


def make_archive(source: Path, out: Path, pinned: str = PINNED_COMMIT) -> bool:
    """Write the archive; True when it has the pinned sha256."""
    check_tools()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".source-archive-") as tmp:
        workdir = Path(tmp)
        repository, tree_id = release_tree(source, workdir, pinned)
        staging = workdir / "staging"
        staging.mkdir()
        pack(stage(repository, tree_id, staging), out)
    return sha256(out) == ARCHIVE_SHA256


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="a clone of tag v4.31.0, or the unpacked full tree")
    parser.add_argument("--out", type=Path, default=BUILD / ARCHIVE_NAME)
    parser.add_argument("--pinned-commit", default=PINNED_COMMIT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.source:
        fail(f"no source given: name a clone of tag {UPSTREAM_TAG}, or the unpacked full tree (SOURCE_DIR=...)")
    source, out = Path(args.source).expanduser().resolve(), args.out.resolve()
    if not source.is_dir():
        fail(f"{args.source} is not a directory: name a clone of tag {UPSTREAM_TAG} (SOURCE_DIR=...)")
    try:
        same = make_archive(source, out, args.pinned_commit)
    except SeriesError as error:
        fail(str(error))
    digest = sha256(out)
    print(f"wrote {out}\nsha256 {digest}")
    if same:
        print(f"That is the pinned archive, byte for byte: `make apply SOURCE={out}` takes it.")
        return
    print(
        f"The files are the release's (git tree {RELEASE_TREE_ID}), but this tar or gzip packed them into other "
        f"bytes than the pinned archive (sha256 {ARCHIVE_SHA256}), which GNU tar 1.34 and gzip 1.12 give. apply.py "
        "checks an archive by its sha256, so it will refuse this one. Take the files in as a directory instead: "
        f"unpack it (or use the clone itself) and run `make apply SOURCE=/path/to/{TOP}`; apply.py checks a "
        "directory by its git tree id, which does not depend on how the files were packed."
    )
    raise SystemExit(1)


if __name__ == "__main__":
    main()
