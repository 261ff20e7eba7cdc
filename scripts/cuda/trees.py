"""The transformers trees of a CUDA run: the patched fork and stock v4.31.0, built from what `prep.py` packed.

`build/cuda/` holds the fork's `src/` (a `git archive` of the applied series) and, for stock, only the pristine
versions of the files the series changes or deletes plus the list of files it adds: stock `src/` is the fork's with
those files put back and the added ones removed. Both trees are checked against the sha256 of their whole content,
computed by `prep.py` from the git objects, so a tree that differs in one byte from what was packed is refused.

Used by `prep.py` (here) and by `run.sh` (on the GPU machine, with that machine's Python): standard library only.

    python3 scripts/cuda/trees.py unpack build/cuda DEST      # DEST/fork/src and DEST/stock/src, checked
    python3 scripts/cuda/trees.py check-series build/cuda .   # patches/ is the series build/cuda was packed from
"""

import argparse
import hashlib
import json
import shutil
import sys
import tarfile
from pathlib import Path

MANIFEST = "manifest.json"
FORMAT = 1


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_sha256(root):
    """sha256 over the relative path and content of every file under `root` (bytecode caches excluded)."""
    root = Path(root)
    digest = hashlib.sha256()
    count = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        if path.suffix == ".pyc":
            continue
        digest.update(f"{path.relative_to(root).as_posix()}\0{file_sha256(path)}\n".encode())
        count += 1
    return digest.hexdigest(), count


def archive_entry(cuda_dir, archive, src_root):
    """The manifest entry of `archive` (in `cuda_dir`) whose files rebuild the tree `src_root`: the archive's sha256,
    and the tree's sha256 and file count, against which the rebuilt tree is checked."""
    tree_digest, count = tree_sha256(src_root)
    return {
        "file": archive,
        "sha256": file_sha256(Path(cuda_dir) / archive),
        "tree_sha256": tree_digest,
        "files": count,
    }


def series_sha256(repo):
    """sha256 over `patches/series` and every patch it lists, in order: identifies the series of a checkout."""
    patches = Path(repo) / "patches"
    series = (patches / "series").read_text()
    digest = hashlib.sha256(series.encode())
    for line in series.splitlines():
        name = line.split("#", 1)[0].strip()  # as scripts/series.py reads it
        if name:
            digest.update(name.encode() + b"\0")
            digest.update((patches / name).read_bytes())
    return digest.hexdigest()


def load_manifest(cuda_dir):
    path = Path(cuda_dir) / MANIFEST
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run `make cuda-prep` (and carry {cuda_dir})")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise SystemExit(f"{path} has format {manifest.get('format')}, expected {FORMAT}: run `make cuda-prep` again")
    return manifest


def check_file(cuda_dir, entry):
    path = Path(cuda_dir) / entry["file"]
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run `make cuda-prep` (and carry {cuda_dir})")
    if file_sha256(path) != entry["sha256"]:
        raise SystemExit(f"{path} does not match the sha256 of build/cuda/{MANIFEST}: run `make cuda-prep` again")
    return path


def _extract(archive, dest):
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            # git archive writes regular files and directories under src/ only; anything else is not ours
            name = Path(member.name)
            if name.is_absolute() or ".." in name.parts or not (member.isfile() or member.isdir()):
                raise SystemExit(f"{archive}: unexpected member {member.name!r}")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - Python without extraction filters; the members were checked above
            tar.extractall(dest)


def build_stock(fork_src_parent, stock_parent, manifest, cuda_dir):
    """stock_parent/src = fork_parent/src, with the pristine files put back and the series' additions removed."""
    stock = manifest["stock"]
    shutil.copytree(
        Path(fork_src_parent) / "src", Path(stock_parent) / "src", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in stock["added_by_series"]:
        path = Path(stock_parent) / name
        if not path.is_file():
            raise SystemExit(f"the series adds {name}, but the fork tree does not have it")
        path.unlink()
    _extract(check_file(cuda_dir, stock), stock_parent)
    # directories left empty by the removal of added files do not exist in the pristine tree
    for name in stock["added_by_series"]:
        parent = (Path(stock_parent) / name).parent
        while parent != Path(stock_parent) and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent


def check_tree(root, expected, label):
    found, count = tree_sha256(root)
    if found != expected["tree_sha256"] or count != expected["files"]:
        raise SystemExit(
            f"the {label} tree {root} is not the one packed ({count} files, sha256 {found[:12]}; expected "
            f"{expected['files']} files, {expected['tree_sha256'][:12]})"
        )
    return count


def unpack(cuda_dir, dest):
    """DEST/fork/src (the patched fork) and DEST/stock/src (v4.31.0), each checked against the manifest."""
    manifest = load_manifest(cuda_dir)
    dest = Path(dest)
    for name in ("fork", "stock"):
        if (dest / name).exists():
            shutil.rmtree(dest / name)
        (dest / name).mkdir(parents=True)
    _extract(check_file(cuda_dir, manifest["fork_src"]), dest / "fork")
    fork_files = check_tree(dest / "fork" / "src", manifest["fork_src"], "fork")
    build_stock(dest / "fork", dest / "stock", manifest, cuda_dir)
    stock_files = check_tree(dest / "stock" / "src", manifest["stock"], "stock")
    return manifest, fork_files, stock_files


def check_series(cuda_dir, repo):
    manifest = load_manifest(cuda_dir)
    current = series_sha256(repo)
    if current != manifest["series_sha256"]:
        raise SystemExit(
            f"{cuda_dir} was packed from another patch series than {Path(repo).resolve()}/patches: run "
            "`make apply cuda-prep` again"
        )
    return manifest


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    unpack_parser = sub.add_parser("unpack", help="build DEST/fork/src and DEST/stock/src and check them")
    unpack_parser.add_argument("cuda_dir", type=Path)
    unpack_parser.add_argument("dest", type=Path)
    series_parser = sub.add_parser("check-series", help="check that REPO/patches is the series that was packed")
    series_parser.add_argument("cuda_dir", type=Path)
    series_parser.add_argument("repo", type=Path)
    args = parser.parse_args()
    if args.command == "unpack":
        manifest, fork_files, stock_files = unpack(args.cuda_dir, args.dest)
        print(
            f"trees: fork {manifest['fork_commit'][:12]} ({len(manifest['series'])} patches, {fork_files} files) and "
            f"stock v4.31.0 ({stock_files} files: {len(manifest['stock']['replaced'])} put back, "
            f"{len(manifest['stock']['added_by_series'])} removed) under {args.dest}, contents checked"
        )
    else:
        manifest = check_series(args.cuda_dir, args.repo)
        print(
            f"series: {len(manifest['series'])} patches, as packed in {args.cuda_dir} "
            f"(fork {manifest['fork_commit'][:12]})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
