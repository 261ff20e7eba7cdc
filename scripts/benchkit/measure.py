"""Measurement: the worker processes, the plan (repetitions, budget), warm-up, the rotation of the sides, the
repetitions, the counted calls, the growth run and the batch table. Every measurement goes to `Bench.results` in the
order made; `benchkit.summary` turns them into tables.

One worker at a time computes (they build their models together, unmeasured): each repetition runs greedy search
(stock and patched) and assisted decoding (every side) on every case, the order of the sides rotating and flipping
from one repetition to the next, the reference runs next to the patched side's assisted run (`Bench.sequence`), so
that ratios are computed from runs made next to each other.
"""

import json
import os
import subprocess
import time
from pathlib import Path

from . import real
from .sides import GREEDY_SIDES, PATCHED, case_sides, reference_sides
from .workloads import (
    ASR_ANY_PAIR,
    ASR_BATCH_SIZES,
    ASR_RECORDINGS,
    ASR_WORKLOADS,
    BATCH_EOS_METHODS,
    BATCH_EOS_SIZES,
    BATCH_EOS_TOKEN,
    BATCH_METHODS,
    CACHE_BOUND_DRAFT_LENGTHS,
    CACHE_BOUND_SIZES,
    CACHE_BOUND_TOKENS,
    CASES,
    GROUPS,
    HEADLINE,
    greedy_name,
    sampling_seed,
)

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "scripts" / "bench_worker.py"
LOG_DIR = REPO / "build" / "bench"
WEIGHTS_DIR = LOG_DIR / "weights"
REFERENCE = PATCHED  # whose weights a side that builds a model otherwise loads

FULL = {
    # (minimum, maximum) repetitions. The headline cases are cheap (3.5 s a repetition on the benchmark machine) and
    # noisy on a shared machine (single paired ratios from 0.5 to 1.9): 21 left the median of their noise floor 5%
    # from 1; 155 put it at 1.02 (a bootstrap 95% interval of 0.99-1.05).
    "headline_reps": (121, 151),
    "short_reps": (31, 41),
    "cheap_reps": (5, 11),
    # The distil-whisper-shaped cases: 3 cases of 5 calls of 96 tokens, 0.6 to 1.8 s each (the encoder's 0.2 s
    # included), 14 s of CPU time a repetition; 9 repetitions, the warm-up and the counted calls add 2.3 minutes.
    "whisper_reps": (9, 11),
    "costly_reps": (4, 5),
    "sampling_reps": (11, 21),
    "growth": [64, 128, 256, 512, 896],  # trained pair: time per token after this many new tokens
    "warmup_tokens": 8,
    "budget_s": 12 * 60,  # no optional repetition starts after this
    "batch_reps": 5,
    "batch_tokens": 128,
    # The rows ending on an EOS keep their 128 tokens in a quick run too: fewer would cut the rows that end late.
    "batch_eos_tokens": 128,
    # The asr-batch case, 67 s on two loaded cores: the whisper pair 3 repetitions (10 to 13 s each); the
    # distil-whisper-shaped pair one (its encoder makes each of its calls 3 to 5 s: 22 s a repetition, 10 s more to
    # build it and warm it up).
    "asr_reps": 3,
    "asr_agreeing_reps": 1,
}
QUICK = {
    "headline_reps": (5, 7),
    "short_reps": (3, 5),
    "cheap_reps": (3, 5),
    "whisper_reps": (3, 3),
    "costly_reps": (1, 1),
    "sampling_reps": (3, 5),
    "growth": [32, 64, 128, 256],
    "warmup_tokens": 4,
    "budget_s": 100,
    "batch_reps": 2,
    "batch_tokens": 64,
    "batch_eos_tokens": 128,
    "asr_reps": 2,
    "asr_agreeing_reps": 1,
}


def rotated(names, rep):
    """The order of the batch table's ways in repetition `rep`: shifted by one each repetition, reversed in the odd
    ones."""
    names = list(names)
    shift = rep % len(names)
    order = names[shift:] + names[:shift]
    return order if rep % 2 == 0 else order[::-1]


def check_eos_rows(size, rep, measured):
    """SystemExit, loudly, where an assisted call of the rows ending on an EOS ({way: answer} of one size and
    repetition) failed or did not return the batched greedy call's tokens of the same repetition, row for row."""
    for name, answer in measured.items():
        if "failed" in answer:
            raise SystemExit(f"bench: rows ending on an EOS, B={size}, {name} FAILED: {answer['failed']}")
    greedy = measured["batched-greedy"]
    for name, answer in measured.items():
        if answer["rows"] != greedy["rows"]:
            pairs = zip(answer["rows"], greedy["rows"], strict=False)
            differing = [row for row, (a, b) in enumerate(pairs) if a != b]
            raise SystemExit(
                f"bench: rows ending on an EOS, B={size}, repetition {rep}: {name} DID NOT RETURN BATCHED GREEDY "
                f"SEARCH'S TOKENS (rows {differing or 'count'}; row ends {answer.get('row_ends')} against "
                f"{greedy.get('row_ends')})"
            )


def load_average():
    try:
        return " ".join(f"{value:.1f}" for value in os.getloadavg())
    except OSError:
        return "n/a"


def one_minute_load():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


class WorkerProcess:
    """A side's worker: its interpreter, its PYTHONPATH, its settings; one JSON command and answer per line."""

    def __init__(self, side, python, pythonpath, args, log_dir):
        self.side = side.name
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
        command += ["--threads", str(args.threads), "--clock", args.clock, "--settings", side.settings.to_json()]
        self.log = open(log_dir / f"worker-{side.name}.log", "w")
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


class Bench:
    def __init__(self, args, sides, interpreters, trained, batch_sizes):
        """`sides`: the run's sides in table order; `interpreters`: {side name: (python, pythonpath)}."""
        self.args = args
        self.plan = QUICK if args.quick else FULL
        self.quick = args.quick
        self.budget = args.budget if args.budget is not None else self.plan["budget_s"]
        self.sides = [side.name for side in sides]
        self.environments = {side.name: side.environment for side in sides}
        self.greedy_sides = [name for name in self.sides if name in GREEDY_SIDES]
        self.main_sides = [side.name for side in sides if not side.is_constant]  # counted, growth
        self.trained = trained
        self.cases = [] if args.batch_only else (args.cases.split(",") if args.cases else list(CASES))
        # The sides of each case, in table order (the constant draft lengths run the cases whose drafts pay).
        self.constant_cases = getattr(args, "constant_cases", None)
        # The cases of the paired repetitions (generate calls); `asr-batch` is measured apart (`asr_table`).
        self.generate_cases = [case for case in self.cases if CASES[case].kind == "generate"]
        self.case_sides = {case: case_sides(CASES[case], sides, self.constant_cases) for case in self.generate_cases}
        self.reference_sides = {case: reference_sides(CASES[case], sides) for case in self.generate_cases}
        self.asr_meta = None
        self.real_meta = getattr(args, "real_skipped", None) and {"skipped": args.real_skipped}
        self.batch_sizes = batch_sizes
        self.results = []  # every measurement, in the order made
        self.start = time.perf_counter()
        self.log_dir = LOG_DIR
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.workers = {side.name: WorkerProcess(side, *interpreters[side.name], args, self.log_dir) for side in sides}
        self.marks = []
        self.forward_costs = None
        self.batch_meta = None
        self.attention = {}  # side -> {workload: attention implementation}
        self.adopted = {}  # workload -> sides that load the reference side's weights

    def elapsed(self):
        return time.perf_counter() - self.start

    def tokens(self, case):
        return CASES[case].new_tokens(self.quick)

    def greedy_key(self, case):
        return CASES[case].greedy_key(self.quick)

    def measure(
        self,
        side,
        workload,
        method,
        tokens,
        phase,
        case=None,
        rep=None,
        marks=(),
        count_ops=False,
        temperature=None,
        reference_for=None,
    ):
        """One run; with a temperature (a sampling case), seeded by the repetition, the same seed on every side.
        `reference_for`: the case whose reference this run is (its `case` is then the reference's name)."""
        command = {
            "op": "run",
            "workload": workload,
            "method": method,
            "max_new_tokens": tokens,
            "marks": list(marks),
            "count_ops": count_ops,
        }
        if temperature is not None:
            command.update(temperature=temperature, seed=sampling_seed(rep))
        answer = self.workers[side].ask(command)
        answer.update(side=side, phase=phase, rep=rep, case=case, max_new_tokens=tokens)
        if reference_for is not None:
            answer["reference_for"] = reference_for
        self.results.append(answer)
        if phase in ("warmup", "ops"):
            return answer
        where = f"[{self.elapsed():6.0f}s] {phase:<6} {case or workload:<10} {method:<8} {side:<12} {tokens:5d} tok  "
        self.print_answer(where, method, answer, lambda: f"wall {answer['wall_per_token'] * 1e3:8.3f}")
        return answer

    @staticmethod
    def print_answer(where, method, answer, detail):
        """One progress line: the failure, or time per token (`detail()` in brackets), rounds and acceptance (the
        drafted candidates alone where the answer has no accepted ones)."""
        if "failed" in answer:
            print(f"{where}{answer['failed'][:100]}", flush=True)
            return
        if method != "assisted":
            accepted = ""
        elif answer["accepted"] is None:  # a batch whose rows end on an EOS: no row's count
            accepted = f"  drafted {answer['proposed']}"
        else:
            accepted = f"  accepted {answer['accepted']}/{answer['proposed']}"
        print(
            f"{where}{answer['per_token'] * 1e3:8.3f} ms/tok ({detail()})  rounds {answer['rounds']:4d}{accepted}",
            flush=True,
        )

    def info(self):
        return {side: worker.ask({"op": "info"}) for side, worker in self.workers.items()}

    def workloads_of(self, side):
        """The pairs a side builds: those of its cases, and the greedy references it runs."""
        pairs = set()
        for case in self.generate_cases:
            if side in self.case_sides[case]:
                pairs.add(CASES[case].pair)
            if side in self.reference_sides[case]:
                pairs.add(self.greedy_key(case)[0])
        return sorted(pairs)

    def load(self, workloads=None):
        """Every side builds (or loads) its workloads (`workloads`: the same for every side), at the same time (not
        measured); the weights must be the same on every side that builds a workload.

        A version that initializes a model in another order (5.x's T5, say) builds other weights from the same seed:
        such a side loads the weights the reference side built, saved once under build/bench/weights/."""
        wanted = {side: list(workloads) if workloads is not None else self.workloads_of(side) for side in self.workers}
        for side, worker in self.workers.items():
            worker.send({"op": "load", "workloads": wanted[side], "trained": self.trained})
        loaded = {side: worker.receive() for side, worker in self.workers.items()}
        self.attention = {side: answer["attention"] for side, answer in loaded.items()}
        weights = {side: dict(answer["weights"]) for side, answer in loaded.items()}
        for workload in sorted({name for names in wanted.values() for name in names}):
            built = [side for side in weights if workload in weights[side]]
            reference = REFERENCE if REFERENCE in built else built[0]
            expected = weights[reference][workload]
            differing = [side for side in built if weights[side][workload] != expected]
            if differing:
                path = WEIGHTS_DIR / f"{workload}-{expected}.pt"
                if not path.exists():
                    self.workers[reference].ask({"op": "save_weights", "workload": workload, "path": str(path)})
                for side in differing:
                    answer = self.workers[side].ask({"op": "adopt_weights", "workload": workload, "path": str(path)})
                    weights[side][workload] = answer["weights"]
                self.adopted[workload] = differing
                print(f"[{self.elapsed():6.0f}s] {', '.join(differing)}: {workload} weights of the {reference} side")
            checksums = {side: weights[side][workload] for side in built}
            if len(set(checksums.values())) != 1:
                raise SystemExit(f"bench: the sides built different {workload} models: {checksums}")

    def warm_up(self):
        self.load()
        print(f"[{self.elapsed():6.0f}s] models built; warming up", flush=True)
        if any(CASES[case].pair == "trained" for case in self.generate_cases) and PATCHED in self.workers:
            self.forward_costs = self.workers[PATCHED].ask({"op": "costs", "workload": "trained"})["forward_costs"]
        warm = self.plan["warmup_tokens"]
        for side in self.sides:
            # Every method the side runs, on every pair, greedy or sampling as its cases do.
            references = {
                (self.greedy_key(case)[0], CASES[case].reference_method, CASES[case].temperature)
                for case in self.generate_cases
                if side in self.reference_sides[case]
            }
            for target, method, temperature in sorted(references, key=str):
                self.measure(side, target, method, warm, "warmup", temperature=temperature)
            assisted = {
                (CASES[case].pair, CASES[case].temperature)
                for case in self.generate_cases
                if side in self.case_sides[case]
            }
            for workload, temperature in sorted(assisted, key=str):
                self.measure(side, workload, "assisted", warm, "warmup", temperature=temperature)

    def order(self, rep):
        sides = list(self.sides)
        shift = rep % len(sides)
        order = sides[shift:] + sides[:shift]
        return order if rep % 2 == 0 else order[::-1]

    def rep(self, rep, cases):
        order = self.order(rep)
        for case in cases:
            # Each case runs its own references, even where cases share them (`draft`, `self` and `partial`): a
            # reference run a minute away from the assisted run it is compared with moves the ratio by 10%.
            key = self.greedy_key(case)
            references = [side for side in order if side in self.reference_sides[case]]
            assisted = [side for side in order if side in self.case_sides[case]]
            for side, method in self.sequence(rep, case, references, assisted):
                if method == "assisted":
                    workload, tokens, name, reference_for = CASES[case].pair, self.tokens(case), case, None
                else:
                    workload, tokens, name, reference_for = key[0], key[1], greedy_name(key), case
                self.measure(
                    side,
                    workload,
                    method,
                    tokens,
                    "ab",
                    case=name,
                    rep=rep,
                    temperature=CASES[case].temperature,
                    reference_for=reference_for,
                )

    @staticmethod
    def sequence(rep, case, references, assisted):
        """
        The runs of one case in one repetition, as (side, method): the reference runs (greedy search of stock and
        patched; a sampling case's plain sampling) next to the patched side's assisted run, on the side of it that
        alternates, and the block where the patched side falls in the rotating order of the assisted sides. The
        ratios the run is judged by (greedy patched/stock, assisted patched/greedy) then come from adjacent runs.
        """
        method = CASES[case].reference_method
        block = [(side, method) for side in sorted(references, key=lambda side: side == PATCHED)]
        if PATCHED not in assisted:
            return block + [(side, "assisted") for side in assisted]
        block.append((PATCHED, "assisted"))
        if rep % 2 == 1:
            block.reverse()
        sequence = []
        for side in assisted:
            sequence += block if side == PATCHED else [(side, "assisted")]
        return sequence

    def rep_cost(self, cases):
        """Wall seconds the last repetition of these cases took (for the budget guard)."""
        cost = 0.0
        for case in cases:
            runs = [r for r in self.results if r["phase"] == "ab" and "wall" in r]
            runs = [r for r in runs if r["case"] == case or r.get("reference_for") == case]
            last = max((r["rep"] for r in runs), default=None)
            cost += sum(r["wall"] for r in runs if r["rep"] == last)
        return cost

    def count_operations(self):
        """One counted call per side and case: the torch operations run outside the model forwards (not timed)."""
        for case in self.generate_cases:
            if not CASES[case].count_ops:
                continue
            key = self.greedy_key(case)
            self.measure(PATCHED, key[0], "greedy", key[1], "ops", case=greedy_name(key), count_ops=True)
            for side in self.main_sides:
                self.measure(side, CASES[case].pair, "assisted", self.tokens(case), "ops", case=case, count_ops=True)
        print(f"[{self.elapsed():6.0f}s] operations outside the forwards counted", flush=True)

    def growth(self):
        marks = self.plan["growth"]
        self.marks = marks
        tokens = max(marks)
        self.measure(PATCHED, "trained", "greedy", tokens, "growth", case="greedy", marks=marks)
        for side in self.main_sides:
            self.measure(side, "trained", "assisted", tokens, "growth", case=side, marks=marks)

    def run(self):
        plan = self.plan
        self.warm_up()
        self.count_operations()
        groups = {group: [case for case in self.generate_cases if CASES[case].group == group] for group in GROUPS}
        reps = {group: 0 for group in groups}
        minimum = {group: plan[f"{group}_reps"][0] for group in groups}
        maximum = {group: plan[f"{group}_reps"][1] for group in groups}
        for group, cases in groups.items():
            for _ in range(minimum[group] if cases else 0):
                self.rep(reps[group], cases)
                reps[group] += 1
        if HEADLINE in self.cases:
            self.growth()
        # Optional repetitions while the budget allows, the cheapest cases first.
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
        if HEADLINE in self.cases:
            self.batch_table()
        if any(CASES[case].kind == "asr" for case in self.cases):
            self.asr_table()
        self.real_table()

    def real_table(self):
        """The cases on the real checkpoints (`benchkit.real`), if the run has any."""
        cases = [case for case in self.cases if CASES[case].kind == "real"]
        if cases:
            self.real_meta = real.run(self, cases)

    def batch_measure(self, side, name, size, tokens, phase, rep=None, eos=None):
        """One call of a way of the batch table; with `eos` (a token), of its variant whose rows end on it (case
        `batch-eos:NAME:B`)."""
        way = BATCH_METHODS[name]
        method = way.method
        command = {
            "op": "batch",
            "workload": "trained",
            "method": method,
            "max_new_tokens": tokens,
            "prompts": self.trained["batch_prompts"][:size],
            "separate": way.separate,
            "aligned_rows": way.aligned,
        }
        if eos is not None:
            command["eos_token_id"] = eos
        answer = self.workers[side].ask(command)
        case = f"batch{'-eos' if eos is not None else ''}:{name}:{size}"
        answer.update(side=side, phase=phase, rep=rep, case=case, max_new_tokens=tokens)
        self.results.append(answer)
        if phase.endswith("-warmup"):
            return answer
        where = f"[{self.elapsed():6.0f}s] {phase:<9} B={size:<3} {name:<17} {side:<12} {tokens:5d} tok  "
        self.print_answer(where, method, answer, lambda: f"{1 / answer['per_token']:7.0f} tok/s")
        return answer

    def batch_table(self):
        """The Batches section: the patched side on the trained pair; the other sides only asked for a batch. Its
        variant whose rows end on an EOS (`workloads.BATCH_EOS_*`: the batched ways at the table's sizes among
        BATCH_EOS_SIZES) runs in the same repetitions, after the sizes without one, its ways rotating as theirs do;
        SystemExit where one of its assisted calls does not return that repetition's batched greedy tokens."""
        plan = self.plan
        largest = max(self.batch_sizes)
        started = self.elapsed()
        self.batch_meta = {
            "sizes": self.batch_sizes,
            "tokens": plan["batch_tokens"],
            "reps": plan["batch_reps"],
            "prompt_lengths": [len(prompt) for prompt in self.trained["batch_prompts"][:largest]],
            "load_start": load_average(),
            "load_peak": one_minute_load(),
        }
        eos_sizes = [size for size in self.batch_sizes if size in BATCH_EOS_SIZES]
        eos_tokens = plan["batch_eos_tokens"]
        self.batch_meta["eos"] = {
            "token": BATCH_EOS_TOKEN,
            "sizes": eos_sizes,
            "tokens": eos_tokens,
            "reps": plan["batch_reps"],
            "methods": list(BATCH_EOS_METHODS),
        }
        print(
            f"[{self.elapsed():6.0f}s] batches: B = {', '.join(map(str, self.batch_sizes))}; rows ending on an EOS "
            f"({BATCH_EOS_TOKEN}): B = {', '.join(map(str, eos_sizes)) or 'none'}",
            flush=True,
        )
        # Stock 4.31.0 and the upstream releases refuse assisted generation of a batch: asked once each.
        for side in self.sides:
            if self.environments[side] != PATCHED:
                self.batch_measure(side, "batched-assisted", largest, plan["warmup_tokens"], "batch-probe")
        for size in self.batch_sizes:
            for name in BATCH_METHODS:
                self.batch_measure(PATCHED, name, size, plan["warmup_tokens"], "batch-warmup")
        for size in eos_sizes:
            for name in BATCH_EOS_METHODS:
                self.batch_measure(PATCHED, name, size, plan["warmup_tokens"], "batch-eos-warmup", eos=BATCH_EOS_TOKEN)
        names = list(BATCH_METHODS)
        for rep in range(plan["batch_reps"]):
            for size in self.batch_sizes:
                for name in rotated(names, rep):
                    self.batch_measure(PATCHED, name, size, plan["batch_tokens"], "batch", rep=rep)
                self.batch_meta["load_peak"] = max(self.batch_meta["load_peak"], one_minute_load())
            for size in eos_sizes:
                measured = {}
                for name in rotated(BATCH_EOS_METHODS, rep):
                    measured[name] = self.batch_measure(
                        PATCHED, name, size, eos_tokens, "batch-eos", rep=rep, eos=BATCH_EOS_TOKEN
                    )
                check_eos_rows(size, rep, measured)
                self.batch_meta["load_peak"] = max(self.batch_meta["load_peak"], one_minute_load())
        self.batch_meta.update(load_end=load_average(), seconds=self.elapsed() - started)
        self.cache_bound()

    def cache_bound(self):
        """The peak cache of batched assisted calls over batched greedy search's (`workloads.CACHE_BOUND_*`), on the
        patched side: counts, one call each, kept in the batch table's meta."""
        started = self.elapsed()
        sizes = [size for size in CACHE_BOUND_SIZES if size <= len(self.trained["batch_prompts"])]
        tokens = CACHE_BOUND_TOKENS if not self.quick else min(CACHE_BOUND_TOKENS, self.plan["batch_tokens"])
        answer = self.workers[PATCHED].ask(
            {
                "op": "cache_bound",
                "workload": "trained",
                "sizes": sizes,
                "draft_lengths": CACHE_BOUND_DRAFT_LENGTHS,
                "max_new_tokens": tokens,
                "prompts": self.trained["batch_prompts"][: max(sizes)],
            }
        )
        answer.pop("side", None)
        self.batch_meta["cache_bound"] = dict(answer, seconds=self.elapsed() - started)
        ratios = [row["assisted_width"] / row["greedy_width"] for row in answer["rows"]]
        worst = f"{max(ratios):.3f}" if ratios else "n/a"
        print(f"[{self.elapsed():6.0f}s] cache bound: peak target cache over batched greedy's, worst {worst}")

    def asr_measure(self, side, workload, method, size, tokens, phase, rep=None):
        command = {"op": "asr", "workload": workload, "method": method, "max_new_tokens": tokens, "batch_size": size}
        answer = self.workers[side].ask(command)
        answer.update(side=side, phase=phase, rep=rep, case=f"asr:{workload}:{method}:{size}", max_new_tokens=tokens)
        # A failure's answer too: the report says which pair and size failed.
        answer.update(workload=workload, batch_size=answer.get("batch_size", size))
        self.results.append(answer)
        where = (
            f"[{self.elapsed():6.0f}s] {phase:<10} {workload:<14} B={size:<2} {method:<8} {side:<12} {tokens:5d} tok  "
        )
        if "failed" in answer:
            print(f"{where}{answer['failed'][:100]}", flush=True)
        elif phase != "asr-warmup":
            print(
                f"{where}{answer['per_row'] * 1e3:8.1f} ms/row  target forwards {answer['target_calls']}", flush=True
            )
        return answer

    def asr_table(self):
        """Batched speech recognition through the pipeline (`asr-batch`): on the patched fork, batched assisted
        against batched greedy transcription of the same recordings at every batch size, with every pair of
        `workloads.ASR_WORKLOADS` (its own tokens and repetitions), the two methods next to each other and their
        order alternating from one repetition to the next, the pairs interleaved within a repetition; a pair is
        skipped when the patched side's pipeline raises at its warm-up. The other versions are asked once each (one
        side per environment) what they do with the largest batch of the whisper pair."""
        case = next(case for case in self.cases if CASES[case].kind == "asr")
        plan = self.plan
        sizes = list(ASR_BATCH_SIZES)
        largest = max(sizes)
        started = self.elapsed()
        pairs = {
            name: {"tokens": way.new_tokens(self.quick), "reps": plan[way.reps]} for name, way in ASR_WORKLOADS.items()
        }
        self.asr_meta = {"case": case, "sizes": sizes, "recordings": ASR_RECORDINGS, "pairs": pairs}
        print(
            f"[{self.elapsed():6.0f}s] batched speech recognition, {', '.join(pairs)}, "
            f"batch_size {'/'.join(map(str, sizes))}",
            flush=True,
        )
        asked = set()
        for side in self.main_sides:
            if self.environments[side] not in asked and self.environments[side] != PATCHED:
                asked.add(self.environments[side])
                self.asr_measure(side, ASR_ANY_PAIR, "assisted", largest, plan["warmup_tokens"], "asr-probe")
        if PATCHED not in self.workers:
            self.asr_meta["skipped"] = "the patched side is not part of this run"
            return
        # One warm-up per pair and method, on the largest batch: the first calls build the pair and its pipeline and
        # pay the first use of each model (every size transcribes the same recordings, only the batches' shapes
        # differ).
        for name, pair in pairs.items():
            for method in ("greedy", "assisted"):
                answer = self.asr_measure(PATCHED, name, method, largest, plan["warmup_tokens"], "asr-warmup")
                if "failed" in answer:
                    # Not there yet: the rest of the run does not depend on it.
                    pair["skipped"] = f"{method}: {answer['failed']}"
                    why = answer["failed"]
                    print(f"[{self.elapsed():6.0f}s] asr-batch, {name} skipped: the patched side's pipeline {why}")
                    break
        measured = {name: pair for name, pair in pairs.items() if "skipped" not in pair}
        for rep in range(max((pair["reps"] for pair in measured.values()), default=0)):
            for name, pair in measured.items():
                if rep >= pair["reps"]:
                    continue
                for size in sizes:
                    for method in ("greedy", "assisted") if rep % 2 == 0 else ("assisted", "greedy"):
                        self.asr_measure(PATCHED, name, method, size, pair["tokens"], "asr", rep=rep)
        self.asr_meta["seconds"] = self.elapsed() - started

    def run_batch_only(self):
        self.load(["trained"])
        print(f"[{self.elapsed():6.0f}s] models loaded", flush=True)
        self.batch_table()

    def close(self):
        for worker in self.workers.values():
            worker.close()
