"""What the patch series is built on, and the git plumbing that `apply.py` and `export.py` share.

The build tree `build/transformers` is a git repository whose root commit is the pristine v4.31.0 source, tagged
`upstream-v4.31.0`, with one commit per patch of `patches/series` on top. Both directions go through the same
`format_patches` call, so that exporting an unchanged tree reproduces `patches/` byte for byte.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PATCHES = REPO / "patches"
BUILD = REPO / "build"
TREE = BUILD / "transformers"
CACHE = BUILD / "cache"

VERSION = "4.31.0"
UPSTREAM_TAG = "v4.31.0"
UPSTREAM_URL = "https://github.com/huggingface/transformers.git"
# The commit the upstream tag v4.31.0 points to.
PINNED_COMMIT = "e42587f596181396e1c4b63660abf0c736b10dae"
# The full source tree of the release (src/, tests/, utils/, ...) as an archive, for machines without the upstream
# repository: its sha256, and where a checkout of this repository finds it when nothing is cached.
ARCHIVE_NAME = f"transformers-{UPSTREAM_TAG}-full.tar.gz"
ARCHIVE_SHA256 = "8f6a0adcead1227c491b150903d0cfc0824d189f12b35994b2500e0fc42f4f64"
KNOWN_ARCHIVES = (REPO.parent / "shared" / "upstream" / ARCHIVE_NAME,)
# The git tree id of the release's files as `git add --all` records them (the tree's own .gitignore applies): the
# pristine commit made from the archive or from an unpacked tree must have exactly this tree.
RELEASE_TREE_ID = "49f55633461862377a4a0120d745a181e88d4664"
# sha256 of transformers-4.31.0.tar.gz, the PyPI source distribution: no longer a source (it has no tests/ and no
# utils/, which the series patches and runs), only recognised to say so.
SDIST_SHA256 = "4302fba920a1c24d3a429a29efff6a63eac03f3f3cf55b55927fc795d01cb273"

PRISTINE_TAG = f"upstream-{UPSTREAM_TAG}"
# Where apply.py records the HEAD it produced, to tell its own commits from a maintainer's.
STAMP = "assisted-fix-applied"

# The build tree is a throwaway repository: its commits get a fixed identity, and the pristine commit a fixed date,
# so that the same source and series always give the same commit hashes.
IDENTITY = {
    "GIT_AUTHOR_NAME": "transformers-assisted-fix",
    "GIT_AUTHOR_EMAIL": "build@transformers-assisted-fix.invalid",
    "GIT_COMMITTER_NAME": "transformers-assisted-fix",
    "GIT_COMMITTER_EMAIL": "build@transformers-assisted-fix.invalid",
}
PRISTINE_DATE = "2023-07-18T00:00:00+00:00"

# `--zero-commit` and `--no-signature` drop the two things that change on every export (the commit hash and the
# git version); `--no-numbered` keeps subjects stable when patches are added or removed.
FORMAT_PATCH_OPTIONS = ["--zero-commit", "--no-signature", "--no-numbered", "--full-index", "--binary"]


class SeriesError(Exception):
    """A problem the user has to act on; the message says what and how."""


def git(*args: str, cwd: Path = TREE, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **IDENTITY, **(env or {})}
    result = subprocess.run(["git", *args], cwd=cwd, env=full_env, text=True, capture_output=True)
    if check and result.returncode != 0:
        raise SeriesError(f"git {' '.join(args)} failed in {cwd}:\n{result.stderr.strip() or result.stdout.strip()}")
    return result


def read_series(patches: Path = PATCHES) -> list[Path]:
    """The patches in the order `patches/series` gives, one file name a line; `#` starts a comment."""
    series = patches / "series"
    if not series.exists():
        return []
    names = []
    for number, line in enumerate(series.read_text().splitlines(), start=1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        if not (patches / name).is_file():
            raise SeriesError(f"{series} line {number} names {name}, which is not in {patches}")
        names.append(patches / name)
    return names


GROUP_PREFIX = "# group:"
# The tiers of the series, in order: the groups upstream would merge as pull requests, then those only the fork
# carries. A group line reads `# group: NAME (TIER)`.
TIERS = ("upstream", "fork")


def split_group(label: str) -> tuple[str, str | None]:
    """`NAME (TIER)` -> (NAME, TIER); a label without a tier gives (label, None)."""
    name, _, rest = label.partition(" (")
    return (name.strip(), rest[:-1]) if rest.endswith(")") else (label.strip(), None)


def read_tiers(patches: Path = PATCHES) -> list[tuple[str, str | None]]:
    """(group name, tier) of each `# group:` line of `patches/series`, in order."""
    series = patches / "series"
    if not series.exists():
        return []
    return [
        split_group(line[len(GROUP_PREFIX) :].strip())
        for line in series.read_text().splitlines()
        if line.startswith(GROUP_PREFIX)
    ]


def tier_errors(tiers: list[tuple[str, str | None]]) -> list[str]:
    """What is wrong with the tiers of the groups: a group without a known tier, an upstream group after a fork one."""
    errors, seen_fork = [], None
    for name, tier in tiers:
        if tier not in TIERS:
            errors.append(f"group {name} names no tier ({' or '.join(TIERS)}): `# group: {name} (TIER)`")
        elif tier == "fork":
            seen_fork = seen_fork or name
        elif seen_fork:
            errors.append(f"upstream group {name} comes after fork group {seen_fork}: the upstream tier comes first")
    return errors


def read_groups(patches: Path = PATCHES) -> dict[str, str]:
    """Patch file name -> the group it belongs to: the last `# group: NAME` line before it in `patches/series`
    (quilt ignores comments; the groups are the pull requests the series is submitted as)."""
    series = patches / "series"
    groups: dict[str, str] = {}
    if not series.exists():
        return groups
    group = None
    for line in series.read_text().splitlines():
        if line.startswith(GROUP_PREFIX):
            group = line[len(GROUP_PREFIX) :].strip()
            continue
        name = line.split("#", 1)[0].strip()
        if name and group is not None:
            groups[name] = group
    return groups


def slug(name: str) -> str:
    """A patch file name without its number: what stays when patches before it are added or removed."""
    return name.split("-", 1)[1] if "-" in name else name


def series_text(names: list[str], old_groups: dict[str, str]) -> str:
    """`patches/series` for `names`, one a line, with a `# group: NAME` line before the first patch of each group.
    Each patch keeps the group it had (found by its name without the number); a new one joins the group of the
    patch before it."""
    by_slug = {slug(name): group for name, group in old_groups.items()}
    lines, current = [], None
    for name in names:
        group = by_slug.get(slug(name), current)
        if group is not None and group != current:
            lines.append(f"{GROUP_PREFIX} {group}")
            current = group
        lines.append(name)
    return "".join(f"{line}\n" for line in lines)


def is_build_tree(tree: Path = TREE) -> bool:
    if not (tree / ".git").exists():
        return False
    return git("rev-parse", "-q", "--verify", f"refs/tags/{PRISTINE_TAG}", cwd=tree, check=False).returncode == 0


def format_patches(tree: Path, out_dir: Path) -> list[Path]:
    """Write the commits above the pristine tag as patches into out_dir, named NNNN-subject.patch."""
    result = git("format-patch", *FORMAT_PATCH_OPTIONS, "-o", str(out_dir), f"{PRISTINE_TAG}..HEAD", cwd=tree)
    return [Path(line) for line in result.stdout.splitlines() if line.strip()]


def tree_matches_series(tree: Path = TREE, patches: Path = PATCHES) -> bool:
    """True when the commits above the pristine tag export to exactly the files patches/series lists."""
    expected = read_series(patches)
    with tempfile.TemporaryDirectory() as tmp:
        produced = format_patches(tree, Path(tmp))
        if len(produced) != len(expected):
            return False
        return all(a.read_bytes() == b.read_bytes() for a, b in zip(produced, expected, strict=True))


def dirty_files(tree: Path = TREE) -> list[str]:
    """Tracked files with changes that are not committed (untracked files, such as build artefacts, do not count)."""
    out = git("status", "--porcelain", "--untracked-files=no", cwd=tree).stdout
    return [line[3:] for line in out.splitlines() if line.strip()]


def stamp_path(tree: Path = TREE) -> Path:
    return tree / ".git" / STAMP


def read_stamp(tree: Path = TREE) -> str | None:
    path = stamp_path(tree)
    return path.read_text().strip() if path.exists() else None


def write_stamp(tree: Path = TREE, value: str | None = None) -> None:
    value = value if value is not None else git("rev-parse", "HEAD", cwd=tree).stdout.strip()
    stamp_path(tree).write_text(value + "\n")


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(1)
