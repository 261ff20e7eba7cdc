"""Builds an isolated Python environment over a system Python: the system's packages, except the ones that must not be
seen by transformers 4.31.

Run it with the system interpreter (on the GPU machine: `python3`, a virtual environment holding torch 2.11 + CUDA,
transformers 5, huggingface-hub 1.x, tokenizers 0.23...). It creates ENV, a virtual environment WITHOUT the system
site-packages, whose site-packages holds one `.pth` file that adds, in this order:

1. PYLIB: the carried pure-Python wheels, unpacked (huggingface-hub 0.16.4, the version transformers 4.31 was
   released against; its import-time check refuses huggingface-hub >= 1.0);
2. LINKS, through `site.addsitedir`: a folder of symbolic links to every entry of the system's site-packages (the
   torch and CUDA packages, numpy, pytest...), EXCEPT the distributions in `EXCLUDED` and their metadata. The system's
   own `.pth` files are linked too, and `addsitedir` processes them as the system's site-packages would.

Nothing is installed into or removed from the system: the packages are the system's own files, seen through links.
transformers itself is not in the environment at all: each run puts the tree it tests (fork or stock) first on
PYTHONPATH. `ENV/bin/ninja` is a stub that fails, so that no model JIT-compiles a CUDA extension during the run (RWKV
compiles its custom kernel when `ninja --version` succeeds; that takes minutes and is not what the suite tests).

Excluded, with the reason:
- transformers: the tree under test comes from PYTHONPATH; the system's 5.x must not be importable under it;
- tokenizers: 4.31's import-time check refuses tokenizers >= 0.14 when it is importable; the suite needs no
  tokenizer, and 0.13.3 (the last accepted version) has no wheel for Python 3.12;
- huggingface_hub: replaced by the carried 0.16.4;
- accelerate, peft: 4.31 imports accelerate at import time when it is installed, and today's accelerate and peft
  need today's huggingface-hub; the suite uses neither (as in the project's own requirements).
"""

import argparse
import json
import os
import re
import shutil
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

EXCLUDED = ("transformers", "tokenizers", "huggingface_hub", "accelerate", "peft")
PTH_NAME = "_isolated_system_packages.pth"
NINJA_STUB = """#!/bin/sh
echo "ninja is hidden in this environment (scripts/cuda/isolate.py): no JIT-compiled extensions" >&2
exit 1
"""


def normalize(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def excluded_distribution(entry, excluded=EXCLUDED):
    """The excluded distribution a site-packages entry belongs to, or None.

    Matches the package or module (`transformers`, `peft.py`), its metadata (`huggingface_hub-1.33.0.dist-info`,
    `.egg-info`, `.egg-link`), editable-install hooks (`__editable__.transformers-5.17.0.pth`,
    `__editable___transformers_5_17_0_finder.py`) and vendored libraries (`tokenizers.libs`)."""
    name = entry
    for prefix in ("__editable__.", "__editable___"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    stem = normalize(re.split(r"[-.]", name, maxsplit=1)[0])
    for distribution in excluded:
        target = normalize(distribution)
        if stem == target:
            return distribution
        # editable finders: __editable___<name>_<version>_finder.py
        if entry.startswith("__editable___") and normalize(name).startswith(target + "_"):
            return distribution
    return None


def system_site_dirs():
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    unique = []
    for path in dirs:
        path = os.path.realpath(path)
        if os.path.isdir(path) and path not in unique:
            unique.append(path)
    return unique


def link_packages(site_dirs, links, excluded=EXCLUDED):
    """Symbolic links in `links` to every entry of `site_dirs` (the first one wins on a name clash), except the
    excluded distributions. Returns (linked names, {excluded name: distribution}, .pth files linked)."""
    links.mkdir(parents=True)
    linked, skipped, pth_files = [], {}, []
    for site_dir in site_dirs:
        for entry in sorted(os.listdir(site_dir)):
            if entry == "__pycache__" or entry in linked:
                continue
            distribution = excluded_distribution(entry, excluded)
            if distribution:
                skipped[os.path.join(site_dir, entry)] = distribution
                continue
            os.symlink(os.path.join(site_dir, entry), links / entry)
            linked.append(entry)
            if entry.endswith(".pth"):
                pth_files.append(os.path.join(site_dir, entry))
    return linked, skipped, pth_files


def unpack_wheels(wheels, pylib):
    pylib.mkdir(parents=True)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(pylib)


def env_site_packages(env):
    python = env / "bin" / "python"
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def build(env, links, pylib, wheels, excluded=EXCLUDED, site_dirs=None):
    """The environment over this interpreter; `site_dirs` (default: its site-packages) are the packages it sees."""
    for path in (env, links, pylib):
        if path.exists() or path.is_symlink():
            shutil.rmtree(path)
    site_dirs = system_site_dirs() if site_dirs is None else [os.path.realpath(path) for path in site_dirs]
    if not site_dirs:
        raise SystemExit(f"{sys.executable} has no site-packages to take the packages from")
    venv.EnvBuilder(system_site_packages=False, with_pip=False, symlinks=True, clear=True).create(env)
    linked, skipped, pth_files = link_packages(site_dirs, links, excluded)
    unpack_wheels(wheels, pylib)
    purelib = env_site_packages(env)
    (purelib / PTH_NAME).write_text(f"{pylib.resolve()}\nimport site; site.addsitedir({str(links.resolve())!r})\n")
    stub = env / "bin" / "ninja"
    stub.write_text(NINJA_STUB)
    stub.chmod(0o755)
    return {
        "system_python": sys.executable,
        "system_version": sys.version.split()[0],
        "base_python": getattr(sys, "_base_executable", sys.executable),
        "system_site_dirs": site_dirs,
        "env": str(env.resolve()),
        "env_site_packages": str(purelib),
        "links": str(links.resolve()),
        "linked": len(linked),
        "excluded": skipped,
        "system_pth_files": pth_files,
        "pylib": str(pylib.resolve()),
        "wheels": [Path(wheel).name for wheel in wheels],
        "excluded_distributions": list(excluded),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", type=Path, required=True, help="the virtual environment to create")
    parser.add_argument("--links", type=Path, required=True, help="the folder of links to the system's packages")
    parser.add_argument("--pylib", type=Path, required=True, help="where the carried wheels are unpacked")
    parser.add_argument("--wheel", type=Path, action="append", default=[], help="a carried wheel (repeatable)")
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="NAME",
        help="hide this distribution as well (run.sh: a system package that breaks the import of a modeling module)",
    )
    parser.add_argument("--report", type=Path, help="write what was linked and excluded here (JSON)")
    args = parser.parse_args()
    report = build(args.env, args.links, args.pylib, args.wheel, EXCLUDED + tuple(args.exclude))
    if args.report:
        args.report.write_text(json.dumps(report, indent=1) + "\n")
    print(
        f"isolate: {report['env']} over {sys.executable} (Python {report['system_version']}): "
        f"{report['linked']} entries of {', '.join(report['system_site_dirs'])} linked, "
        f"{len(report['excluded'])} excluded ({', '.join(sorted(set(report['excluded'].values()))) or 'none found'}), "
        f"system .pth files: {', '.join(Path(p).name for p in report['system_pth_files']) or 'none'}; "
        f"carried: {', '.join(report['wheels'])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
