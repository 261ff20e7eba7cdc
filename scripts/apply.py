"""Build `build/transformers`: the pristine transformers v4.31.0 source, then the series applied with `git am`.

usage: python scripts/apply.py [--source auto|git|sdist|PATH] [--force]

Sources (`--source`, `SOURCE=` in the Makefile):
  git    shallow clone of tag v4.31.0 from the upstream repository, checked against the pinned commit
  sdist  `pip download` of the transformers 4.31.0 source distribution, checked against the pinned sha256
  PATH   an existing checkout of v4.31.0 (a git clone at the pinned commit, or an unpacked source tree)
  auto   git, falling back to sdist (the default)
Downloads are kept under build/cache/, so a second run needs no network.

When the build tree already holds pristine + series, nothing is done. When patches/ changed, the tree is rebuilt
from the pristine commit. A tree with uncommitted edits, or with commits that patches/ does not have, is refused
(run `make export` first, or pass --force to throw that work away).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from series import (  # noqa: E402
    CACHE,
    PATCHES,
    PINNED_COMMIT,
    PRISTINE_DATE,
    PRISTINE_TAG,
    SDIST_NAME,
    SDIST_SHA256,
    TREE,
    UPSTREAM_TAG,
    UPSTREAM_URL,
    VERSION,
    SeriesError,
    dirty_files,
    fail,
    git,
    is_build_tree,
    read_series,
    read_stamp,
    tree_matches_series,
    write_stamp,
)

APPLYING = "applying"
SOURCE_HELP = (
    "choose one with SOURCE=git (clone the tag), SOURCE=sdist (PyPI source distribution) or SOURCE=/path/to/checkout"
)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unpack_tar(archive, destination: Path) -> None:
    """Unpack a tar archive (a path or a file object), dropping its single top-level folder if it has one."""
    with tarfile.open(fileobj=archive, mode="r|*") if hasattr(archive, "read") else tarfile.open(archive) as tar:
        tar.extractall(destination, filter="data")
    entries = list(destination.iterdir())
    if len(entries) == 1 and entries[0].is_dir():
        top = entries[0]
        for child in top.iterdir():
            child.rename(destination / child.name)
        top.rmdir()


def fetch_sdist(cache: Path, workdir: Path) -> Path:
    archive = cache / SDIST_NAME
    if not archive.exists():
        download = cache / "download.tmp"
        shutil.rmtree(download, ignore_errors=True)
        download.mkdir(parents=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet"]
        result = subprocess.run(
            [*command, f"transformers=={VERSION}", "-d", str(download)], capture_output=True, text=True
        )
        files = list(download.glob("*.tar.gz"))
        if result.returncode != 0 or len(files) != 1:
            reason = (result.stderr.strip().splitlines() or ["no file was downloaded"])[-1]
            shutil.rmtree(download, ignore_errors=True)
            raise SeriesError(f"pip could not download the transformers {VERSION} source distribution ({reason})")
        files[0].rename(archive)
        shutil.rmtree(download, ignore_errors=True)
    actual = sha256(archive)
    if actual != SDIST_SHA256:
        rejected = archive.with_name(archive.name + ".rejected")
        archive.rename(rejected)
        raise SeriesError(
            f"{SDIST_NAME} does not have the pinned sha256: expected {SDIST_SHA256}, got {actual}. Nothing was "
            f"unpacked; the file was moved to {rejected} (delete it to download again)."
        )
    source = workdir / "source"
    source.mkdir()
    unpack_tar(archive, source)
    return source


def fetch_git(cache: Path, workdir: Path, url: str, pinned: str) -> Path:
    clone = cache / f"git-{hashlib.sha256(url.encode()).hexdigest()[:12]}-{UPSTREAM_TAG}.git"
    if not clone.exists():
        partial = clone.with_name(clone.name + ".tmp")
        shutil.rmtree(partial, ignore_errors=True)
        result = git(
            "clone",
            "--quiet",
            "--bare",
            "--depth",
            "1",
            "--branch",
            UPSTREAM_TAG,
            url,
            str(partial),
            cwd=cache,
            check=False,
        )
        if result.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            reason = (result.stderr.strip().splitlines() or ["unknown error"])[-1]
            raise SeriesError(f"git could not clone tag {UPSTREAM_TAG} from {url} ({reason})")
        partial.rename(clone)
    commit = git("rev-parse", f"{UPSTREAM_TAG}^{{commit}}", cwd=clone).stdout.strip()
    if commit != pinned:
        shutil.rmtree(clone, ignore_errors=True)
        raise SeriesError(
            f"tag {UPSTREAM_TAG} of {url} resolves to {commit}, not to the pinned commit {pinned}; refusing to build "
            "on an unexpected source"
        )
    return export_git_commit(clone, UPSTREAM_TAG, workdir)


def export_git_commit(repository: Path, revision: str, workdir: Path) -> Path:
    source = workdir / "source"
    source.mkdir()
    archive = subprocess.Popen(["git", "archive", "--format=tar", revision], cwd=repository, stdout=subprocess.PIPE)
    unpack_tar(archive.stdout, source)
    if archive.wait() != 0:
        raise SeriesError(f"git archive {revision} failed in {repository}")
    return source


def fetch_local(path: Path, workdir: Path, pinned: str) -> Path:
    if not path.is_dir():
        raise SeriesError(f"SOURCE={path} is neither auto, git, sdist nor an existing directory; {SOURCE_HELP}")
    if (path / ".git").exists():
        commit = git("rev-parse", "HEAD", cwd=path).stdout.strip()
        if commit != pinned:
            raise SeriesError(f"the checkout {path} is at {commit}, not at the pinned v{VERSION} commit {pinned}")
        if dirty_files(path):
            raise SeriesError(f"the checkout {path} has uncommitted changes; it must be pristine v{VERSION}")
        return export_git_commit(path, "HEAD", workdir)
    init = path / "src" / "transformers" / "__init__.py"
    if not init.exists() or f'__version__ = "{VERSION}"' not in init.read_text():
        raise SeriesError(f"{path} does not look like the transformers {VERSION} source (checked {init})")
    source = workdir / "source"
    shutil.copytree(path, source, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.egg-info"))
    return source


def obtain_source(kind: str, cache: Path, workdir: Path, url: str, pinned: str) -> tuple[Path, str]:
    cache.mkdir(parents=True, exist_ok=True)
    if kind == "git":
        return fetch_git(cache, workdir, url, pinned), f"git tag {UPSTREAM_TAG} ({pinned})"
    if kind == "sdist":
        return fetch_sdist(cache, workdir), f"{SDIST_NAME} (sha256 {SDIST_SHA256})"
    if kind != "auto":
        return fetch_local(Path(kind).expanduser().resolve(), workdir, pinned), f"local checkout {kind}"
    try:
        return obtain_source("git", cache, workdir, url, pinned)
    except SeriesError as git_error:
        print(f"notice: {git_error}; using the PyPI source distribution instead")
        try:
            return obtain_source("sdist", cache, workdir, url, pinned)
        except SeriesError as sdist_error:
            raise SeriesError(
                f"could not get the transformers v{VERSION} source.\n  git: {git_error}\n  sdist: {sdist_error}\n"
                f"With no network and nothing in {cache}, {SOURCE_HELP}."
            ) from None


def create_pristine(source: Path, tree: Path, origin: str) -> None:
    """Turn the unpacked source into a repository whose root commit is the pristine source, and move it in place."""
    git("init", "--quiet", "--initial-branch", "main", cwd=source)
    git("add", "--all", cwd=source)
    dates = {"GIT_AUTHOR_DATE": PRISTINE_DATE, "GIT_COMMITTER_DATE": PRISTINE_DATE}
    git(
        "commit",
        "--quiet",
        "--no-verify",
        "-m",
        f"transformers v{VERSION} (pristine)\n\nSource: {origin}",
        cwd=source,
        env=dates,
    )
    git("tag", PRISTINE_TAG, cwd=source)
    source.rename(tree)


def apply_series(tree: Path, patches: Path) -> None:
    series = read_series(patches)
    for patch in series:
        write_stamp(tree, APPLYING)
        result = git("am", "--quiet", "--committer-date-is-author-date", str(patch), cwd=tree, check=False)
        if result.returncode != 0:
            output = (result.stdout + result.stderr).splitlines()
            reasons = [line for line in output if line.startswith("error:")] or output[-3:]
            git("am", "--abort", cwd=tree, check=False)
            write_stamp(tree)
            raise SeriesError(
                f"patch {patch.name} does not apply:\n  " + "\n  ".join(reasons) + "\nThe tree is left at the last "
                "patch that applied. Refresh the failing patch (see docs/working-on-the-series.md)."
            )
        print(f"applied {patch.name}")
    write_stamp(tree)
    print(f"{tree} is pristine v{VERSION} + {len(series)} patches")


def recover_interrupted(tree: Path) -> bool:
    """Undo a `git am` that an earlier run left half done. Returns whether the tree is in a state apply.py made."""
    stamp = read_stamp(tree)
    in_am = (tree / ".git" / "rebase-apply").exists() or (tree / ".git" / "rebase-merge").exists()
    if in_am and stamp != APPLYING:
        raise SeriesError(f"a git am or rebase is in progress in {tree}: finish or abort it first")
    if stamp == APPLYING:
        if in_am:
            git("am", "--abort", cwd=tree, check=False)
        print(f"notice: an earlier `make apply` was interrupted; rebuilding {tree}")
        return True
    return stamp == git("rev-parse", "HEAD", cwd=tree).stdout.strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=os.environ.get("SOURCE") or "auto", help="auto, git, sdist or a path")
    parser.add_argument("--force", action="store_true", help="rebuild even if that discards work in the tree")
    parser.add_argument("--tree", type=Path, default=TREE, help=argparse.SUPPRESS)
    parser.add_argument("--patches", type=Path, default=PATCHES, help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=Path, default=CACHE, help=argparse.SUPPRESS)
    parser.add_argument("--git-url", default=UPSTREAM_URL, help="upstream repository (a mirror, say)")
    parser.add_argument("--pinned-commit", default=PINNED_COMMIT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    tree = args.tree.resolve()

    try:
        if is_build_tree(tree):
            ours = recover_interrupted(tree)
            dirty = dirty_files(tree)
            if dirty and not args.force:
                raise SeriesError(
                    f"{tree} has uncommitted changes ({', '.join(dirty[:5])}). Nothing was touched. Commit them "
                    "there and run `make export` to turn them into patches, or `make apply FORCE=1` to discard them."
                )
            if not dirty and tree_matches_series(tree, args.patches):
                write_stamp(tree)
                count = len(read_series(args.patches))
                print(f"{tree} is up to date: pristine v{VERSION} + {count} patches, nothing to do")
                return
            if not ours and not args.force:
                raise SeriesError(
                    f"{tree} has commits that patches/ does not have. Nothing was touched. Run `make export` to "
                    "write them to patches/, or `make apply FORCE=1` to discard them."
                )
            print(f"patches/ changed: rebuilding {tree} from {PRISTINE_TAG}")
            git("reset", "--quiet", "--hard", PRISTINE_TAG, cwd=tree)
        else:
            if tree.exists() and any(tree.iterdir()):
                raise SeriesError(f"{tree} exists but is not a build tree made by `make apply`; move it away first")
            tree.parent.mkdir(parents=True, exist_ok=True)
            if tree.exists():
                tree.rmdir()
            with tempfile.TemporaryDirectory(dir=tree.parent, prefix=".source-") as workdir:
                source, origin = obtain_source(
                    args.source, args.cache.resolve(), Path(workdir), args.git_url, args.pinned_commit
                )
                create_pristine(source, tree, origin)
            print(f"created {tree} from {origin}")
        apply_series(tree, args.patches)
    except SeriesError as error:
        fail(str(error))


if __name__ == "__main__":
    main()
