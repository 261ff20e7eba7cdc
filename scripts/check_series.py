#!/usr/bin/env python3
"""Check that the patch series is bisectable: every prefix applies, imports and passes the regression tests.

For k = 1..N (N patches in patches/series), on a temporary clone of the build tree checked out at the pristine
tag `upstream-v4.31.0`, the script

1. applies patch k on top of prefix k-1 with `git am` ("patch k (name) does not apply" otherwise);
2. imports `transformers` and every PyTorch module of the package that patch k touches (a fresh interpreter with
   PYTHONPATH set to the clone's src/);
3. runs the regression part of the suite (tests/models/test_plain_unchanged.py: plain generation is unchanged;
   tests/models/test_slicing.py: the slicing unit tests) against the clone, with `TRANSFORMERS_TREE=<clone>` and
   `SERIES_PARTIAL=1` (the suite then skips the slicing tests of the classes the prefix has not patched yet).
   A patch can only change the behaviour of the files it touches, so when it only touches model files
   (src/transformers/models/...) the run is restricted with `-k` to the model classes those files define; a patch
   touching anything else (generation/utils.py, modeling_utils.py, ...) runs the whole regression part.
   `--full` runs the whole regression part at every prefix;
4. runs upstream's assisted-generation tests (`-k assisted`, RUN_SLOW=1, through scripts/upstream_tests.py: known
   failures and flaky tests as there) of the models the patch touches (tests/models/<model>/test_modeling_<model>.py
   for each src/transformers/models/<model>/modeling_<model>.py), and the upstream test files the patch touches; a
   patch touching shared code runs tests/generation's (`make test-upstream` runs every model's at the tip of the
   series; `--full` runs every model's at every prefix; `--no-upstream-tests` skips this step);
5. with `--copies-python PY` (an interpreter with upstream's black 23.1.0 and hf-doc-builder, build/lint-venv),
   runs upstream's utils/check_copies.py in the prefix, alongside the tests: every `# Copied from` block matches.

It prints one line per prefix and exits 0 when every prefix is fine; otherwise it stops at the first broken
prefix (with `--keep-going`, after an import or test failure, it checks the later prefixes too), prints what broke,
and exits 1. Usage errors exit 2.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRISTINE_TAG = "upstream-v4.31.0"
REGRESSION_TESTS = ("tests/models/test_plain_unchanged.py", "tests/models/test_slicing.py")
IDENTITY = ("-c", "user.name=Series Check", "-c", "user.email=series-check@localhost")
# Modules of these kinds need TensorFlow or Flax, which the PyTorch environment does not have.
NOT_IMPORTABLE = ("modeling_tf_", "modeling_flax_", "tf_utils", "flax_utils", "_tf_", "_flax_")
# Exit status of the import step when an import fails (pytest's own statuses are 0..5).
IMPORT_FAILED = 99

# Runs in the clone's interpreter: import what the patch touches, then the regression tests in the same process
# (one torch import per prefix instead of two).
DRIVER = """
import importlib, sys, traceback
modules, pytest_args = sys.argv[1].split(), sys.argv[2:]
try:
    import transformers
    for name in modules:
        importlib.import_module(name)
except Exception:
    traceback.print_exc()
    sys.exit({import_failed})
if not pytest_args:
    sys.exit(0)
import pytest
sys.exit(pytest.main(pytest_args))
""".format(import_failed=IMPORT_FAILED)


def read_series(patches: Path) -> list[str]:
    """Patch file names in `patches/series` order (quilt format: one name a line, `#` comments, options ignored)."""
    names = []
    for line in (patches / "series").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line.split()[0])
    return names


def git(clone: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(clone), *IDENTITY, *args], capture_output=True, text=True, check=check)


def touched_files(clone: Path) -> list[str]:
    return git(clone, "diff", "--name-only", "HEAD~1", "HEAD").stdout.split()


def module_name(path: str) -> str | None:
    """`transformers.x.y` for a .py file under src/transformers (None for anything else)."""
    if not path.startswith("src/transformers/") or not path.endswith(".py"):
        return None
    parts = path[len("src/") : -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def defined_classes(path: Path) -> list[str]:
    if not path.is_file():
        return []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.name for node in tree.body if isinstance(node, ast.ClassDef) and not node.name.startswith("_")]


def scope_of(clone: Path, files: list[str]) -> tuple[list[str], list[str] | None]:
    """(modules to import, model classes whose tests to run or None for the whole regression part)."""
    modules, classes, everything = [], [], False
    for path in files:
        name = module_name(path)
        if name is None:
            continue  # tests, docs: no behaviour of the package
        if not any(marker in name.rsplit(".", 1)[-1] for marker in NOT_IMPORTABLE):
            modules.append(name)
        parts = name.split(".")
        if len(parts) == 4 and parts[1] == "models" and parts[3].startswith("modeling_"):
            if not any(marker in parts[3] for marker in NOT_IMPORTABLE):
                classes.extend(defined_classes(clone / path))
        elif not (len(parts) >= 3 and parts[1] == "models"):
            everything = True  # shared code: generation/, modeling_utils.py, ...
    return modules, None if everything else sorted(set(classes))


def run_prefix(
    clone: Path, python: str, tests: list[str], modules: list[str], classes: list[str] | None, timeout: int
) -> tuple[str, str]:
    """('OK' | 'import' | 'tests' | 'timeout', output) for the prefix checked out in `clone`."""
    pytest_args: list[str] = []
    if classes is None or classes:
        pytest_args = [*tests, "-q", "-x", "-p", "no:cacheprovider", "--no-header"]
        if classes:
            pytest_args += ["-k", " or ".join(classes)]
    env = dict(os.environ, PYTHONPATH=str(clone / "src"), TRANSFORMERS_TREE=str(clone), SERIES_PARTIAL="1")
    try:
        process = subprocess.run(
            [python, "-c", DRIVER, " ".join(modules), *pytest_args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as error:
        return "timeout", str(error)
    output = process.stdout + process.stderr
    if process.returncode == IMPORT_FAILED:
        return "import", output
    # 5: no test matched the -k selection (e.g. the patch touches a model the regression part does not cover).
    if process.returncode in (0, 5):
        return "OK", output
    return "tests", output


def upstream_test_paths(clone: Path, files: list[str], shared: bool, full: bool) -> list[str]:
    """Upstream's test files that cover what the patch touches: the touched models' tests and touched test files;
    for shared code tests/generation, and with `full` every model's tests as well."""
    if full:
        models = sorted(
            str(path.relative_to(clone)) for path in (clone / "tests" / "models").glob("*/test_modeling_*.py")
        )
        return [path for path in models if not any(marker in path for marker in NOT_IMPORTABLE)] + ["tests/generation"]
    paths = ["tests/generation"] if shared else []
    for path in files:
        parts = path.split("/")
        if parts[0] == "tests" and parts[-1].startswith("test_") and path.endswith(".py"):
            paths.append(path)
        elif len(parts) == 5 and parts[:3] == ["src", "transformers", "models"] and parts[4].startswith("modeling_"):
            test = f"tests/models/{parts[3]}/test_{parts[4]}"
            if not any(marker in parts[4] for marker in NOT_IMPORTABLE):
                paths.append(test)
    return sorted({path for path in paths if (clone / path).exists()})


def run_upstream_tests(clone: Path, python: str, paths: list[str], timeout: int) -> tuple[str, str]:
    """('OK' | 'upstream' | 'timeout', output) of upstream's assisted tests in these paths of the clone."""
    if not paths:
        return "OK", "upstream_tests: no upstream test file covers the patch"
    command = [python, str(REPO / "scripts" / "upstream_tests.py"), "--tree", str(clone), "-k", "assisted", "--slow"]
    # Two xdist workers each import torch and collect every path: worth it only for more than a few test files.
    jobs = "2" if len(paths) > 4 else "1"
    command += ["--python", python, "--out", str(clone.parent / "upstream-tests"), "-n", jobs, *paths]
    try:
        process = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        return "timeout", str(error)
    return ("OK" if process.returncode == 0 else "upstream"), process.stdout + process.stderr


def start_copies_check(clone: Path, python: str | None) -> subprocess.Popen | None:
    if python is None:
        return None
    env = dict(os.environ, PYTHONPATH=str(clone / "src"), TRANSFORMERS_NO_ADVISORY_WARNINGS="1")
    return subprocess.Popen(
        [os.path.abspath(python), "utils/check_copies.py"],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def tail(text: str, lines: int = 25) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines()[-lines:])


def summary_line(output: str) -> str:
    """pytest's closing summary (`3 passed, 1 skipped in 4.2s`), if there is one."""
    for line in reversed(output.strip().splitlines()):
        if " in " in line and any(word in line for word in ("passed", "failed", "skipped", "error", "deselected")):
            return line.strip("= ").strip()
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=REPO / "build" / "transformers", help="git tree with the tag")
    parser.add_argument("--patches", type=Path, default=REPO / "patches", help="folder with series and *.patch")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs the imports and tests")
    parser.add_argument("--tests", nargs="+", default=list(REGRESSION_TESTS), help="regression test files")
    parser.add_argument(
        "--full", action="store_true", help="run the whole regression part and every upstream assisted test per prefix"
    )
    parser.add_argument("--no-tests", action="store_true", help="only apply and import every prefix")
    parser.add_argument("--no-upstream-tests", action="store_true", help="skip upstream's assisted tests per prefix")
    parser.add_argument(
        "--copies-python", help="run upstream's utils/check_copies.py per prefix with this interpreter"
    )
    parser.add_argument("--timeout", type=int, default=600, help="seconds allowed to one prefix's tests")
    parser.add_argument("--keep", action="store_true", help="keep the temporary clone and print where it is")
    parser.add_argument(
        "--keep-going", action="store_true", help="check the later prefixes too after an import or test failure"
    )
    args = parser.parse_args(argv)

    if not (args.patches / "series").is_file():
        parser.error(f"{args.patches}/series does not exist")
    if git(args.source, "rev-parse", "-q", "--verify", f"refs/tags/{PRISTINE_TAG}", check=False).returncode:
        parser.error(f"{args.source} has no tag {PRISTINE_TAG}")
    missing = [t for t in args.tests if not (REPO / t).is_file()]
    if missing and not args.no_tests:
        parser.error(f"regression test files missing: {', '.join(missing)} (or pass --no-tests)")
    names = read_series(args.patches)
    if not names:
        parser.error(f"{args.patches}/series lists no patch")

    for k, name in enumerate(names, start=1):
        if not (args.patches / name).is_file():
            print(f"[{k}/{len(names)}] {name}: BROKEN: patch {k} ({name}) is listed in series but missing")
            return fail(k, name, time.monotonic())

    workdir = Path(tempfile.mkdtemp(prefix="check-series-"))
    clone = workdir / "transformers"
    started = time.monotonic()
    try:
        subprocess.run(
            ["git", "clone", "-q", "--shared", "--no-checkout", str(args.source.resolve()), str(clone)], check=True
        )
        git(clone, "checkout", "-q", "-B", "series-check", PRISTINE_TAG)
        print(f"check_series: {len(names)} patches on {PRISTINE_TAG}, in {clone}")
        broken: list[tuple[int, str]] = []
        for k, name in enumerate(names, start=1):
            label = f"[{k}/{len(names)}] {name}"
            patch = args.patches / name
            applied = git(clone, "am", "-q", str(patch.resolve()), check=False)
            if applied.returncode:
                git(clone, "am", "--abort", check=False)
                print(f"{label}: BROKEN: patch {k} ({name}) does not apply\n{tail(applied.stdout + applied.stderr)}")
                return fail(k, name, started)
            files = touched_files(clone)
            modules, classes = scope_of(clone, files)
            upstream_paths = upstream_test_paths(clone, files, shared=classes is None, full=args.full)
            if args.full:
                classes = None
            tick = time.monotonic()
            if args.no_tests:
                classes = []
            copies = start_copies_check(clone, args.copies_python)
            verdict, output = run_prefix(clone, args.python, args.tests, modules, classes, args.timeout)
            scope = "all" if classes is None else (f"{len(classes)} classes" if classes else "none")
            upstream = ""
            if verdict == "OK" and not (args.no_tests or args.no_upstream_tests):
                verdict, upstream_output = run_upstream_tests(clone, args.python, upstream_paths, args.timeout)
                last = upstream_output.strip().splitlines()[-1] if upstream_output.strip() else "-"
                upstream = "; upstream -k assisted: " + last.split(": ", 1)[-1].split(" (junit xml")[0]
                output = upstream_output if verdict != "OK" else output
            if copies is not None:
                copies_output = copies.communicate()[0]
                if copies.returncode and verdict == "OK":
                    verdict, output = "copies", copies_output
                upstream += "; check_copies: " + ("OK" if copies.returncode == 0 else "FAILED")
            seconds = f"{time.monotonic() - tick:.0f}s"
            if verdict == "OK":
                tests = summary_line(output) or ("no test selected" if classes != [] else "not run")
                print(f"{label}: OK (imports {len(modules)} modules; tests [{scope}]: {tests}{upstream}; {seconds})")
                continue
            what = {
                "import": "an import fails",
                "tests": f"the regression tests fail (scope: {scope})",
                "timeout": f"the tests ran past {args.timeout}s",
                "upstream": f"upstream's assisted tests fail ({len(upstream_paths)} test paths)",
                "copies": "upstream's utils/check_copies.py finds copies that differ from their source",
            }[verdict]
            print(f"{label}: BROKEN: prefix {k} ({name}): {what}\n{tail(output, 40)}")
            if not args.keep_going:
                return fail(k, name, started)
            broken.append((k, name))
        if broken:
            return fail(*broken[0], started, also=[k for k, _ in broken[1:]])
        print(
            f"check_series: OK: all {len(names)} prefixes apply, import and pass ({time.monotonic() - started:.0f}s)"
        )
        return 0
    finally:
        if args.keep:
            print(f"check_series: kept {clone}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def fail(k: int, name: str, started: float, also: list[int] | None = None) -> int:
    more = f"; also broken: {', '.join(map(str, also))}" if also else ""
    print(f"check_series: FAILED: first broken prefix is {k} ({name}){more} ({time.monotonic() - started:.0f}s)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
