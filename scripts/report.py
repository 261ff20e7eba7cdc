"""Runs the per-model tests on stock and on patched transformers and writes `docs/model-status.md`.

`make report` runs it. Each side runs `pytest tests/models/` with its own interpreter and tree (by default
`.venv-stock/bin/python` with `TRANSFORMERS_TREE=build/stock`, and `.venv/bin/python` with
`TRANSFORMERS_TREE=build/transformers`), writes JUnit XML, and the two results are rendered together: the counts, the
supported classes grouped by the scenarios that ran, those stock failed and how a batch's rows advance, the refused
classes grouped by their reason, each class with any other result in full ("stock / patched" per scenario), the
expectation table's notes, and the date, torch, device and commits the report ran on.

`--stock-xml` / `--patched-xml` render existing JUnit files instead of running pytest.
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

SCENARIOS = ("plain", "self", "token_type_ids", "left_pad", "enc_mask")
BATCHED_TEST = "test_batched_assisted_vs_greedy"
LOOKUP_TEST = "test_prompt_lookup_vs_greedy"
TEST_RE = re.compile(r"^(test_\w+)\[(.+)\]$")

MARKS = {
    "passed": "pass",
    "failed": "**FAIL**",
    "error": "**ERROR**",
    "skipped": "skip",
    "not proving": "n.p.",
    "xfail": "xfail",
}


def run_pytest(python, tree, xml_path, jobs, extra_env=None, pythonpath=None):
    env = dict(os.environ, TRANSFORMERS_TREE=str(tree), **(extra_env or {}))
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    command = [str(python), "-m", "pytest", "tests/models", f"--junitxml={xml_path}", "-q", "--tb=line"]
    command += ["-p", "no:cacheprovider"]
    if jobs > 1:
        command += ["-n", str(jobs)]
    print("+", " ".join(command), f"(TRANSFORMERS_TREE={tree})", file=sys.stderr, flush=True)
    completed = subprocess.run(command, cwd=REPO, env=env)
    return completed.returncode


def environment(python, tree, pythonpath=None):
    """torch version, device and transformers location as seen by `python` (the suite's own device choice), and the
    classes whose `_supports_rows_with_holes` is their own (rows with holes, as their config allows)."""
    code = (
        "import json, sys; sys.path.insert(0, 'tests'); import torch, transformers; "
        "from support.device import DEVICE; from support.expectations import EXPECTATIONS; "
        "name = torch.cuda.get_device_name(0) if DEVICE == 'cuda' else ''; "
        "rows = sorted(n for n in EXPECTATIONS "
        "if getattr(getattr(transformers, n, None), '_supports_rows_with_holes', None) not in "
        "(None, transformers.GenerationMixin._supports_rows_with_holes)); "
        "print(json.dumps({'torch': torch.__version__, 'transformers': transformers.__version__, "
        "'device': DEVICE + (f' ({name})' if name else ''), 'path': transformers.__file__, 'rows': rows}))"
    )
    env = dict(os.environ, TRANSFORMERS_TREE=str(tree))
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    try:
        out = subprocess.run([str(python), "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.CalledProcessError, OSError, ValueError, IndexError) as error:
        return {"torch": "?", "transformers": "?", "device": "?", "path": f"unavailable ({error})"}


def git_commit(path):
    """The checked-out commit of the git repository rooted at `path` (not of a repository above it)."""
    try:
        top = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
        ).stdout.strip()
        if Path(top).resolve() != Path(path).resolve():
            return "no git checkout (an export of the tag)"
        out = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        ).stdout.strip()
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (subprocess.CalledProcessError, OSError):
        return "unknown"


def parse_junit(path):
    """{(test function, id): {"outcome": ..., "message": ..., "properties": {...}}}"""
    results = {}
    for case in ET.parse(path).iter("testcase"):
        match = TEST_RE.match(case.get("name", ""))
        if not match:
            results[(case.get("name"), "")] = _outcome(case)
            continue
        results[(match.group(1), match.group(2))] = _outcome(case)
    return results


def _outcome(case):
    properties = {p.get("name"): p.get("value") for p in case.iter("property")}
    for tag in ("failure", "error", "skipped"):
        element = case.find(tag)
        if element is not None:
            message = (element.get("message") or element.text or "").strip()
            outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
            if tag == "skipped" and "not proving anything" in message:
                outcome = "not proving"
            elif tag == "skipped" and element.get("type") == "pytest.xfail":
                outcome = "xfail"
            return {"outcome": outcome, "message": _first_line(message), "properties": properties}
    return {"outcome": "passed", "message": "", "properties": properties}


def _first_line(message):
    for line in message.splitlines():
        line = line.strip()
        if line and not line.startswith("assert "):
            return line[:300]
    return message[:300]


def tally(results, function, name):
    counts = defaultdict(int)
    for (test, test_id), result in results.items():
        if test == function and test_id.split("-")[0] == name:
            counts[result["outcome"]] += 1
    if not counts:
        return "–"
    total = sum(counts.values())
    text = f"{counts['passed']}/{total}"
    failed = counts["failed"] + counts["error"]
    if failed:
        text += f" (**{failed} FAIL**)"
    return text


def max_score_diff(results, name):
    """The largest difference between assisted and greedy scores over the class's scenarios (equal sequences)."""
    diffs = []
    for (test, test_id), result in results.items():
        if test == "test_assisted_vs_greedy" and test_id.split("-")[0] == name:
            value = result["properties"].get("max_score_diff")
            if value not in (None, "n/a"):
                diffs.append(float(value))
    return f"{max(diffs):.2g}" if diffs else "–"


def _mark(result):
    return "–" if result is None else MARKS[result["outcome"]]


def _all_passed(results, function, name):
    """Whether the class has tests of `function` and all of them passed (None: it has none)."""
    found = [r for (test, test_id), r in results.items() if test == function and test_id.split("-")[0] == name]
    if not found:
        return None
    return all(r["outcome"] == "passed" for r in found)


def render(stock, patched, stock_env, patched_env, stock_tree, patched_tree, stock_rc, patched_rc):
    from support.expectations import EXPECTATIONS

    names = sorted(
        {test_id.split("-")[0] for (test, test_id) in list(stock) + list(patched) if test == "test_assisted_vs_greedy"}
        | set(EXPECTATIONS)
    )
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Assisted generation, model by model",
        "",
        "Generated by `make report` (`scripts/report.py`), which runs `tests/models` on stock 4.31.0 and on the "
        "patched tree; do not edit by hand.",
        "",
        f"Run: {now}; device: stock {stock_env['device']}, patched {patched_env['device']}; torch: stock "
        f"{stock_env['torch']}, patched {patched_env['torch']}; suite commit {git_commit(REPO)}; stock "
        f"`{_relative(stock_tree)}` at {git_commit(stock_tree)} (transformers {stock_env['transformers']}); patched "
        f"`{_relative(patched_tree)}` at {git_commit(patched_tree)} (transformers {patched_env['transformers']}); "
        f"pytest exit status: stock {stock_rc}, patched {patched_rc}.",
        "",
    ]
    summary = defaultdict(lambda: defaultdict(int))
    problems = []
    groups = defaultdict(list)  # (scenarios run, stock failures, rows) -> supported classes whose every test passed
    refusals = defaultdict(list)  # (reason, why) -> refused classes whose every test passed
    noted = []  # classes with a result other than a pass on the patched tree, or without an entry
    diffs = []
    for name in names:
        entry = EXPECTATIONS.get(name)
        ran, failed, clean = [], [], entry is not None
        for scenario in SCENARIOS + ("batch",):
            key = (BATCHED_TEST, name) if scenario == "batch" else ("test_assisted_vs_greedy", f"{name}-{scenario}")
            s, p = stock.get(key), patched.get(key)
            if s is None and p is None:
                continue
            ran.append(scenario)
            for side, result in (("stock", s), ("patched", p)):
                if result is None:
                    continue
                summary[f"{side}_batched" if scenario == "batch" else side][result["outcome"]] += 1
                if side == "patched" and result["outcome"] != "passed":
                    clean = False
                    if result["outcome"] in ("failed", "error", "not proving", "xfail"):
                        problems.append((key[1] if scenario != "batch" else f"{BATCHED_TEST}[{name}]", result))
            if s is not None and s["outcome"] in ("failed", "error"):
                failed.append(scenario)
                if scenario != "batch":
                    summary["stock_bug"][scenario] += 1
        for function in (LOOKUP_TEST, "test_slicing", "test_plain_unchanged"):
            if _all_passed(patched, function, name) is False:
                clean = False
                for (test, test_id), result in patched.items():
                    if test == function and test_id.split("-")[0] == name and result["outcome"] in ("failed", "error"):
                        problems.append((f"{function}[{test_id}]", result))
        value = max_score_diff(patched, name)
        if value != "–":
            diffs.append((float(value), name))
        if not clean:
            noted.append(name)
        elif entry.supported:
            rows = "own" if name in patched_env.get("rows", ()) else "aligned"
            groups[(tuple(ran), tuple(failed), rows)].append(name)
        else:
            refusals[(entry.reason, entry.why)].append(name)

    lines += ["## Summary", ""]
    for side in ("stock", "patched"):
        counts = summary[side]
        lines.append(
            f"- {side}: "
            + ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "error", "not proving", "xfail", "skipped"))
        )
    for side in ("stock", "patched"):
        counts = summary[f"{side}_batched"]
        lines.append(
            f"- {side}, batch: " + ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "error", "skipped"))
        )
    bug = summary["stock_bug"]
    lines.append(
        "- stock failures by scenario (the bug reproduced): "
        + ", ".join(f"{scenario} {bug.get(scenario, 0)}" for scenario in SCENARIOS)
    )
    if diffs:
        largest, where = max(diffs)
        small = sum(value < 1e-5 for value, _ in diffs)
        lines.append(
            f"- largest difference between assisted and greedy scores (`output_scores`), patched: {largest:.2g} "
            f"({where}); under 1e-05 for {small} of the {len(diffs)} classes that report one"
        )
    lines += [
        "",
        "## Supported classes",
        "",
        "Each supported class runs assisted generation against greedy search in the scenarios that apply to it "
        "(`plain`; `self`, the model as its own assistant; `token_type_ids`; `left_pad`; `enc_mask`, an encoder "
        "mask; `batch`, three rows of different lengths, one ending early), plus prompt lookup against greedy "
        "search, the `prepare_inputs_for_generation` slicing tests and plain generation against stock 4.31.0's "
        "recorded outputs. Every test of the classes below passed on the patched tree; they are grouped by the "
        "scenarios that ran, those stock 4.31.0 failed (the bug), and whether the rows of a batch keep their own "
        "candidates (`own`, the class's `_supports_rows_with_holes`) or stay aligned.",
        "",
        "| scenarios | stock 4.31.0 failed | rows | classes |",
        "|---|---|---|---|",
    ]
    for (ran, failed, rows), members in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])):
        lines.append(f"| {', '.join(ran)} | {', '.join(failed) or 'none'} | {rows} | {', '.join(members)} |")
    lines += [
        "",
        "## Refused classes",
        "",
        "Assisted generation and prompt lookup must raise the documented `ValueError` before any forward pass; "
        "the classes below did on the patched tree, and their slicing and plain-generation tests passed.",
        "",
        "| reason in the error | why | classes |",
        "|---|---|---|",
    ]
    for (reason, why), members in refusals.items():
        lines.append(f"| {reason} | {why} | {', '.join(members)} |")
    stock_refused = [
        name
        for name in names
        if name in EXPECTATIONS
        and not EXPECTATIONS[name].supported
        and (stock.get(("test_assisted_vs_greedy", f"{name}-plain")) or {}).get("outcome") in ("failed", "error")
    ]
    lines += ["", f"Stock 4.31.0 did not refuse {len(stock_refused)} of them as documented (it ran or crashed)."]
    lines += ["", "## Classes with other results", ""]
    if noted:
        lines.append(
            "Each cell is **stock 4.31.0 / patched**: `pass`, `**FAIL**`, `n.p.` (equal, but greedy output ignores "
            "the scenario's input: proves nothing), `skip`, `xfail` (a known difference); the tallies are the "
            "patched tree's passes."
        )
        lines.append("")
        for name in noted:
            entry = EXPECTATIONS.get(name)
            expected = "**missing from the expectation table**" if entry is None else entry.status
            cells = []
            for scenario in SCENARIOS + ("batch",):
                key = (
                    (BATCHED_TEST, name) if scenario == "batch" else ("test_assisted_vs_greedy", f"{name}-{scenario}")
                )
                s, p = stock.get(key), patched.get(key)
                if s is not None or p is not None:
                    cells.append(f"{scenario} {_mark(s)} / {_mark(p)}")
            tallies = ", ".join(
                f"{label} {tally(patched, function, name)}"
                for label, function in (
                    ("lookup", LOOKUP_TEST),
                    ("slicing", "test_slicing"),
                    ("plain", "test_plain_unchanged"),
                )
            )
            lines.append(f"- {name} ({expected}): {'; '.join(cells)}; {tallies}")
    else:
        lines.append("None.")
    if problems:
        lines += ["", "What the patched tree reported:", ""]
        for test_id, result in problems:
            lines.append(f"- `{test_id}`: {result['outcome']}: {result['message']}")
    notes = [(n, EXPECTATIONS[n]) for n in names if n in EXPECTATIONS and EXPECTATIONS[n].supported]
    notes = [(n, e) for n, e in notes if e.why or e.requires]
    if notes:
        lines += ["", "## Notes on supported classes", ""]
        for name, entry in notes:
            text = "; ".join(x for x in (entry.why, f"requires `{entry.requires}`" if entry.requires else None) if x)
            lines.append(f"- {name}: {text}")
    return "\n".join(lines) + "\n"


def _relative(path):
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stock-python", default=REPO / ".venv-stock" / "bin" / "python")
    parser.add_argument("--stock-tree", default=REPO / "build" / "stock")
    parser.add_argument("--stock-pythonpath", default=None, help="PYTHONPATH for the stock side (optional)")
    parser.add_argument("--patched-python", default=REPO / ".venv" / "bin" / "python")
    parser.add_argument("--patched-tree", default=REPO / "build" / "transformers")
    parser.add_argument("--patched-pythonpath", default=None, help="PYTHONPATH for the patched side (optional)")
    parser.add_argument("--stock-xml", type=Path, help="render this JUnit file instead of running the stock side")
    parser.add_argument("--patched-xml", type=Path, help="render this JUnit file instead of running the patched side")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "model-status.md")
    args = parser.parse_args()

    work = REPO / "build" / "report"
    work.mkdir(parents=True, exist_ok=True)
    sides = {}
    for side in ("stock", "patched"):
        python, tree, pythonpath = (getattr(args, f"{side}_{k}") for k in ("python", "tree", "pythonpath"))
        given = getattr(args, f"{side}_xml")
        if given:
            xml_path, rc = given, "not run (given XML)"
        else:
            xml_path = work / f"{side}.xml"
            rc = run_pytest(python, tree, xml_path, args.jobs, pythonpath=pythonpath)
        sides[side] = (parse_junit(xml_path), environment(python, tree, pythonpath), tree, rc)

    (stock, stock_env, stock_tree, stock_rc), (patched, patched_env, patched_tree, patched_rc) = (
        sides["stock"],
        sides["patched"],
    )
    text = render(stock, patched, stock_env, patched_env, stock_tree, patched_tree, stock_rc, patched_rc)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {_relative(args.output)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
