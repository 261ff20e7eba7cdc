#!/usr/bin/env python3
"""Check that the patch series is bisectable: every prefix applies, imports and passes what it can change.

For k = 1..N (N patches in patches/series), on a temporary clone of the build tree checked out at the pristine
tag `upstream-v4.31.0`, the script

1. applies patch k on top of prefix k-1 with `git am` ("patch k (name) does not apply" otherwise);
2. imports `transformers` and every PyTorch module of the package that patch k touches (a fresh interpreter with
   PYTHONPATH set to the clone's src/);
3. runs the regression part of the suite (tests/models/test_plain_unchanged.py: plain generation is unchanged;
   tests/models/test_slicing.py: the slicing unit tests) against the clone, with `TRANSFORMERS_TREE=<clone>` and
   `SERIES_PARTIAL=1` (the suite then skips the slicing tests of the classes the prefix has not patched yet), on
   what the patch can change:
   - a patch touching model files (src/transformers/models/...) runs it for the model classes those files define
     (`-k`);
   - a patch whose only change to shared code is in what only assisted decoding runs (`assisted_decoding` and the
     functions of generation/utils.py that plain generation never reaches, see scripts/assisted_code.py) cannot
     change plain generation nor slicing: it runs none of it;
   - a patch touching any other shared code (generate(), GenerationMixin's attributes, modeling_utils.py, ...) runs
     the whole regression part;
   `--full` runs the whole regression part at every prefix;
4. runs upstream's assisted-generation tests (`-k assisted`, RUN_SLOW=1, through scripts/upstream_tests.py: known
   failures and flaky tests as there):
   - at the last patch of each group (`# group: NAME (TIER)` lines of patches/series, the pull requests the series
     is submitted as) and at the tip: every model's, and tests/generation's; the last group of the upstream tier is
     one, so the upstream tier is checked standing alone;
   - elsewhere: those of the models the patch touches (tests/models/<model>/test_modeling_<model>.py for each
     src/transformers/models/<model>/modeling_<model>.py) and the upstream test files it touches, and
     tests/generation's for a patch touching shared code;
   `--full` runs every model's at every prefix; `--no-upstream-tests` skips this step;
5. with `--copies-python PY` (an interpreter with upstream's black 23.1.0 and hf-doc-builder, build/lint-venv),
   runs upstream's utils/check_copies.py in the prefix, alongside the tests, when the patch touches a file it
   checks (anything but src/transformers/generation/ and tests/): every `# Copied from` block matches.

`--plan` applies the patches and prints what each prefix would run, without running it.

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
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from assisted_code import UTILS, only_changes_assisted_decoding  # noqa: E402

PRISTINE_TAG = "upstream-v4.31.0"
REGRESSION_TESTS = ("tests/models/test_plain_unchanged.py", "tests/models/test_slicing.py")
IDENTITY = ("-c", "user.name=Series Check", "-c", "user.email=series-check@localhost")
# Modules of these kinds need TensorFlow or Flax, which the PyTorch environment does not have.
NOT_IMPORTABLE = ("modeling_tf_", "modeling_flax_", "tf_utils", "flax_utils", "_tf_", "_flax_")
# Modules of the package that only assisted decoding and prompt lookup run (plain generation calls none of their
# functions): a change to them cannot change plain generation or slicing.
ASSISTED_ONLY_FILES = ("src/transformers/generation/candidates.py",)
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


GROUP_PREFIX = "# group:"


def read_series(patches: Path) -> list[tuple[str, str | None]]:
    """(patch file name, group) in `patches/series` order (quilt format: one name a line, `#` comments, options
    ignored); the group of a patch is named by the last `# group: NAME` line before it, None before the first."""
    entries, group = [], None
    for line in (patches / "series").read_text(encoding="utf-8").splitlines():
        if line.startswith(GROUP_PREFIX):
            group = line[len(GROUP_PREFIX) :].strip()
            continue
        line = line.split("#", 1)[0].strip()
        if line:
            entries.append((line.split()[0], group))
    return entries


def group_ends(entries: list[tuple[str, str | None]]) -> set[int]:
    """The 1-based positions of the last patch of each group, and of the last patch."""
    ends = {len(entries)}
    for k in range(1, len(entries)):
        if entries[k - 1][1] != entries[k][1]:
            ends.add(k)
    return ends


def git(clone: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(clone), *IDENTITY, *args], capture_output=True, text=True, check=check)


# `git worktree add` and `remove` write the clone's shared administrative files: one at a time.
WORKTREE_LOCK = threading.Lock()


def add_worktree(clone: Path, tree: Path, commit: str) -> None:
    """Check out `commit` in a new work tree at `tree`; tried twice, then git's own words in the error."""
    for retry in (False, True):
        with WORKTREE_LOCK:
            added = git(clone, "worktree", "add", "-q", "--detach", str(tree), commit, check=False)
            if not added.returncode:
                return
            shutil.rmtree(tree, ignore_errors=True)
            git(clone, "worktree", "prune", check=False)
        if not retry:
            print(f"check_series: git worktree add {tree.name} failed, once more: {added.stderr.strip()}", flush=True)
    raise RuntimeError(f"git worktree add {tree} {commit} failed: {added.stderr.strip()}")


def remove_worktree(clone: Path, tree: Path) -> None:
    with WORKTREE_LOCK:
        git(clone, "worktree", "remove", "--force", str(tree), check=False)


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


def assisted_only_change(clone: Path) -> bool:
    """Whether the patch's change to generation/utils.py is all in code that only assisted decoding runs."""
    old = git(clone, "show", f"HEAD~1:{UTILS}").stdout
    new = git(clone, "show", f"HEAD:{UTILS}").stdout
    return only_changes_assisted_decoding(old, new)


def scope_of(clone: Path, files: list[str]) -> tuple[list[str], list[str] | None, bool]:
    """(modules to import, model classes whose tests to run or None for the whole regression part, whether the
    patch touches shared code)."""
    modules, classes, everything, shared = [], [], False, False
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
            shared = True  # shared code: generation/, modeling_utils.py, ...
            if path in ASSISTED_ONLY_FILES:
                continue
            if path != UTILS or not assisted_only_change(clone):
                everything = True
    return modules, None if everything else sorted(set(classes)), shared


def checks_copies(files: list[str]) -> bool:
    """Whether upstream's check_copies.py can see the change: it checks the models' `# Copied from` blocks and the
    model lists of the docs, never generation/ or the tests."""
    return any(not path.startswith(("src/transformers/generation/", "tests/")) for path in files)


def run_prefix(
    clone: Path,
    python: str,
    tests: list[str],
    modules: list[str],
    classes: list[str] | None,
    timeout: int,
    workers: int = 2,
) -> tuple[str, str]:
    """('OK' | 'import' | 'tests' | 'timeout', output) for the prefix checked out in `clone`."""
    pytest_args: list[str] = []
    if classes is None or classes:
        pytest_args = [*tests, "-q", "-x", "-p", "no:cacheprovider", "--no-header"]
        if classes:
            pytest_args += ["-k", " or ".join(classes)]
        elif workers > 1:
            pytest_args += ["-n", str(workers)]  # the whole regression part
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


def assisted_test_files(clone: Path) -> list[str]:
    """Every model test file with an assisted test: those that mix in `GenerationTesterMixin` (its assisted tests)
    or name one themselves. The others hold no test `-k assisted` selects, and only cost their collection."""
    found = []
    for path in sorted((clone / "tests" / "models").glob("*/test_modeling_*.py")):
        if any(marker in path.name for marker in NOT_IMPORTABLE):
            continue
        text = path.read_text(encoding="utf-8")
        if "GenerationTesterMixin" in text or "assisted" in text:
            found.append(str(path.relative_to(clone)))
    return found


def upstream_test_paths(clone: Path, files: list[str], shared: bool, full: bool) -> list[str]:
    """Upstream's test files that cover what the patch touches: the touched models' tests and touched test files; for
    shared code tests/generation, and with `full` every model's assisted tests as well."""
    if full:
        return assisted_test_files(clone) + ["tests/generation"]
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


KNOWN_FAILURES = REPO / "tests" / "upstream-known-failures.txt"
KNOWN_IN_SERIES = REPO / "tests" / "upstream-known-failures-in-series.txt"


def known_in_series(k: int, path: Path = KNOWN_IN_SERIES) -> list[str]:
    """The lines of `path` (`test id  # until NNNN: reason`) whose patch NNNN comes after the prefix of `k` patches:
    upstream's tests that may fail there, before the patch that fixes what they catch."""
    if not path.exists():
        return []
    lines = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        test_id, _, comment = line.partition("#")
        until, _, reason = comment.strip().partition(":")
        if not until.startswith("until ") or not until[len("until ") :].isdigit() or not reason.strip():
            raise SystemExit(f"{path}:{number}: expected `test id  # until NNNN: reason`")
        if k < int(until[len("until ") :]):
            lines.append(f"{test_id.strip()}  # {reason.strip()}")
    return lines


def run_upstream_tests(
    clone: Path, python: str, paths: list[str], timeout: int, workers: int = 2, k: int | None = None
) -> tuple[str, str]:
    """('OK' | 'upstream' | 'timeout', output) of upstream's assisted tests in these paths of the clone (the prefix of
    `k` patches: the known failures of `known_in_series` count there too)."""
    if not paths:
        return "OK", "upstream_tests: no upstream test file covers the patch"
    command = [python, str(REPO / "scripts" / "upstream_tests.py"), "--tree", str(clone), "-k", "assisted", "--slow"]
    extra = known_in_series(k) if k is not None else []
    if extra:
        known = clone.parent / f"upstream-known-failures-{clone.name}.txt"
        known.write_text(KNOWN_FAILURES.read_text(encoding="utf-8") + "\n".join(extra) + "\n", encoding="utf-8")
        command += ["--known", str(known)]
    # Two xdist workers each import torch and collect every path: worth it only for more than a few test files.
    jobs = str(workers) if len(paths) > 4 else "1"
    out = clone.parent / f"upstream-tests-{clone.name}"
    command += ["--python", python, "--out", str(out), "-n", jobs, *paths]
    try:
        process = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        return "timeout", str(error)
    return ("OK" if process.returncode == 0 else "upstream"), process.stdout + process.stderr


# Runs in the clone, with upstream's utils/ on the path: its own check of the `# Copied from` blocks, on the files
# a patch can have put out of step (the whole check, model lists included, with no file named).
COPIES_DRIVER = """
import sys
sys.path.insert(0, "utils")
import check_copies
files = sys.argv[1:]
if not files:
    check_copies.check_copies()
    sys.exit(0)
diffs = [f"- {name}: copy does not match {diff[0]} at line {diff[1]}"
         for name in files for diff in check_copies.is_copy_consistent(name)]
if diffs:
    sys.exit("Found the following copy inconsistencies:\\n" + "\\n".join(diffs))
"""


def copies_to_check(clone: Path, files: list[str]) -> list[str] | None:
    """The files whose `# Copied from` blocks the patch can have put out of step: those it touches, and those that
    copy from a module it touches. None where upstream's whole check must run (the patch touches something else than
    Python files of the package, such as the model lists of README.md and docs/)."""
    modules = [module_name(path) for path in files if path.startswith("src/transformers/")]
    if any(module is None for module in modules) or any(not path.startswith(("src/", "tests/")) for path in files):
        return None
    candidates = {path for path in files if path.startswith("src/transformers/")}
    markers = [f"Copied from {module}." for module in modules]
    for path in (clone / "src" / "transformers").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if any(marker in text for marker in markers):
            candidates.add(str(path.relative_to(clone)))
    return sorted(candidates)


def start_copies_check(clone: Path, python: str | None, files: list[str] | None) -> subprocess.Popen | None:
    if python is None:
        return None
    env = dict(os.environ, PYTHONPATH=str(clone / "src"), TRANSFORMERS_NO_ADVISORY_WARNINGS="1")
    return subprocess.Popen(
        [os.path.abspath(python), "-c", COPIES_DRIVER, *(files or [])],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def plan_line(classes: list[str] | None, upstream_paths: list[str], group_end: bool, copies: bool) -> str:
    """What a prefix runs, in words."""
    regression = "all" if classes is None else (f"{len(classes)} classes" if classes else "none")
    upstream = (
        "every model's (group end)" if group_end else (f"{len(upstream_paths)} paths" if upstream_paths else "none")
    )
    return f"regression [{regression}]; upstream -k assisted [{upstream}]; check_copies [{'yes' if copies else 'no'}]"


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
    parser.add_argument(
        "--no-group-runs",
        action="store_true",
        help="let group ends and the tip run their own scope only, not every model's assisted tests",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="apply the patches and print what each prefix would run, without running it",
    )
    parser.add_argument(
        "--jobs", type=int, default=2, help="prefixes checked at the same time, each on a work tree (default 2)"
    )
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
    entries = read_series(args.patches)
    if not entries:
        parser.error(f"{args.patches}/series lists no patch")
    names = [name for name, _ in entries]
    ends = group_ends(entries)

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
        print(f"check_series: {len(names)} patches on {PRISTINE_TAG}, in {clone}", flush=True)
        # 1. every patch in turn, one commit per prefix
        commits, not_applied = [], None
        for k, name in enumerate(names, start=1):
            applied = git(clone, "am", "-q", str((args.patches / name).resolve()), check=False)
            if applied.returncode:
                git(clone, "am", "--abort", check=False)
                not_applied = (k, name, tail(applied.stdout + applied.stderr))
                break
            commits.append(git(clone, "rev-parse", "HEAD").stdout.strip())
        # 2. each prefix on a work tree of its own, `--jobs` at a time, reported in order
        checked = check_prefixes(args, clone, names, commits, ends, workdir)
        broken = [(k, name) for k, name, ok in checked if not ok]
        if not_applied is not None and (not broken or args.keep_going):
            k, name, why = not_applied
            print(f"[{k}/{len(names)}] {name}: BROKEN: patch {k} ({name}) does not apply\n{why}")
            broken.append((k, name))
        if args.plan:
            return 1 if not_applied else 0
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


def check_prefixes(args, clone: Path, names: list[str], commits: list[str], ends: set[int], workdir: Path):
    """[(k, name, ok)] for the prefixes checked, in order; after a broken one, the later ones are not started
    (unless `--keep-going`)."""
    results: dict[int, tuple[bool, str]] = {}
    stop = threading.Event()
    workers = 1 if args.jobs > 1 else 2  # the test runs inside a prefix: on the cores the prefixes leave

    def one(k: int) -> None:
        if stop.is_set():
            return
        tree = workdir / f"prefix-{k:03d}"
        add_worktree(clone, tree, commits[k - 1])
        try:
            ok, text = check_prefix(args, tree, k, names[k - 1], len(names), k in ends, workers)
        finally:
            remove_worktree(clone, tree)
        results[k] = (ok, text)
        if not ok and not args.keep_going:
            stop.set()

    done = []
    with ThreadPoolExecutor(max_workers=1 if args.plan else args.jobs) as pool:
        futures = [pool.submit(one, k) for k in range(1, len(commits) + 1)]
        for k, future in enumerate(futures, start=1):
            future.result()
            if k not in results:
                break
            ok, text = results[k]
            print(text, flush=True)
            done.append((k, names[k - 1], ok))
            if not ok and not args.keep_going:
                stop.set()
                break
    return done


def check_prefix(args, tree: Path, k: int, name: str, count: int, is_group_end: bool, workers: int):
    """(ok, the line to print) for prefix k, checked out in `tree`."""
    label = f"[{k}/{count}] {name}"
    files = touched_files(tree)
    modules, classes, shared = scope_of(tree, files)
    group_end = is_group_end and not args.no_group_runs
    upstream_paths = upstream_test_paths(tree, files, shared=shared, full=args.full or group_end)
    if args.full:
        classes = None
    if args.plan:
        return True, f"{label}: {plan_line(classes, upstream_paths, group_end, checks_copies(files))}"
    tick = time.monotonic()
    if args.no_tests:
        classes = []
    copies = start_copies_check(
        tree, args.copies_python if checks_copies(files) else None, copies_to_check(tree, files)
    )
    verdict, output = run_prefix(tree, args.python, args.tests, modules, classes, args.timeout, workers)
    scope = "all" if classes is None else (f"{len(classes)} classes" if classes else "none")
    upstream = ""
    if verdict == "OK" and not (args.no_tests or args.no_upstream_tests):
        verdict, upstream_output = run_upstream_tests(tree, args.python, upstream_paths, args.timeout, workers, k=k)
        last = upstream_output.strip().splitlines()[-1] if upstream_output.strip() else "-"
        upstream = "; upstream -k assisted: " + last.split(": ", 1)[-1].split(" (junit xml")[0]
        output = upstream_output if verdict != "OK" else output
    if copies is not None:
        copies_output = copies.communicate()[0]
        if copies.returncode and verdict == "OK":
            verdict, output = "copies", copies_output
        upstream += "; check_copies: " + ("OK" if copies.returncode == 0 else "FAILED")
    elif args.copies_python is not None:
        upstream += "; check_copies: not needed"
    seconds = f"{time.monotonic() - tick:.0f}s"
    if verdict == "OK":
        tests = summary_line(output) or ("no test selected" if classes != [] else "not run")
        return True, f"{label}: OK (imports {len(modules)} modules; tests [{scope}]: {tests}{upstream}; {seconds})"
    what = {
        "import": "an import fails",
        "tests": f"the regression tests fail (scope: {scope})",
        "timeout": f"the tests ran past {args.timeout}s",
        "upstream": f"upstream's assisted tests fail ({len(upstream_paths)} test paths)",
        "copies": "upstream's utils/check_copies.py finds copies that differ from their source",
    }[verdict]
    return False, f"{label}: BROKEN: prefix {k} ({name}): {what}\n{tail(output, 40)}"


def fail(k: int, name: str, started: float, also: list[int] | None = None) -> int:
    more = f"; also broken: {', '.join(map(str, also))}" if also else ""
    print(f"check_series: FAILED: first broken prefix is {k} ({name}){more} ({time.monotonic() - started:.0f}s)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
