"""Benchmark assisted generation: stock v4.31.0, upstream 4.35.2 and 4.36.2, and the patched fork, side by side.

Each side runs in its own worker process (`scripts/bench_worker.py`) started with that side's interpreter, so no
two transformers versions share a process: stock and patched come from the project's virtual environments, the
upstream releases from environments this script creates under build/bench/peers/ (`scripts/bench_peers.py`, pinned,
created once and reused). The driver runs every side on the same models and inputs, one run after the other, the
order rotating every repetition, after a warm-up, and checks that every side produced the same tokens. Each side uses
its own draft-length heuristic from the same start (5 candidates), reset before every call.

Cases (a model pair and a number of new tokens; nothing downloaded):
  trained     a byte-level GPT-2 target and a draft distilled from it, trained here on Python standard library
              source (`scripts/bench_train.py`, cached under build/bench/trained/): the headline, 128 new tokens
  trained-16  the same pair, 16 new tokens: short generations, where the first round weighs most
  draft       random GPT-2 small (124M) with a random 2-layer draft of the same vocabulary: the draft rarely agrees
  draft-16    the same, 16 new tokens
  self        the GPT-2 small target as its own assistant: every candidate is accepted
  partial     the target assisted by a noisy copy of itself: part of the candidates are rejected (cache cropping)
  encdec      a random T5-small-like target with a 2+2-layer T5 draft
  loop        tiny random GPT-2 models whose forwards cost little: the loop's own cost per round dominates

Usage:
  python scripts/bench.py --patched-python .venv/bin/python --stock-python .venv-stock/bin/python [--quick]
  python scripts/bench.py ... --peers ""          # stock and patched only
  python scripts/bench.py --report-from build/bench/results.json   # rebuild the report of an earlier run
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_peers  # noqa: E402
import bench_train  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "bench_worker.py"
HEADLINE = "trained"
TRAINED_PROMPT_LENGTH = 64

TRAINED_PAIR = (
    "trained byte-level GPT-2 ({0[n_layer]}x{0[n_embd]}) + distilled draft ({1[n_layer]}x{1[n_embd]})".format(
        bench_train.SETTINGS["target"], bench_train.SETTINGS["draft"]
    )
)
# name: (model workload, new tokens in full mode, new tokens in quick mode, description)
CASES = {
    "trained": ("trained", 128, 128, TRAINED_PAIR),
    "trained-16": ("trained", 16, 16, "the same pair, 16 new tokens"),
    "draft": ("draft", 128, 32, "random GPT-2 small (124M) + 2-layer draft (14M)"),
    "draft-16": ("draft", 16, 16, "the same pair, 16 new tokens"),
    "self": ("self", 128, 32, "GPT-2 small as its own assistant"),
    "partial": ("partial", 128, 32, "GPT-2 small + noisy copy of itself"),
    "encdec": ("encdec", 128, 32, "random T5-small-like (60M) + 2+2-layer T5 draft"),
    "loop": ("loop", 1024, 256, "tiny GPT-2 (2x64) + 1-layer draft: the loop's own cost dominates"),
}
# The target whose greedy run is each workload's baseline (draft, self and partial share the GPT-2 target).
TARGET_OF = {"draft": "draft", "self": "draft", "partial": "draft"}
# Cheap cases get many repetitions; the GPT-2 small ones cost most of the run.
CHEAP = ["trained", "trained-16", "loop", "draft-16", "encdec"]
COSTLY = ["draft", "self", "partial"]

FULL = {
    "cheap_reps": (5, 11),  # (minimum, maximum) repetitions
    "costly_reps": (2, 4),
    "growth": [64, 128, 256, 512, 896],  # trained pair: time per token after this many new tokens
    "warmup_tokens": 8,
    "budget_s": 12 * 60,  # no optional repetition starts after this
}
QUICK = {
    "cheap_reps": (3, 5),
    "costly_reps": (1, 1),
    "growth": [32, 64, 128, 256],
    "warmup_tokens": 4,
    "budget_s": 100,
}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--patched-python", default=os.environ.get("BENCH_PATCHED_PYTHON", sys.executable))
    parser.add_argument("--stock-python", default=os.environ.get("BENCH_STOCK_PYTHON", sys.executable))
    parser.add_argument(
        "--patched-pythonpath",
        default=os.environ.get("BENCH_PATCHED_PYTHONPATH"),
        help="PYTHONPATH for the patched worker, e.g. a tree's src/ (default: the interpreter's own install)",
    )
    parser.add_argument("--stock-pythonpath", default=os.environ.get("BENCH_STOCK_PYTHONPATH"))
    parser.add_argument(
        "--peers",
        default=",".join(bench_peers.PEERS),
        help="upstream releases to compare with, comma-separated ('' for none; default: %(default)s)",
    )
    parser.add_argument("--cases", help="comma-separated subset of the cases (default: all)")
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
    return parser.parse_args()


class Worker:
    def __init__(self, side, python, pythonpath, args, log_dir):
        self.side = side
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = str(Path(pythonpath).resolve())
        else:
            env.pop("PYTHONPATH", None)
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        env["PYTHONWARNINGS"] = "ignore"
        if args.device == "cpu":
            # One thread per worker, everywhere (torch, OpenMP, BLAS): the machine is shared.
            for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
                env[name] = str(args.threads)
        command = [str(python), str(WORKER), "--device", args.device, "--dtype", args.dtype]
        command += ["--threads", str(args.threads), "--clock", args.clock]
        self.log = open(log_dir / f"worker-{side}.log", "w")
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env, cwd=REPO
        )

    def send(self, command):
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def receive(self):
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"bench: the {self.side} worker died; see {self.log.name}")
        answer = json.loads(line)
        if not answer.pop("ok"):
            raise SystemExit(f"bench: the {self.side} worker failed: {answer['error']}\n{answer['traceback']}")
        return answer

    def ask(self, command):
        self.send(command)
        return self.receive()

    def close(self):
        try:
            self.send({"op": "quit"})
            self.process.stdin.close()
            self.process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
        self.log.close()


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


def load_average():
    try:
        return " ".join(f"{value:.1f}" for value in os.getloadavg())
    except OSError:
        return "n/a"


def median(values):
    return statistics.median(values) if values else float("nan")


def spread(values):
    return (min(values), max(values)) if values else (float("nan"), float("nan"))


def greedy_key(case):
    workload, tokens = case_workload(case), case_tokens(case)
    return TARGET_OF.get(workload, workload), tokens


def case_workload(case):
    return CASES[case][0]


QUICK_MODE = False  # set by main() and by --report-from: which token counts the cases use


def case_tokens(case):
    return CASES[case][2 if QUICK_MODE else 1]


class Bench:
    def __init__(self, args, sides, trained):
        self.args = args
        self.plan = QUICK if args.quick else FULL
        self.budget = args.budget if args.budget is not None else self.plan["budget_s"]
        self.sides = sides  # name -> (python, pythonpath), in the order stock, peers..., patched
        self.trained = trained
        self.cases = args.cases.split(",") if args.cases else list(CASES)
        self.results = []  # every measurement, in the order made
        self.start = time.perf_counter()
        self.log_dir = REPO / "build" / "bench"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.workers = {
            side: Worker(side, python, pythonpath, args, self.log_dir) for side, (python, pythonpath) in sides.items()
        }
        self.marks = []
        self.forward_costs = None

    def elapsed(self):
        return time.perf_counter() - self.start

    def measure(self, side, workload, method, tokens, phase, case=None, rep=None, marks=()):
        answer = self.workers[side].ask(
            {"op": "run", "workload": workload, "method": method, "max_new_tokens": tokens, "marks": list(marks)}
        )
        answer.update(side=side, phase=phase, rep=rep, case=case, max_new_tokens=tokens)
        self.results.append(answer)
        if phase == "warmup":
            return answer
        where = f"[{self.elapsed():6.0f}s] {phase:<6} {case or workload:<10} {method:<8} {side:<7} {tokens:5d} tok  "
        if "failed" in answer:
            print(f"{where}{answer['failed'][:100]}", flush=True)
        else:
            accepted = f"  accepted {answer['accepted']}/{answer['proposed']}" if method == "assisted" else ""
            print(
                f"{where}{answer['per_token'] * 1e3:8.3f} ms/tok (wall {answer['wall_per_token'] * 1e3:8.3f})  "
                f"rounds {answer['rounds']:4d}{accepted}",
                flush=True,
            )
        return answer

    def info(self):
        return {side: worker.ask({"op": "info"}) for side, worker in self.workers.items()}

    def warm_up(self):
        workloads = sorted({case_workload(case) for case in self.cases} | {greedy_key(case)[0] for case in self.cases})
        # The workers build their models at the same time (this is not measured), then run each method once.
        for worker in self.workers.values():
            worker.send({"op": "load", "workloads": workloads, "trained": self.trained})
        loaded = {side: worker.receive() for side, worker in self.workers.items()}
        for workload in workloads:
            checksums = {side: answer["weights"][workload] for side, answer in loaded.items()}
            if len(set(checksums.values())) != 1:
                raise SystemExit(f"bench: the sides built different {workload} models: {checksums}")
        print(f"[{self.elapsed():6.0f}s] models built; warming up", flush=True)
        if "trained" in workloads:
            self.forward_costs = self.workers["patched"].ask({"op": "costs", "workload": "trained"})["forward_costs"]
        warm = self.plan["warmup_tokens"]
        for side in self.sides:
            for target in sorted({greedy_key(case)[0] for case in self.cases}):
                if side in ("stock", "patched"):
                    self.measure(side, target, "greedy", warm, "warmup")
            for workload in workloads:
                self.measure(side, workload, "assisted", warm, "warmup")

    def order(self, rep):
        sides = list(self.sides)
        shift = rep % len(sides)
        order = sides[shift:] + sides[:shift]
        return order if rep % 2 == 0 else order[::-1]

    def rep(self, rep, cases):
        order = self.order(rep)
        done = set()
        for case in cases:
            key = greedy_key(case)
            if key not in done:
                done.add(key)
                # Greedy search is the same loop in 4.31 stock and patched: their ratio is the noise floor.
                for side in order:
                    if side in ("stock", "patched"):
                        self.measure(side, key[0], "greedy", key[1], "ab", case=f"greedy:{key[0]}:{key[1]}", rep=rep)
            for side in order:
                self.measure(side, case_workload(case), "assisted", case_tokens(case), "ab", case=case, rep=rep)

    def rep_cost(self, cases):
        """Wall seconds the last repetition of these cases took (for the budget guard)."""
        cost = 0.0
        names = set(cases) | {f"greedy:{k[0]}:{k[1]}" for k in map(greedy_key, cases)}
        for name in names:
            runs = [r for r in self.results if r["phase"] == "ab" and r["case"] == name and "wall" in r]
            last = max((r["rep"] for r in runs), default=None)
            cost += sum(r["wall"] for r in runs if r["rep"] == last)
        return cost

    def growth(self):
        marks = self.plan["growth"]
        self.marks = marks
        tokens = max(marks)
        self.measure("patched", "trained", "greedy", tokens, "growth", case="greedy", marks=marks)
        for side in self.sides:
            self.measure(side, "trained", "assisted", tokens, "growth", case=side, marks=marks)

    def run(self):
        plan = self.plan
        cheap = [case for case in CHEAP if case in self.cases]
        costly = [case for case in COSTLY if case in self.cases]
        self.warm_up()
        reps = {"cheap": 0, "costly": 0}
        groups = {"cheap": cheap, "costly": costly}
        minimum = {"cheap": plan["cheap_reps"][0], "costly": plan["costly_reps"][0]}
        maximum = {"cheap": plan["cheap_reps"][1], "costly": plan["costly_reps"][1]}
        for group, cases in groups.items():
            for _ in range(minimum[group] if cases else 0):
                self.rep(reps[group], cases)
                reps[group] += 1
        if "trained" in self.cases:
            self.growth()
        # Optional repetitions while the budget allows, the cheap cases first.
        while True:
            progressed = False
            for group, cases in groups.items():
                if cases and reps[group] < maximum[group]:
                    if self.elapsed() + self.rep_cost(cases) < self.budget:
                        self.rep(reps[group], cases)
                        reps[group] += 1
                        progressed = True
            if not progressed:
                break

    def close(self):
        for worker in self.workers.values():
            worker.close()


def by_rep(results, case):
    """{rep: {side: measurement}} of the A/B runs of a case."""
    table = {}
    for result in results:
        if result["phase"] == "ab" and result["case"] == case:
            table.setdefault(result["rep"], {})[result["side"]] = result
    return table


def summarize(results, sides, cases):
    peers = [side for side in sides if side not in ("stock", "patched")]
    table = {}
    for case in cases:
        runs = by_rep(results, case)
        key = greedy_key(case)
        greedy = by_rep(results, f"greedy:{key[0]}:{key[1]}")
        if not runs or not greedy:
            continue
        row = {"reps": len(runs), "tokens": case_tokens(case), "failed": {}, "side": {}}
        for side in sides:
            measured = [rep[side] for rep in runs.values() if side in rep]
            failures = [m["failed"] for m in measured if "failed" in m]
            if failures:
                row["failed"][side] = failures[0]
                continue
            if not measured:
                continue
            sample = measured[0]
            row["side"][side] = {
                "per_token": median([m["per_token"] for m in measured]),
                "acceptance": sample["accepted"] / sample["proposed"] if sample["proposed"] else float("nan"),
                "accepted": sample["accepted"],
                "proposed": sample["proposed"],
                "rounds": sample["rounds"],
                "tokens_per_round": sample["new_tokens"] / sample["rounds"],
                "overhead": median([m["overhead_per_round"] for m in measured]),
                "round_time": median([m["round_time"] for m in measured]),
                "first_round": median([m["first_round"] for m in measured]),
                "output": {m["output_sha"] for m in measured},
            }
        greedy_runs = {side: [rep[side] for rep in greedy.values() if side in rep] for side in ("stock", "patched")}
        row["greedy"] = median([m["per_token"] for m in greedy_runs["patched"]])
        row["greedy_overhead"] = median([m["overhead_per_round"] for m in greedy_runs["patched"]])
        row["greedy_round"] = median([m["round_time"] for m in greedy_runs["patched"]])
        row["greedy_first"] = median([m["first_round"] for m in greedy_runs["patched"]])
        noise = [g["patched"]["per_token"] / g["stock"]["per_token"] for g in greedy.values() if len(g) == 2]
        row["noise"] = (median(noise), *spread(noise))
        greedy_output = {m["output_sha"] for runs_ in greedy_runs.values() for m in runs_}

        def paired(side, other, runs=runs):
            values = [
                rep[side]["per_token"] / rep[other]["per_token"]
                for rep in runs.values()
                if side in rep and other in rep and "failed" not in rep[side] and "failed" not in rep[other]
            ]
            return (median(values), *spread(values)) if values else None

        done = row["side"]
        row["ratio"] = paired("patched", "stock") if "patched" in done and "stock" in done else None
        ran = [peer for peer in peers if peer in done]
        row["best_peer"] = min(ran, key=lambda peer: done[peer]["per_token"]) if ran else None
        row["peer_ratio"] = paired("patched", row["best_peer"]) if row["best_peer"] and "patched" in done else None
        # Speedup over greedy: the patched greedy run of the same repetition over each side's assisted run.
        row["speedup"] = {}
        for side in done:
            values = [
                greedy[rep]["patched"]["per_token"] / runs[rep][side]["per_token"]
                for rep in runs
                if rep in greedy and "patched" in greedy[rep] and side in runs[rep] and "failed" not in runs[rep][side]
            ]
            row["speedup"][side] = (median(values), *spread(values))
        outputs = set().union(*(values["output"] for values in done.values())) if done else set()
        row["same_tokens"] = len(outputs) == 1
        row["same_as_greedy"] = outputs == greedy_output
        table[case] = row
    growth = {}
    for result in results:
        if result["phase"] == "growth" and "failed" not in result:
            label = "greedy" if result["method"] == "greedy" else result["side"]
            growth[label] = {int(mark): value for mark, value in result["prefix_per_token"].items()}
    return table, growth


def ms(seconds, digits=2):
    return f"{seconds * 1e3:.{digits}f}"


def ratio_text(values, digits=3):
    if values is None:
        return "-"
    value, low, high = values
    return f"{value:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def side_label(side, info):
    if side == "stock":
        return "stock 4.31.0"
    if side == "patched":
        return "patched"
    return f"upstream {info[side]['transformers']}"


def short(side):
    return {"stock": "stock", "patched": "patched"}.get(side, side.rsplit(".", 1)[0])


def figure_footer(meta, info):
    m = meta["machine"]
    peers = [info[side]["transformers"] for side in meta["sides"] if side not in ("stock", "patched")]
    versions = f"stock {info['stock']['transformers']}"
    versions += f", upstream {' and '.join(peers)}" if peers else ""
    how = (
        f"{info['patched']['device_name']} {info['patched']['dtype']}, 1 torch thread per worker, "
        f"{info['patched']['clock']} time, medians over paired repetitions"
    )
    quick = " QUICK run." if meta["quick"] else ""
    return (
        f"{m['cpu']}, {m['cores']} cores; torch {info['patched']['torch']}; transformers: {versions}, "
        f"patched {info['patched']['transformers']} + {meta['patches']} patches.\n{how}; {meta['finished']}.{quick}"
    )


STYLE = {"greedy": ("#888888", "o"), "stock": ("#d62728", "s"), "patched": ("#1f77b4", "^")}
PEER_COLORS = ["#2ca02c", "#9467bd", "#ff7f0e"]


def style(side, sides):
    if side in STYLE:
        return STYLE[side]
    peers = [s for s in sides if s not in STYLE]
    return PEER_COLORS[peers.index(side) % len(PEER_COLORS)], "D"


def plots(table, growth, meta, info, docs_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sides = meta["sides"]
    footer = figure_footer(meta, info)
    clock = "CPU" if info["patched"]["clock"] == "cpu" else "wall-clock"
    files = []

    # 1. Time per token by method, every case.
    cases = list(table)
    methods = ["greedy"] + sides
    figure, axis = plt.subplots(figsize=(10, 4.8), dpi=110)
    width = 0.8 / len(methods)
    for i, method in enumerate(methods):
        xs, ys = [], []
        for j, case in enumerate(cases):
            row = table[case]
            value = row["greedy"] if method == "greedy" else row["side"].get(method, {}).get("per_token")
            if value is not None:
                xs.append(j + (i - (len(methods) - 1) / 2) * width)
                ys.append(value * 1e3)
        label = "greedy" if method == "greedy" else side_label(method, info)
        axis.bar(xs, ys, width, label=label, color=style(method, sides)[0])
    axis.set_yscale("log")
    low, high = axis.get_ylim()
    axis.set_ylim(low, high * 5)  # room for the legend above the bars
    axis.set_xticks(range(len(cases)))
    axis.set_xticklabels([f"{case}\n({table[case]['tokens']} tok)" for case in cases], fontsize=8)
    axis.set_ylabel(f"{clock} time per generated token (ms, log)")
    axis.set_title("Time per generated token by method", fontsize=11)
    axis.grid(True, axis="y", alpha=0.3, which="both")
    axis.legend(fontsize=8, ncol=len(methods))
    figure.text(0.01, 0.01, footer, fontsize=6.5, va="bottom")
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    files.append("benchmarks-time.png")
    figure.savefig(docs_dir / files[-1])
    plt.close(figure)

    # 2. Speedup over greedy against acceptance.
    figure, axis = plt.subplots(figsize=(8, 5), dpi=110)
    for side in sides:
        xs, ys, names = [], [], []
        for case, row in table.items():
            if side in row["side"]:
                xs.append(row["side"][side]["acceptance"] * 100)
                ys.append(row["speedup"][side][0])
                names.append(case)
        color, marker = style(side, sides)
        axis.scatter(xs, ys, color=color, marker=marker, label=side_label(side, info), alpha=0.85)
        if side == "patched":
            for x, y, name in zip(xs, ys, names, strict=True):
                axis.annotate(name, (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
    axis.axhline(1.0, color="#888888", linewidth=0.8, linestyle=":")
    axis.set_xlabel("acceptance (% of the draft's candidates kept)")
    axis.set_ylabel("speedup over greedy (greedy time per token / assisted)")
    axis.set_title("Speedup over greedy against acceptance", fontsize=11)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    figure.text(0.01, 0.01, footer, fontsize=6.5, va="bottom")
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    files.append("benchmarks-speedup.png")
    figure.savefig(docs_dir / files[-1])
    plt.close(figure)

    # 3. Time per token against the number of generated tokens, trained pair.
    if growth:
        marks = meta["marks"]
        figure, axis = plt.subplots(figsize=(8, 4.8), dpi=110)
        for label in ["greedy"] + sides:
            if label not in growth:
                continue
            xs = [mark for mark in marks if mark in growth[label]]
            color, marker = style(label, sides)
            name = "greedy" if label == "greedy" else side_label(label, info)
            axis.plot(xs, [growth[label][mark] * 1e3 for mark in xs], marker=marker, color=color, label=name)
        axis.set_xscale("log", base=2)
        axis.set_xticks(marks)
        axis.set_xticklabels([str(mark) for mark in marks])
        axis.set_xlabel("generated tokens")
        axis.set_ylabel(f"{clock} time per generated token (ms)")
        axis.set_ylim(bottom=0)
        axis.set_title("Trained pair: time per token against the number of generated tokens", fontsize=11)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
        figure.text(0.01, 0.01, footer, fontsize=6.5, va="bottom")
        figure.tight_layout(rect=(0, 0.08, 1, 1))
        files.append("benchmarks-growth.png")
        figure.savefig(docs_dir / files[-1])
        plt.close(figure)
    return files


def command_line():
    # Paths outside the repository mean nothing to a reader: show them by their role.
    shown = []
    for argument in sys.argv[1:]:
        if os.path.isabs(argument) and relative(argument) == argument:
            argument = "<path>"
        shown.append(relative(argument) if os.path.isabs(argument) else argument)
    return "python scripts/bench.py " + " ".join(shown)


def relative(path):
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def cell(row, side, text):
    if side in row["failed"]:
        return "**" + row["failed"][side].split(":", 1)[0] + "**"
    if side not in row["side"]:
        return "-"
    return text(row["side"][side])


def report(meta, info, table, growth, files, results):
    sides = meta["sides"]
    peers = [side for side in sides if side not in ("stock", "patched")]
    head = table.get(HEADLINE)
    lines = []
    add = lines.append
    quick = meta["quick"]
    add("# Benchmark: assisted generation, stock 4.31.0, upstream 4.35/4.36 and the patched fork")
    add("")
    add(
        f"Generated by `{meta['command']}` in {meta['wall'] / 60:.1f} minutes, {meta['finished']}"
        f"{' (**QUICK run**: fewer repetitions, shorter generations for the random-weight cases)' if quick else ''}. "
        f"`make bench{' QUICK=1' if quick else ''}` runs the same driver."
    )
    add("")
    if head and head["ratio"]:
        add(
            f"**Headline (trained pair, {head['tokens']} new tokens): patched/stock time per generated token "
            f"{ratio_text(head['ratio'])}; speedup of the patched assisted decoding over greedy "
            f"{ratio_text(head['speedup']['patched'], 2)}**"
            + (
                f"; patched/{head['best_peer']} (the fastest upstream release on this case) "
                f"{ratio_text(head['peer_ratio'])}"
                if head["peer_ratio"]
                else ""
            )
            + f". Medians over {head['reps']} paired repetitions (min-max in brackets). The noise floor of this run, "
            f"greedy patched/stock (the same greedy loop on both sides), is {ratio_text(head['noise'])}."
        )
        add("")
    add("## Machine and versions")
    add("")
    m = meta["machine"]
    add(
        f"- CPU: {m['cpu']}, {m['cores']} cores ({m['platform']}); shared with other jobs: load average "
        f"{meta['load_before']} before the run, {meta['load_after']} after."
    )
    patched = info["patched"]
    device = patched["device_name"] if patched["device"] == "cuda" else f"cpu, {patched['threads']} torch thread"
    add(f"- Device: {device} per worker; dtype {patched['dtype']}; clock: {patched['clock']} time.")
    add(f"- torch {patched['torch']} on every side, python {patched['python']}.")
    for side in sides:
        where = relative(info[side]["transformers_file"])
        where = f"`{where}`" if not os.path.isabs(where) else "an environment outside this repository"
        add(f"- {side_label(side, info)}: transformers {info[side]['transformers']} from {where}.")
    if peers:
        add(
            "  The upstream releases run in environments the benchmark creates once under `build/bench/peers/` "
            "(`scripts/bench_peers.py`): the project's torch and pins, plus "
            + "; ".join(f"{', '.join(bench_peers.PEERS[peer])}" for peer in peers if peer in bench_peers.PEERS)
            + "."
        )
    add(f"- Patched tree: {meta['patches']} commits on top of v4.31.0.")
    trained = meta.get("trained_meta")
    if trained:
        s = trained["settings"]
        add(
            f"- Trained pair (`scripts/bench_train.py`, cache key `{meta['trained_key']}`): target "
            f"{s['target']['n_layer']} layers x {s['target']['n_embd']} ({trained['parameters']['target'] / 1e6:.2f}M "
            f"parameters), draft {s['draft']['n_layer']} layer x {s['draft']['n_embd']} "
            f"({trained['parameters']['draft'] / 1e6:.2f}M), byte-level (256 tokens), trained on "
            f"{trained['corpus_bytes'] / 1e3:.0f} kB of {len(trained['corpus'])} pinned Python "
            f"3.11.7 standard library modules: target {s['target_steps']} steps of {s['target_batch']}x"
            f"{s['target_context']} bytes (final loss {trained['target_loss']:.2f} nats/byte), draft "
            f"{s['draft_steps']} steps on {s['distill_prompts']} greedy continuations of the target (final loss "
            f"{trained['draft_loss']:.2f}); {trained['training_seconds']:.0f} s of training on "
            f"{s['threads']} threads when it was trained (cached since)."
        )
        continuation = next(
            (r["continuation"] for r in results if r.get("case") == HEADLINE and r.get("continuation")), None
        )
        if continuation:
            generated = json.dumps(bytes(continuation).decode("utf-8", "replace"))[1:-1].replace("`", "'")
            add(
                f"  The prompt and the {len(continuation)} bytes every side generates from it "
                f"({len(set(continuation))} distinct bytes): "
                f"`{json.dumps(meta['trained_prompt'])[1:-1].replace('`', chr(39))}` -> `{generated}`. "
                "A target trained for minutes on two cores is a weak language model: greedy decoding makes it repeat "
                "itself, and the draft distilled from its greedy outputs predicts that well. The trained case shows "
                "a draft that agrees with its target as a distilled draft does at its best, not a typical acceptance."
            )
        costs = meta.get("forward_costs")
        if costs:
            add(
                f"  One cached single-token forward (patched side): target {ms(costs['target'], 3)} ms, draft "
                f"{ms(costs['assistant'], 3)} ms: the target costs {costs['target'] / costs['assistant']:.1f} times "
                "the draft."
            )
    add("")
    add("## Cases")
    add("")
    add(
        "Every prompt has an all-ones attention mask and batch size 1, where stock 4.31.0 assisted decoding is "
        "correct: all sides do the same work and must produce the same tokens (checked). Greedy, no EOS: every run "
        "generates exactly the requested number of tokens."
    )
    add("")
    for case in table:
        workload, _, _, description = CASES[case]
        add(f"- `{case}` ({table[case]['tokens']} new tokens): {description}.")
    add("")
    add(
        f"The trained prompt is {TRAINED_PROMPT_LENGTH} bytes of the held-out tail of the corpus; the random-weight "
        "cases use a 16-token random prompt. With random weights the draft rarely agrees with the target except "
        "when it is the target itself (`self`) or a noisy copy (`partial`); the trained draft agrees as distilled "
        "drafts do."
    )
    add("")
    add("## Method")
    add("")
    add(
        "- Every side runs in its own worker process with its own interpreter and environment, one torch thread "
        "(and one OpenMP/BLAS thread), one worker at a time. After a warm-up run of every method on every side, "
        "each repetition runs greedy (stock and patched) and assisted decoding (every side) on every case, the "
        "order of the sides rotating and flipping from one repetition to the next. Ratios are computed per "
        "repetition, from runs made next to each other, then the median and min-max over the repetitions are "
        "reported."
    )
    add(
        "- Draft length: each side runs its own heuristic (part of what is compared), from 5 candidates, reset "
        "before every call: 4.31 (stock and patched) keeps `assistant_model.max_assistant_tokens` across calls, "
        "which the worker deletes before each call; 4.35 and 4.36 start every call from "
        "`assistant_model.generation_config.num_assistant_tokens`, set to 5 (schedule `heuristic`)."
    )
    if patched["clock"] == "cpu":
        add(
            "- Clock: the CPU time of each worker's computing thread (`time.thread_time`): on a shared machine wall "
            "clock measures how much of a core the scheduler gave each run. `--clock wall` measures wall clock."
        )
    add(
        "- Rounds: one greedy step, or one draft-and-verify cycle, timestamped by a stopping criterion that never "
        "stops anything. Model forwards are timed with forward hooks. *Loop cost*: time outside the model forwards "
        "per round, between the end of the first round and the end of the last, in µs and as a share of the "
        "round. *First round*: time from the call to the end of the first round (the first token)."
    )
    add(
        "- Acceptance: candidates kept / candidates proposed (one assistant forward per candidate). The patched "
        "side drafts nothing in the first round and stops drafting at the length limit, where the others propose "
        "candidates that cannot be kept: for the same tokens it proposes fewer candidates, so its acceptance reads "
        "higher; rounds and tokens per round compare the work. Speedup over greedy: the patched side's greedy time "
        "per token over the side's assisted time per token, per repetition."
    )
    add(
        "- The series runs the first round on the prompt alone, without drafting (so that models that number or "
        "mask the prompt's positions see what greedy search shows them); upstream drafts from the first round. The "
        "16-token cases show what that costs on short generations."
    )
    add("")
    add("## Results")
    add("")
    add(f"Time per generated token (ms, {patched['clock']} time), medians over the repetitions:")
    add("")
    header = "| case | tokens | greedy | " + " | ".join(side_label(side, info) for side in sides)
    header += " | **patched/stock** | patched/best peer | noise floor (greedy patched/stock) | reps |"
    add(header)
    add("|---|" + "---|" * (len(sides) + 6))
    for case, row in table.items():
        cells = " | ".join(cell(row, side, lambda v: ms(v["per_token"])) for side in sides)
        best = f"{ratio_text(row['peer_ratio'])} vs {row['best_peer']}" if row["peer_ratio"] else "-"
        add(
            f"| {case} | {row['tokens']} | {ms(row['greedy'])} | {cells} | **{ratio_text(row['ratio'])}** "
            f"| {best} | {ratio_text(row['noise'])} | {row['reps']} |"
        )
    failures = {(case, side): text for case, row in table.items() for side, text in row["failed"].items()}
    if failures:
        add("")
        add("Sides that could not run a case:")
        add("")
        for (case, side), text in failures.items():
            add(f"- `{case}`, {side_label(side, info)}: {text}")
    else:
        add("")
        add("Every side ran every case.")
    add("")
    add("Speedup over greedy (median, min-max):")
    add("")
    add("| case | " + " | ".join(side_label(side, info) for side in sides) + " |")
    add("|---|" + "---|" * len(sides))
    for case, row in table.items():
        add(
            f"| {case} | "
            + " | ".join(
                cell(row, side, lambda v, side=side, row=row: ratio_text(row["speedup"][side], 2) + "x")
                for side in sides
            )
            + " |"
        )
    add("")
    names = " / ".join(short(side) for side in sides)
    add(f"Work and loop cost, per side ({names}):")
    add("")
    add(
        "| case | acceptance | tokens/round | rounds | loop cost µs/round (greedy; sides) | loop share of the round "
        "| first round ms (greedy; sides) | same tokens |"
    )
    add("|---|---|---|---|---|---|---|---|")
    for case, row in table.items():

        def join(text, row=row):
            return " / ".join(cell(row, side, text) for side in sides)

        same = "yes" if row["same_tokens"] and row["same_as_greedy"] else "**no**"
        add(
            f"| {case} | {join(lambda v: format(v['acceptance'], '.0%'))} "
            f"| {join(lambda v: format(v['tokens_per_round'], '.2f'))} "
            f"| {join(lambda v: str(v['rounds']))} "
            f"| {row['greedy_overhead'] * 1e6:.0f}; {join(lambda v: format(v['overhead'] * 1e6, '.0f'))} "
            f"| {join(lambda v: format(v['overhead'] / v['round_time'], '.0%'))} "
            f"| {ms(row['greedy_first'])}; {join(lambda v: ms(v['first_round']))} | {same} |"
        )
    add("")
    if growth:
        marks = meta["marks"]
        add("## Time per token against the number of generated tokens (trained pair)")
        add("")
        add(
            f"One run of {max(marks)} tokens per method; the time per token after M tokens is the time to the M-th "
            "token divided by M, what a run of M tokens takes. A cost growing with the length (a cache copied "
            "every round) would show here."
        )
        add("")
        add("| method | " + " | ".join(f"{mark} tok" for mark in marks) + " |")
        add("|---|" + "---|" * len(marks))
        for label in ["greedy"] + sides:
            if label in growth:
                name = "greedy" if label == "greedy" else side_label(label, info)
                values = growth[label]
                add(f"| {name} | " + " | ".join(ms(values[mark]) if mark in values else "-" for mark in marks) + " |")
        add("")
    add("## Plots")
    add("")
    for name in files:
        add(f"![{name}]({name})")
        add("")
    add("## GPU")
    add("")
    add(
        "The benchmark runs on CUDA with `--device cuda --dtype float32` or `--dtype bfloat16` (timings then "
        "synchronize the device at every round and forward boundary). The figures above are from the CPU."
    )
    add("")
    return "\n".join(lines)


def prepare(args):
    """The sides' interpreters (creating the peer environments) and the trained pair (training it once)."""
    sides = {"stock": (args.stock_python, args.stock_pythonpath)}
    for version in [peer for peer in args.peers.split(",") if peer.strip()]:
        sides[version.strip()] = (bench_peers.ensure(version.strip(), quiet=True), None)
    sides["patched"] = (args.patched_python, args.patched_pythonpath)
    trained = None
    cases = args.cases.split(",") if args.cases else list(CASES)
    unknown = [case for case in cases if case not in CASES]
    if unknown:
        raise SystemExit(f"bench: unknown case(s) {', '.join(unknown)} (known: {', '.join(CASES)})")
    if any(case_workload(case) == "trained" for case in cases):
        # Trained with the patched side's transformers (4.31.0: its save_pretrained files load in every version).
        env = dict(os.environ)
        if args.patched_pythonpath:
            env["PYTHONPATH"] = str(Path(args.patched_pythonpath).resolve())
        result = subprocess.run(
            [str(args.patched_python), str(Path(__file__).resolve().parent / "bench_train.py")], env=env
        )
        if result.returncode != 0:
            raise SystemExit("bench: training the benchmark's models failed (see above)")
        directory = bench_train.model_dir()
        trained = {"dir": str(directory), "prompt": bench_train.prompts(1, TRAINED_PROMPT_LENGTH)[0]}
    return sides, trained


def main():
    global QUICK_MODE
    args = parse_args()
    if args.report_from:
        saved = json.loads(args.report_from.read_text())
        QUICK_MODE = saved["meta"]["quick"]
        publish(args, saved["info"], saved["results"], saved["meta"], args.report_from)
        return
    QUICK_MODE = args.quick
    load_before = load_average()
    sides, trained = prepare(args)
    bench = Bench(args, sides, trained)
    try:
        info = bench.info()
        for side in sides:
            print(f"{side}: transformers {info[side]['transformers']} from {info[side]['transformers_file']}")
        if info["stock"]["transformers_file"] == info["patched"]["transformers_file"]:
            print("bench: warning: stock and patched import transformers from the same place", flush=True)
        commits = tree_commits(info["patched"]["transformers_file"])
        bench.run()
    finally:
        bench.close()
    meta = {
        "quick": args.quick,
        "sides": list(sides),
        "cases": bench.cases,
        "marks": bench.marks,
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
        meta["trained_prompt"] = bytes(trained["prompt"]).decode("utf-8", "replace")
        meta["forward_costs"] = bench.forward_costs
    json_path = args.json or bench.log_dir / ("results-quick.json" if args.quick else "results.json")
    json_path.write_text(json.dumps({"info": info, "meta": meta, "results": bench.results}, indent=1))
    publish(args, info, bench.results, meta, json_path)


def publish(args, info, results, meta, json_path):
    """Writes benchmarks.md and its plots, prints the summary, ending with the two headline lines."""
    table, growth = summarize(results, meta["sides"], meta["cases"])
    docs_dir = args.docs_dir or (REPO / "build" / "bench" / "quick" if meta["quick"] else REPO / "docs")
    docs_dir.mkdir(parents=True, exist_ok=True)
    files = plots(table, growth, meta, info, docs_dir)
    (docs_dir / "benchmarks.md").write_text(report(meta, info, table, growth, files, results))

    sides = meta["sides"]
    print()
    print(f"{'case':<11} {'greedy':>8} " + " ".join(f"{short(side):>9}" for side in sides) + "   patched/stock")
    for case, row in table.items():
        cells = " ".join(f"{cell(row, side, lambda v: ms(v['per_token'])):>9}" for side in sides)
        print(f"{case:<11} {ms(row['greedy']):>8} {cells}   {ratio_text(row['ratio'])}")
    print(f"wrote {relative(docs_dir / 'benchmarks.md')}, {relative(json_path)}; {meta['wall']:.0f} s in all")
    head = table.get(HEADLINE)
    if not head or not head["ratio"]:
        raise SystemExit("bench: no headline: the trained case did not run on both stock and patched")
    print(f"greedy patched/stock time per token, trained pair: {ratio_text(head['noise'])} (noise floor of this run)")
    value, low, high = head["ratio"]
    print(
        f"assisted patched/stock time per token: {value:.3f} "
        f"(median of {head['reps']} runs, spread {low:.3f}-{high:.3f}; trained pair, {head['tokens']} tokens)"
    )
    value, low, high = head["speedup"]["patched"]
    print(
        f"assisted speedup over greedy, trained draft: {value:.2f} "
        f"(median of {head['reps']} runs, spread {low:.2f}-{high:.2f}; patched, {head['tokens']} tokens)"
    )


if __name__ == "__main__":
    main()
