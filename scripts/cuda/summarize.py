"""Summaries of a CUDA run (`scripts/cuda/run.sh`): the suite per model class, and the run as a whole.

    summarize.py suite JUNIT --markdown OUT.md      # per-class table of the model suite; prints one line of totals
    summarize.py run RUN_DIR --output summary.md    # summary.md from the pieces in RUN_DIR; prints its short form
    summarize.py compare-recordings A B             # are two stock recordings the same data (paths aside)?

The per-class table counts the outcomes of every test id whose parameters start with a class name
(`test_assisted_vs_greedy[GPT2LMHeadModel-left_pad]`, `test_plain_unchanged[...]`, `test_slicing[...]`,
`test_class_has_an_expectation[...]`...); tests without one are counted under "(whole suite)". The largest
`max_score_diff` that the assisted-vs-greedy tests record (float32 scores of assisted vs greedy generation) is shown
per class. Standard library only.
"""

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUTCOMES = ("passed", "failed", "skipped", "xfailed")
WHOLE_SUITE = "(whole suite)"


def expectations():
    sys.path.insert(0, str(REPO / "tests"))
    try:
        from support.expectations import EXPECTATIONS
    except Exception:  # the summary still works without the table
        return {}
    return EXPECTATIONS


def testcase_outcome(case):
    tags = {child.tag: child for child in case}
    if "failure" in tags or "error" in tags:
        return "failed"
    if "skipped" in tags:
        kind = tags["skipped"].get("type", "")
        return "xfailed" if "xfail" in kind else "skipped"
    return "passed"


def parse_junit(path):
    """[(test id, module, class name or None, outcome, properties, message)] of a pytest junit xml."""
    known = expectations()
    root = ET.parse(path).getroot()
    cases = []
    for case in root.iter("testcase"):
        name = case.get("name", "")
        module = case.get("classname", "").rsplit(".", 1)[-1]
        match = re.match(r"^[^\[]+\[([A-Za-z0-9_]+)", name)
        cls = match.group(1) if match else None
        if cls is not None and known and cls not in known:
            cls = None
        properties = {prop.get("name"): prop.get("value") for prop in case.iter("property")}
        outcome = testcase_outcome(case)
        message = ""
        for child in case:
            if child.tag in ("failure", "error"):
                message = (child.get("message") or "").splitlines()[0][:200] if child.get("message") else child.tag
        cases.append((f"{module}::{name}", module, cls, outcome, properties, message))
    return cases


def suite_table(cases):
    known = expectations()
    per_class = defaultdict(lambda: {"counts": dict.fromkeys(OUTCOMES, 0), "failures": [], "diff": None})
    for test_id, _, cls, outcome, properties, message in cases:
        entry = per_class[cls or WHOLE_SUITE]
        entry["counts"][outcome] += 1
        if outcome == "failed":
            entry["failures"].append(f"`{test_id.split('::', 1)[1]}`" + (f": {message}" if message else ""))
        diff = properties.get("max_score_diff")
        if diff not in (None, "n/a"):
            value = float(diff)
            entry["diff"] = value if entry["diff"] is None else max(entry["diff"], value)
    totals = dict.fromkeys(OUTCOMES, 0)
    for entry in per_class.values():
        for outcome in OUTCOMES:
            totals[outcome] += entry["counts"][outcome]
    lines = [
        "| class | expected | passed | failed | skipped | xfailed | max score diff (fp32) | failures |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    order = sorted(per_class, key=lambda c: (-per_class[c]["counts"]["failed"], c == WHOLE_SUITE, c))
    for cls in order:
        entry = per_class[cls]
        counts = entry["counts"]
        status = known[cls].status if cls in known else ""
        diff = "" if entry["diff"] is None else f"{entry['diff']:.3g}"
        failures = "; ".join(entry["failures"][:4]) + (" ..." if len(entry["failures"]) > 4 else "")
        lines.append(
            f"| {cls} | {status} | {counts['passed']} | {counts['failed']} | {counts['skipped']} | "
            f"{counts['xfailed']} | {diff} | {failures} |"
        )
    return totals, "\n".join(lines) + "\n", len(per_class) - (WHOLE_SUITE in per_class)


def totals_line(totals):
    return ", ".join(f"{totals[o]} {o}" for o in OUTCOMES if totals[o] or o in ("passed", "failed"))


def cmd_suite(args):
    if not args.junit.is_file():
        print(f"suite: no junit file ({args.junit})")
        return 1
    cases = parse_junit(args.junit)
    totals, table, classes = suite_table(cases)
    failed = [test_id for test_id, _, _, outcome, _, _ in cases if outcome == "failed"]
    text = f"Model suite: {totals_line(totals)} over {classes} classes.\n\n{table}"
    if failed:
        text += "\nFailed tests:\n\n" + "\n".join(f"- `{test_id}`" for test_id in failed) + "\n"
    if args.markdown:
        args.markdown.write_text(text)
    print(f"suite: {totals_line(totals)} ({len(cases)} tests, {classes} classes)")
    for test_id in failed[:15]:
        print(f"suite: FAILED {test_id}")
    if len(failed) > 15:
        print(f"suite: ... and {len(failed) - 15} more failures (summary.md)")
    return 0


def read(path):
    return path.read_text() if path.is_file() else None


def cmd_run(args):
    run = args.run_dir
    lines = ["# CUDA run of the model suite", ""]
    statuses = [line.split("\t") for line in (read(run / "phases.tsv") or "").splitlines() if line.strip()]
    preflight = read(run / "logs" / "preflight-fork.json")
    manifest = read(REPO / "build" / "cuda" / "manifest.json")
    short = []
    if preflight:
        info = json.loads(preflight)
        env = (
            f"python {info.get('python')}, torch {info.get('torch')} (CUDA {info.get('torch_cuda')}), device "
            f"{info.get('gpu') or 'cpu'}, transformers {info.get('transformers')} from "
            f"{info.get('transformers_file')}, "
            f"huggingface-hub {info.get('huggingface_hub')}, numpy {info.get('numpy')}, pytest {info.get('pytest')}"
        )
        lines += [f"Environment: {env}.", ""]
        short.append(f"environment: {env}")
    if manifest:
        info = json.loads(manifest)
        series = f"fork {info['fork_commit'][:12]}: v4.31.0 + {len(info['series'])} patches"
        lines += [f"Series: {series} ({info['series'][-1]} last).", ""]
        short.append(f"series: {series}")
    lines += ["| phase | status | seconds | note |", "| --- | --- | --- | --- |"]
    for fields in statuses:
        fields = (fields + ["", "", "", ""])[:4]
        lines.append("| " + " | ".join(fields) + " |")
        short.append(f"{fields[0]}: {fields[1]} ({fields[2]}s){' - ' + fields[3] if fields[3] else ''}")
    for title, name in (
        ("Model suite (float32)", "suite.md"),
        ("Assisted vs greedy in low precision", "precision.md"),
        ("Benchmark (patched fork)", "bench.md"),
    ):
        text = read(run / name)
        lines += ["", f"## {title}", "", text if text else "(not run or no result)"]
    args.output.write_text("\n".join(lines).rstrip() + "\n")
    print("== summary ==")
    for line in short:
        print(line)
    return 0


def cmd_compare(args):
    """One line: whether two recordings of `record_plain_outputs.py` hold the same data (the path of the tree they
    were recorded from aside), and where they differ."""
    first, second = (json.loads(path.read_text()) for path in (args.first, args.second))
    for data in (first, second):
        data["meta"].pop("transformers_path", None)
    if first == second:
        print(f"same data as {args.first.name}")
        return 0
    differ = []
    for section in ("meta", "plain", "slicing", "sources", "skipped"):
        a, b = first.get(section, {}), second.get(section, {})
        keys = sorted(key for key in set(a) | set(b) if a.get(key) != b.get(key))
        if keys:
            differ.append(f"{section}: {', '.join(keys[:5])}{' ...' if len(keys) > 5 else ''}")
    print(f"DIFFERS from {args.first.name} ({'; '.join(differ)})")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    suite = sub.add_parser("suite")
    suite.add_argument("junit", type=Path)
    suite.add_argument("--markdown", type=Path)
    run = sub.add_parser("run")
    run.add_argument("run_dir", type=Path)
    run.add_argument("--output", type=Path, required=True)
    compare = sub.add_parser("compare-recordings")
    compare.add_argument("first", type=Path)
    compare.add_argument("second", type=Path)
    args = parser.parse_args(argv)
    return {"suite": cmd_suite, "run": cmd_run, "compare-recordings": cmd_compare}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
