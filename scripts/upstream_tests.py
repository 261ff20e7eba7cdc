#!/usr/bin/env python3
"""Run upstream's own tests inside a transformers tree and hold the failures against the reviewed list.

usage: python scripts/upstream_tests.py [--tree build/transformers] [-k EXPR] [PATH ...]

By default: the generation-related subset of upstream's model and generation tests,

    pytest tests/models tests/generation -k "generate or greedy or sample or beam or contrastive or assisted"

run inside the tree (PYTHONPATH=<tree>/src; the run stops if transformers is imported from anywhere else), with
the Hugging Face Hub switched off (HF_HUB_OFFLINE=1 and an empty HF_HOME): a test that needs the Hub fails the
same way on every machine, online or not. The failures are then compared with `tests/upstream-known-failures.txt`,
the reviewed list of tests that fail on stock v4.31.0 for a reason outside the series (a Hub download):

- a failure that is not listed is run once more: upstream's model tests build unseeded random tiny models, and a
  test on the edge can fail in one run and pass in the next. Passing the second time, it is reported as FLAKY;
  failing again, it is a FAILURE and the exit status is 1;
- a listed test that ran and passed is reported, so that the list stays true (remove it from the list);
- a listed test that did not run (another -k, other paths) is not mentioned.

`--slow` sets RUN_SLOW=1, which upstream's per-model assisted test needs (v4.31.0 marks
`test_assisted_decoding_matches_greedy_search` @slow): `make test-upstream` runs the subset without it, then
`-k assisted --slow`.

The junit xml of each run is kept in --out (default build/upstream-tests/). Exit status: 0 when every failure is
listed or flaky, 1 otherwise, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TREE = REPO / "build" / "transformers"
KNOWN_FAILURES = REPO / "tests" / "upstream-known-failures.txt"
DEFAULT_PATHS = ("tests/models", "tests/generation")
DEFAULT_K = "generate or greedy or sample or beam or contrastive or assisted"


def read_known(path: Path) -> dict[str, str]:
    """test id -> reason, from lines `test id  # reason` (blank lines and lines starting with # are skipped)."""
    known: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        test_id, _, reason = line.partition("#")
        test_id = test_id.strip()
        if not reason.strip():
            raise SystemExit(f"{path}:{number}: {test_id} has no reason (`test id  # why it fails on stock`)")
        known[test_id] = reason.strip()
    return known


def node_id(tree: Path, classname: str, name: str) -> str:
    """The pytest node id of a junit testcase: `tests.x.test_y.C` + `test_z` -> `tests/x/test_y.py::C::test_z`."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        module = "/".join(parts[:cut]) + ".py"
        if (tree / module).is_file():
            return "::".join([module, *parts[cut:], name])
    return f"{classname}::{name}"


def outcomes(tree: Path, junit: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(test id -> outcome for every test case, test id -> first line of the message for failures and errors)."""
    results: dict[str, str] = {}
    messages: dict[str, str] = {}
    for case in ET.parse(junit).iter("testcase"):
        test_id = node_id(tree, case.get("classname", ""), case.get("name", ""))
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                outcome = tag
                message = (element.get("message") or element.text or "").strip().splitlines()
                if tag != "skipped":
                    messages[test_id] = message[0][:200] if message else ""
                break
        # A test whose teardown errors after the call passed has two entries: the failure counts.
        if results.get(test_id) not in ("failure", "error"):
            results[test_id] = outcome
    return results, messages


def pytest_env(tree: Path, home: Path, slow: bool) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "RUN_SLOW"}
    return {
        **env,
        **({"RUN_SLOW": "1"} if slow else {}),
        "PYTHONPATH": str(tree / "src"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(home),
        "OMP_NUM_THREADS": "1",
    }


def run_pytest(python: str, tree: Path, env: dict, junit: Path, jobs: int, args: list[str]) -> int:
    command = [python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--no-header", f"--junitxml={junit}"]
    # The environment has neither TensorFlow nor Flax: their test files hold only tests that skip, and cost their
    # collection.
    command += ["--ignore-glob=*_tf_*.py", "--ignore-glob=*_flax_*.py"]
    if jobs > 1:
        command += ["-n", str(jobs)]
    process = subprocess.run([*command, *args], cwd=tree, env=env, capture_output=True, text=True)
    summary = [line for line in process.stdout.splitlines() if line.strip()][-1:]
    print(f"  pytest: {summary[0].strip('= ') if summary else '(no output)'}")
    if process.returncode not in (0, 1) or not junit.exists():  # 2-5: interrupted, internal or usage error, none
        print(process.stdout[-4000:] + process.stderr[-4000:])
    return process.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", default=list(DEFAULT_PATHS), help="test paths inside the tree")
    parser.add_argument("-k", dest="keyword", default=DEFAULT_K, help="pytest -k expression")
    parser.add_argument("--tree", type=Path, default=DEFAULT_TREE, help="the transformers tree to test")
    parser.add_argument("--python", default=sys.executable, help="interpreter with pytest and the test requirements")
    parser.add_argument("--known", type=Path, default=KNOWN_FAILURES, help="the reviewed list of known failures")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "upstream-tests", help="where junit xml goes")
    parser.add_argument("--slow", action="store_true", help="RUN_SLOW=1: also upstream's @slow tests")
    parser.add_argument("-n", "--jobs", type=int, default=2, help="pytest-xdist workers")
    args = parser.parse_args(argv)

    tree = args.tree.resolve()
    missing = [path for path in args.paths if not (tree / path).exists()]
    if missing:
        parser.error(f"not in {tree}: {', '.join(missing)} (the tree must be the full v4.31.0 tree, with tests/)")
    known = read_known(args.known)
    args.out = args.out.resolve()  # pytest runs inside the tree: a relative path would land there
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="upstream-tests-hf-") as home:
        env = pytest_env(tree, Path(home), args.slow)
        probe = subprocess.run(
            [args.python, "-c", "import transformers; print(transformers.__file__)"],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
        )
        where = Path(probe.stdout.strip() or "?").resolve()
        if probe.returncode or tree / "src" / "transformers" not in where.parents:
            print(
                f"upstream_tests: transformers is imported from {where}, not from {tree}/src\n{probe.stderr[-2000:]}"
            )
            return 2

        slow = "RUN_SLOW=1 " if args.slow else ""
        print(f"upstream_tests: {slow}pytest {' '.join(args.paths)} -k {args.keyword!r} in {tree}")
        first = args.out / "first.xml"
        status = run_pytest(args.python, tree, env, first, args.jobs, [*args.paths, "-k", args.keyword])
        if not first.exists():
            print(f"upstream_tests: FAILED: pytest exited {status} without results")
            return 1
        results, messages = outcomes(tree, first)
        failed = sorted(test for test, outcome in results.items() if outcome in ("failure", "error"))
        unexpected = [test for test in failed if test not in known]
        flaky: list[str] = []
        still: list[str] = list(unexpected)
        if unexpected:
            print(f"upstream_tests: {len(unexpected)} unlisted failures, running them once more")
            second = args.out / "rerun.xml"
            second.unlink(missing_ok=True)
            run_pytest(args.python, tree, env, second, min(args.jobs, len(unexpected)), unexpected)
            again, messages_again = outcomes(tree, second) if second.exists() else ({}, {})
            flaky = [test for test in unexpected if again.get(test) == "passed"]
            still = [test for test in unexpected if test not in flaky]
            messages.update(messages_again)

    passing_listed = sorted(test for test, reason in known.items() if results.get(test) == "passed")
    counts = {outcome: sum(1 for value in results.values() if value == outcome) for outcome in ("passed", "skipped")}
    for test in flaky:
        print(f"FLAKY: {test} failed, then passed when run again ({messages.get(test, '')})")
    for test in passing_listed:
        print(f"LISTED BUT PASSES: {test} is in {args.known.name} ({known[test]}) but passed: remove it from the list")
    for test in still:
        print(f"FAILURE: {test}: {messages.get(test, '')}")
    print(
        f"upstream_tests: {'OK' if not still else 'FAILED'}: {counts['passed']} passed, {counts['skipped']} skipped, "
        f"{len(failed) - len(unexpected)} known failures, {len(flaky)} flaky, {len(still)} unexpected failures "
        f"(junit xml in {args.out})"
    )
    return 1 if still else 0


if __name__ == "__main__":
    sys.exit(main())
