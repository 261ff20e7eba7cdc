"""The driver's command line (`scripts/bench.py`): prepare the sides (interpreters, peer environments) and the trained
pair, measure, save every measurement as JSON, write the report."""

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from . import peers as peer_envs
from . import real, train
from .estimate import estimate_lines
from .measure import Bench, load_average
from .report import command_line, publish, publish_batch
from .settings import DraftLength
from .sides import PATCHED, STOCK, case_sides, from_meta, parse_lengths, run_sides
from .workloads import BATCH_SIZES, CASES, HEADLINE, TRAINED_PAIRS, batch_prompts, trained_prompt

REPO = Path(__file__).resolve().parents[2]


def parse_args(argv=None, description=None):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--patched-python", default=os.environ.get("BENCH_PATCHED_PYTHON", sys.executable))
    parser.add_argument(
        "--stock-python",
        default=os.environ.get("BENCH_STOCK_PYTHON"),
        help="stock 4.31.0's interpreter (default: this one; with --batch-only, none: stock is then not asked)",
    )
    parser.add_argument(
        "--patched-pythonpath",
        default=os.environ.get("BENCH_PATCHED_PYTHONPATH"),
        help="PYTHONPATH for the patched worker, e.g. a tree's src/ (default: the interpreter's own install)",
    )
    parser.add_argument("--stock-pythonpath", default=os.environ.get("BENCH_STOCK_PYTHONPATH"))
    parser.add_argument(
        "--peers",
        default=",".join(peer_envs.PEERS),
        help="upstream releases to compare with, comma-separated ('' for none; default: %(default)s)",
    )
    parser.add_argument(
        "--patched-draft",
        type=DraftLength.parse,
        default="defaults",
        help="the patched side's draft length: 'defaults' (default: the fork's own, the adaptive schedule), "
        "'heuristic[:N]' (4.31's rule, from N, 5 unless given), 'constant:N', or 'SCHEDULE[:N]' (a generation_config "
        "schedule)",
    )
    parser.add_argument(
        "--constant-draft",
        type=parse_lengths,
        default="1-10",
        metavar="KS",
        help="also run the patched fork with these constant draft lengths (sides patched-kN), on the cases whose "
        "drafts pay, for the best constant length in hindsight (default: %(default)s; '' for none)",
    )
    parser.add_argument(
        "--constant-cases",
        metavar="CASES",
        help="comma-separated cases the constant draft lengths run (default: the cases whose drafts pay: "
        + ", ".join(name for name, case in CASES.items() if case.best_constant)
        + ")",
    )
    parser.add_argument("--cases", help="comma-separated subset of the cases (default: all)")
    parser.add_argument(
        "--batch-only",
        action="store_true",
        help="run the batch table alone (patched side; stock and ready upstream environments only asked whether "
        "they take a batch) and replace the Batches section of benchmarks.md",
    )
    parser.add_argument(
        "--batch-sizes",
        default=",".join(map(str, BATCH_SIZES)),
        help="batch sizes of the batch table (default: %(default)s)",
    )
    parser.add_argument("--quick", action="store_true", help="short runs, fewer repetitions (a couple of minutes)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker on CPU (default 1)")
    parser.add_argument(
        "--clock",
        default="auto",
        choices=["auto", "cpu", "wall"],
        help="time on CPU: the workers' CPU time (default on CPU: the machine is shared) or wall clock (CUDA default)",
    )
    parser.add_argument("--budget", type=float, help="seconds after which no optional repetition is started")
    parser.add_argument(
        "--docs-dir",
        type=Path,
        help="where benchmarks.md and its plots go (default: docs/, or build/bench/quick/ with --quick)",
    )
    parser.add_argument("--json", type=Path, help="also write every measurement here (default: build/bench/)")
    parser.add_argument(
        "--report-from", type=Path, metavar="JSON", help="measure nothing: rebuild the report of an earlier run"
    )
    parser.add_argument(
        "--estimate-from",
        type=Path,
        metavar="JSON",
        help="measure nothing: how long a full run would take, from a QUICK run's measurements (a QUICK run prints "
        "it too)",
    )
    return parser.parse_args(argv)


def tree_commits(transformers_dir):
    """The commits on top of the pristine v4.31.0 tag in the git tree transformers was imported from, if any."""
    try:
        top = subprocess.run(
            ["git", "-C", transformers_dir, "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
        ).stdout.strip()
        log = subprocess.run(
            ["git", "-C", top, "log", "--no-merges", "--format=%h %s", "upstream-v4.31.0..HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", top, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return []
    commits = log.splitlines() if log else []
    if dirty:
        commits.insert(0, "(uncommitted changes)")
    return commits


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform()}


def batch_sizes(args):
    try:
        sizes = [int(size) for size in args.batch_sizes.split(",") if size.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise SystemExit(f"bench: --batch-sizes takes positive integers, comma-separated, not {args.batch_sizes!r}")
    return sizes


def run_cases(args):
    """The run's cases (the headline alone with --batch-only); checks --cases and --constant-cases, which it turns
    into a list (None: the default, the cases whose drafts pay)."""
    cases = [HEADLINE] if args.batch_only else (args.cases.split(",") if args.cases else list(CASES))
    if isinstance(args.constant_cases, str):
        args.constant_cases = [case.strip() for case in args.constant_cases.split(",") if case.strip()]
    unknown = [case for case in cases + list(args.constant_cases or []) if case not in CASES]
    if unknown:
        raise SystemExit(f"bench: unknown case(s) {', '.join(unknown)} (known: {', '.join(CASES)})")
    wanted = [case for case in cases if CASES[case].kind == "real"]
    reason = real.missing() if wanted else None
    if reason:
        # Said loudly, once, and kept in the report: the other cases run as they do without the checkpoints.
        print(f"!!! bench: the cases on real checkpoints ({', '.join(wanted)}) are SKIPPED: {reason}", flush=True)
        args.real_skipped = reason
        cases = [case for case in cases if case not in wanted]
        if not cases:
            raise SystemExit("bench: nothing left to run")
    return cases


def prepare(args):
    """The run's sides, their interpreters (creating the peer environments) and the trained pair (training it once).

    With --batch-only, stock is asked only when its interpreter is given, and the upstream releases only when their
    environments are ready: nothing is created for a table that only the patched side runs.
    """
    peers = [peer.strip() for peer in args.peers.split(",") if peer.strip()]
    unknown = [peer for peer in peers if peer not in peer_envs.PEERS]
    if unknown:
        raise SystemExit(
            f"bench: no pinned environment for transformers {', '.join(unknown)} (known: {', '.join(peer_envs.PEERS)})"
        )
    if args.batch_only:
        peers = [version for version in peers if peer_envs.ready(version)]
    cases = run_cases(args)
    sides = run_sides(
        peers,
        patched_draft=args.patched_draft,
        constant=[] if args.batch_only else args.constant_draft,
        stock=not args.batch_only or bool(args.stock_python),
    )
    # A side that runs none of the cases (a constant draft length, when no case whose draft pays runs) is not started.
    running = {name for case in cases for name in case_sides(CASES[case], sides, args.constant_cases)}
    sides = [side for side in sides if side.name in running or args.batch_only]
    interpreters = {}
    for side in sides:
        if side.environment == STOCK:
            interpreters[side.name] = (args.stock_python or sys.executable, args.stock_pythonpath)
        elif side.environment == PATCHED:
            interpreters[side.name] = (args.patched_python, args.patched_pythonpath)
        elif args.batch_only:
            interpreters[side.name] = (peer_envs.python_of(side.environment), None)
        else:
            interpreters[side.name] = (peer_envs.ensure(side.environment, quiet=True), None)
    trained = None
    pairs = {CASES[case].pair for case in cases}
    if pairs & set(TRAINED_PAIRS):
        # Trained with the patched side's transformers (4.31.0: its save_pretrained files load in every version).
        env = dict(os.environ)
        if args.patched_pythonpath:
            env["PYTHONPATH"] = str(Path(args.patched_pythonpath).resolve())
        command = [str(args.patched_python), str(REPO / "scripts" / "bench_train.py")]
        sampling = "trained-sampling" in pairs
        result = subprocess.run(command + (["--sampling"] if sampling else []), env=env)
        if result.returncode != 0:
            raise SystemExit("bench: training the benchmark's models failed (see above)")
        trained = {
            "dir": str(train.model_dir()),
            "sampling_dir": str(train.sampling_dir()) if sampling else None,
            "prompt": trained_prompt(),
            "batch_prompts": batch_prompts(max(batch_sizes(args))),
        }
    return sides, interpreters, trained


def main(argv=None, description=None):
    args = parse_args(argv, description)
    if args.estimate_from:
        saved = json.loads(args.estimate_from.read_text())
        lines = estimate_lines(saved["results"], saved["meta"])
        print("\n".join(lines) if lines else "bench: not a QUICK run: nothing to estimate")
        return
    if args.report_from:
        saved = json.loads(args.report_from.read_text())
        sides = from_meta(saved["meta"])
        write = publish_batch if saved["meta"].get("batch_only") else publish
        write(args.docs_dir, saved["info"], sides, saved["results"], saved["meta"], args.report_from)
        return
    load_before = load_average()
    sides, interpreters, trained = prepare(args)
    bench = Bench(args, sides, interpreters, trained, batch_sizes(args))
    try:
        info = bench.info()
        for side in sides:
            found = info[side.name]
            print(f"{side.name}: transformers {found['transformers']} from {found['transformers_file']}")
        if STOCK in info and info[STOCK]["transformers_file"] == info[PATCHED]["transformers_file"]:
            print("bench: warning: stock and patched import transformers from the same place", flush=True)
        commits = tree_commits(info[PATCHED]["transformers_file"])
        if args.batch_only:
            bench.run_batch_only()
        else:
            bench.run()
    finally:
        bench.close()
    meta = {
        "quick": args.quick,
        "batch_only": args.batch_only,
        "batch": bench.batch_meta,
        "asr": bench.asr_meta,
        "real": bench.real_meta,
        "plan": dict(bench.plan, budget_s=bench.budget),
        "sides": [side.name for side in sides],
        "side_specs": {side.name: side.to_json() for side in sides},
        "cases": bench.cases,
        "case_sides": bench.case_sides,
        "marks": bench.marks,
        "attention": bench.attention,
        "adopted": bench.adopted,
        "wall": bench.elapsed(),
        "load_before": load_before,
        "load_after": load_average(),
        "machine": machine(),
        "patches": len([c for c in commits if not c.split(" ", 1)[-1].startswith("Merge ")]),
        "commits": commits,
        "command": command_line(),
        "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if trained:
        meta["trained_key"] = Path(trained["dir"]).name
        meta["trained_meta"] = json.loads((Path(trained["dir"]) / "training.json").read_text())
        if trained["sampling_dir"]:
            meta["sampling_key"] = Path(trained["sampling_dir"]).name
            meta["sampling_meta"] = json.loads((Path(trained["sampling_dir"]) / "training.json").read_text())
        meta["trained_prompt"] = bytes(trained["prompt"]).decode("utf-8", "replace")
        meta["forward_costs"] = bench.forward_costs
    name = "results-batch" if args.batch_only else "results"
    json_path = args.json or bench.log_dir / (f"{name}-quick.json" if args.quick else f"{name}.json")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({"info": info, "meta": meta, "results": bench.results}, indent=1))
    write = publish_batch if args.batch_only else publish
    write(args.docs_dir, info, sides, bench.results, meta, json_path)
