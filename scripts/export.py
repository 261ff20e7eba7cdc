"""Write the commits of `build/transformers` above the pristine tag back to `patches/` and `patches/series`.

usage: python scripts/export.py

The patch-queue loop: edit the fork in build/transformers, commit (amend, `rebase -i`, fixups), then export. The
output is deterministic: exporting an unchanged tree leaves patches/ byte for byte as it was.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from series import (
    PATCHES,
    TREE,
    SeriesError,
    dirty_files,
    fail,
    format_patches,
    is_build_tree,
    read_groups,
    series_text,
    write_stamp,
)  # noqa: E402


def export(tree: Path, patches: Path) -> None:
    if not is_build_tree(tree):
        raise SeriesError(f"{tree} is not a build tree; run `make apply` first")
    if (tree / ".git" / "rebase-apply").exists() or (tree / ".git" / "rebase-merge").exists():
        raise SeriesError(f"a git am or rebase is in progress in {tree}: finish it before exporting")
    dirty = dirty_files(tree)
    if dirty:
        raise SeriesError(f"{tree} has uncommitted changes ({', '.join(dirty[:5])}): commit them, then export")

    patches.mkdir(parents=True, exist_ok=True)
    old_groups = read_groups(patches)
    old = {path.name: path.read_bytes() for path in patches.glob("*.patch")}
    with tempfile.TemporaryDirectory() as tmp:
        new = {path.name: path.read_bytes() for path in format_patches(tree, Path(tmp))}
    for name in old.keys() - new.keys():
        (patches / name).unlink()
    for name, content in new.items():
        if old.get(name) != content:
            (patches / name).write_bytes(content)
    (patches / "series").write_text(series_text(sorted(new), old_groups))
    write_stamp(tree)

    changed = sorted(name for name in new.keys() & old.keys() if new[name] != old[name])
    added, removed = sorted(new.keys() - old.keys()), sorted(old.keys() - new.keys())
    for label, names in (("changed", changed), ("added", added), ("removed", removed)):
        for name in names:
            print(f"{label}: {name}")
    counts = f"{len(changed)} changed, {len(added)} added, {len(removed)} removed"
    print(f"exported {len(new)} patches to {patches} ({counts})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=TREE, help=argparse.SUPPRESS)
    parser.add_argument("--patches", type=Path, default=PATCHES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        export(args.tree.resolve(), args.patches.resolve())
    except SeriesError as error:
        fail(str(error))


if __name__ == "__main__":
    main()
