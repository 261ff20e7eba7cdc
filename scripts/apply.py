"""Build `build/transformers`: the pristine transformers v4.31.0 tree, then the series applied with `git am`.

usage: python scripts/apply.py [--source auto|git|ARCHIVE|DIRECTORY] [--force]

The base is the release's full tree (src/, tests/, utils/, ...), because the series patches upstream's tests too.
Sources (`--source`, `SOURCE=` in the Makefile):
  git        shallow clone of tag v4.31.0 from the upstream repository, checked against the pinned commit
  ARCHIVE    a path to transformers-v4.31.0-full.tar.gz, checked against the pinned sha256 before it is unpacked,
             then kept in build/cache/ (scripts/source_archive.py writes it from any clone of the tag)
  DIRECTORY  a git clone at the pinned commit, or an unpacked full tree: its files (as `git add --all` sees them,
             the tree's .gitignore applying) must have the pinned git tree id
  auto       git, then the archive in build/cache/, then the one in ../shared/upstream/ (the default)
The PyPI source distribution is no source any more: it lacks tests/ and utils/. Downloads are kept under
build/cache/, so a second run needs no network.

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
    ARCHIVE_NAME,
    ARCHIVE_SHA256,
    CACHE,
    KNOWN_ARCHIVES,
    PATCHES,
    PINNED_COMMIT,
    PRISTINE_DATE,
    PRISTINE_TAG,
    RELEASE_TREE_ID,
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
    f"SOURCE= takes SOURCE=git (a shallow clone of tag {UPSTREAM_TAG} from GitHub: it needs the network), "
    f"SOURCE=/path/to/{ARCHIVE_NAME} (the release's full tree as an archive, sha256 {ARCHIVE_SHA256[:16]}...) or "
    f"SOURCE=/path/to/checkout (a clone of the tag, at commit {PINNED_COMMIT[:12]}, or the unpacked full tree). "
    "Without GitHub here: on a machine with any clone of the tag, `make source-archive SOURCE_DIR=/path/to/clone` "
    f"writes build/{ARCHIVE_NAME}; bring that file here and pass it as SOURCE= (or bring the clone and pass its "
    "directory)"
)
# Never part of the pristine commit, whatever the source: what builds and test runs leave in a tree.
IGNORED = ("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache")


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


def fetch_archive(archive: Path, cache: Path, workdir: Path) -> Path:
    """Check the archive against the pinned sha256, keep a copy in the cache, then unpack it (never before)."""
    if not archive.is_file():
        raise SeriesError(f"{archive} does not exist; {SOURCE_HELP}")
    actual = sha256(archive)
    if actual != ARCHIVE_SHA256:
        what = (
            "the PyPI source distribution, which has no tests/ and no utils/ (the series patches upstream's tests)"
            if actual == SDIST_SHA256
            else f"not the pinned {ARCHIVE_NAME}: expected sha256 {ARCHIVE_SHA256}, got {actual}"
        )
        raise SeriesError(f"{archive} is {what}. Nothing was unpacked; {SOURCE_HELP}")
    cached = cache / ARCHIVE_NAME
    if archive.resolve() != cached.resolve():
        partial = cache / (ARCHIVE_NAME + ".tmp")
        shutil.copyfile(archive, partial)
        partial.rename(cached)
    source = workdir / "source"
    source.mkdir()
    unpack_tar(archive, source)
    return source


def find_archive(cache: Path, known: tuple[Path, ...]) -> Path | None:
    """The full-tree archive in the cache, or at a known place beside this repository."""
    for candidate in (cache / ARCHIVE_NAME, *known):
        if candidate.is_file():
            return candidate
    return None


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
        raise SeriesError(f"SOURCE={path} is neither auto, git, an archive nor an existing directory; {SOURCE_HELP}")
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
    missing = [name for name in ("tests", "utils") if not (path / name).is_dir()]
    if missing:
        raise SeriesError(
            f"{path} has no {' and no '.join(f'{name}/' for name in missing)}: it is the PyPI source distribution "
            f"or a partial tree, but the series patches upstream's tests; use the full v{VERSION} tree"
        )
    source = workdir / "source"
    shutil.copytree(path, source, symlinks=True, ignore=shutil.ignore_patterns(".git", *IGNORED))
    return source


def obtain_source(
    kind: str, cache: Path, workdir: Path, url: str, pinned: str, known: tuple[Path, ...] = KNOWN_ARCHIVES
) -> tuple[Path, str, bool]:
    """(unpacked source, where it came from, whether its files still have to be checked against the release)."""
    cache.mkdir(parents=True, exist_ok=True)
    if kind == "git":
        return fetch_git(cache, workdir, url, pinned), f"git tag {UPSTREAM_TAG} ({pinned})", False
    if kind == "sdist":
        raise SeriesError(
            f"SOURCE=sdist is gone: the PyPI source distribution has no tests/ and no utils/, and the series patches "
            f"upstream's tests; {SOURCE_HELP}"
        )
    if kind != "auto":
        path = Path(kind).expanduser().resolve()
        if path.is_file():
            return fetch_archive(path, cache, workdir), f"{ARCHIVE_NAME} (sha256 {ARCHIVE_SHA256})", True
        clone = (path / ".git").exists()
        origin = f"local checkout {kind} ({pinned})" if clone else f"local tree {kind}"
        return fetch_local(path, workdir, pinned), origin, not clone
    try:
        return obtain_source("git", cache, workdir, url, pinned)
    except SeriesError as git_error:
        archive = find_archive(cache, known)
        if archive is None:
            raise SeriesError(
                f"could not get the transformers v{VERSION} source.\n  git: {git_error}\n  archive: no {ARCHIVE_NAME} "
                f"in {cache} or at {', '.join(map(str, known))}\n{SOURCE_HELP}."
            ) from None
        print(f"notice: {git_error}; using {archive} instead")
        return obtain_source(str(archive), cache, workdir, url, pinned)


def create_pristine(source: Path, tree: Path, origin: str, check_tree: bool) -> None:
    """Turn the unpacked source into a repository whose root commit is the pristine source, and move it in place.

    With check_tree (every source but the pinned git commit, which is checked by its hash), the files must make
    exactly the release's git tree: nothing missing, changed or added.
    """
    git("init", "--quiet", "--initial-branch", "main", cwd=source)
    git("add", "--all", cwd=source)
    tree_id = git("write-tree", cwd=source).stdout.strip()
    if check_tree and tree_id != RELEASE_TREE_ID:
        raise SeriesError(
            f"the files of {origin} are not the v{VERSION} release's tree (git tree id {tree_id}, expected "
            f"{RELEASE_TREE_ID}): files were changed, added or removed. Nothing was built; {SOURCE_HELP}"
        )
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
    parser.add_argument("--source", default=os.environ.get("SOURCE") or "auto", help="auto, git or a path")
    parser.add_argument("--force", action="store_true", help="rebuild even if that discards work in the tree")
    parser.add_argument("--tree", type=Path, default=TREE, help=argparse.SUPPRESS)
    parser.add_argument("--patches", type=Path, default=PATCHES, help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=Path, default=CACHE, help=argparse.SUPPRESS)
    parser.add_argument("--git-url", default=UPSTREAM_URL, help="upstream repository (a mirror, say)")
    parser.add_argument("--pinned-commit", default=PINNED_COMMIT, help=argparse.SUPPRESS)
    parser.add_argument("--known-archive", type=Path, action="append", help=argparse.SUPPRESS)
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
                source, origin, check_tree = obtain_source(
                    args.source,
                    args.cache.resolve(),
                    Path(workdir),
                    args.git_url,
                    args.pinned_commit,
                    tuple(args.known_archive or KNOWN_ARCHIVES),
                )
                create_pristine(source, tree, origin, check_tree)
            print(f"created {tree} from {origin}")
        apply_series(tree, args.patches)
    except SeriesError as error:
        fail(str(error))


if __name__ == "__main__":
    main()
