"""The benchmark's headline workload on one device, patched fork only: greedy vs assisted time per token.

Runs with the transformers the interpreter imports (`scripts/cuda/run.sh` puts the fork first on PYTHONPATH), on the
`draft` workload of `scripts/bench.py` (a GPT-2 small target with a 2-layer random draft, 128 new tokens), with the
draft-length schedule the fork runs by default (`GenerationConfig.num_assistant_tokens_schedule`: "adaptive"), or the
one `--schedule` names ("heuristic", "constant:N", ...). Every call is timed in two ways:

- "synced": through the bench worker (`scripts/bench_worker.py`, the same class in this process), whose forward hooks
  synchronize the device before and after every model forward and at every round: what `scripts/bench.py` measures,
  and where the counts per call come from (rounds, candidates drafted and accepted, target forwards per token);
- "plain": `model.generate(...)` on a second copy of the same models (the same weights, checked) without any hook or
  stopping criterion, the device synchronized only before and after the whole call, as users run it. One more
  assisted call of that kind, with hooks that only count forwards, gives its counts (the adaptive schedule decides
  from the time its rounds take, so they may differ from the synced calls').

After a warm-up, each repetition runs greedy, assisted, and greedy again, in both timings, and the next repetition
runs the same calls in the reverse order, so that every assisted call has its greedy call next to it. Ratios are
computed per repetition, greedy/assisted (above 1: assisted decoding is faster) and greedy again/greedy (the same
calls against themselves: the noise of the run), and reported as their median and min-max: a speed target holds when
the median of the greedy/assisted ratios meets it while the noise median lies within 3% of 1.00.

`--reps` repetitions (default 9) unless `--budget` seconds run out first (a repetition only starts when the last one's
cost still fits); then, while time is left, a few repetitions (`--extra-reps`) of the `loop` workload (tiny models:
the loop's own cost) and of `draft` in bfloat16. The results go to `--json` and `--markdown` after every repetition,
so that a run stopped by its time limit leaves what it measured. Timing is reported, never asserted; stock is not
measured here.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import bench_worker  # noqa: E402
from benchkit.settings import DraftLength, Settings  # noqa: E402
from benchkit.worker import DRAFT_FIELDS, checksum, set_draft_length  # noqa: E402
from benchkit.workloads import PAIRS, Builder  # noqa: E402

# (workload, dtype, tokens per run), the headline first; the tokens are those of `scripts/bench.py`'s full runs
PLAN = [("draft", "float32", 128), ("loop", "float32", 1024), ("draft", "bfloat16", 128)]
DEFAULT_REPS = 9
# the calls of one repetition; the next one runs them in the reverse order
METHODS = ("greedy", "assisted", "greedy_again")
TIMINGS = ("synced", "plain")
TIMING_LABELS = {
    "synced": "synchronized at every forward (bench worker)",
    "plain": "plain generate, synchronized around the call",
}
# the noise (greedy again/greedy) a run's ratios can be trusted with: within 3% of 1.00
NOISE_LIMIT = 0.03
WARMUP_TOKENS = 8


def parse_plan(text):
    """'WORKLOAD:DTYPE:TOKENS,...' -> [(workload, dtype, tokens)]."""
    plan = []
    for item in text.split(","):
        try:
            workload, dtype, tokens = item.strip().split(":")
            plan.append((workload, dtype, int(tokens)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"a plan is WORKLOAD:DTYPE:TOKENS[,...], not {text!r}") from None
        if workload not in PAIRS or dtype not in ("float32", "bfloat16"):
            raise argparse.ArgumentTypeError(f"unknown workload or dtype in {item!r}")
    return plan


def parse_schedule(text):
    """'default' (the fork's own default) or what `DraftLength.parse` reads: 'heuristic', 'adaptive', 'constant:3'."""
    if text.strip() in ("default", "defaults"):
        return DraftLength.defaults()
    try:
        return DraftLength.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--budget", type=float, default=150.0, help="seconds for everything (default 150)")
    parser.add_argument(
        "--reps", type=int, default=DEFAULT_REPS, help=f"repetitions of the headline workload (default {DEFAULT_REPS})"
    )
    parser.add_argument("--extra-reps", type=int, default=3, help="repetitions of the other workloads (default 3)")
    parser.add_argument(
        "--schedule",
        type=parse_schedule,
        default=DraftLength.defaults(),
        help="draft-length schedule: 'default' (the fork's: adaptive; the default), 'heuristic', 'constant:N', ...",
    )
    parser.add_argument(
        "--plan",
        type=parse_plan,
        default=PLAN,
        help="WORKLOAD:DTYPE:TOKENS,... the headline first (default: " + ",".join(":".join(map(str, p)) for p in PLAN),
    )
    parser.add_argument("--tokens-scale", type=float, default=1.0, help="scale the tokens per run (a quick CPU test)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    if args.reps < 1 or args.extra_reps < 1:
        parser.error("--reps and --extra-reps are at least 1")
    return args


def summary(values):
    """{"median", "min", "max"} of a list, None when it is empty."""
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


class PlainModels:
    """A second copy of a workload's models, built as the worker builds them (same seeds: the same weights), without
    the worker's hooks: `run` is a plain `generate` call, the device synchronized only before and after it."""

    def __init__(self, workload, dtype, device, draft, clock):
        import torch

        self.device = device
        self.draft = draft
        self.clock = clock  # the worker's: the same time source, its `sync` is `torch.cuda.synchronize()` on CUDA
        self.target, self.assistant, self.prompt = PAIRS[workload].build(Builder(device, getattr(torch, dtype)))
        for model in (self.target, self.assistant):
            model.generation_config.eos_token_id = None  # as the worker: every run generates max_new_tokens
        config = self.assistant.generation_config
        self.saved_draft = {name: getattr(config, name) for name in DRAFT_FIELDS if hasattr(config, name)}
        self.weights = checksum(self.target, self.assistant)

    def config(self, max_new_tokens):
        from transformers import GenerationConfig

        # the worker's generation config for greedy decoding
        return GenerationConfig(
            max_new_tokens=max_new_tokens,
            min_new_tokens=0,
            do_sample=False,
            num_beams=1,
            eos_token_id=None,
            pad_token_id=0,
            use_cache=True,
        )

    def run(self, method, max_new_tokens, count=False):
        """One call; with `count`, forward hooks that only count the calls (no synchronization) are on for it."""
        import hashlib

        extra = {}
        if method == "assisted":
            set_draft_length(self.assistant, self.draft, self.saved_draft)
            extra["assistant_model"] = self.assistant
        config = self.config(max_new_tokens)
        calls = {"target": 0, "assistant": 0}
        handles = []
        if count:
            for name, model in (("target", self.target), ("assistant", self.assistant)):

                def counted(module, args, output, name=name):
                    calls[name] += 1

                handles.append(model.register_forward_hook(counted))
        try:
            self.clock.sync()
            start = self.clock.now()
            output = self.target.generate(**self.prompt, generation_config=config, **extra)
            self.clock.sync()
            elapsed = self.clock.now() - start
        finally:
            for handle in handles:
                handle.remove()
        new_tokens = output.shape[1] - self.prompt["input_ids"].shape[1]
        result = {
            "method": method,
            "new_tokens": new_tokens,
            "time": elapsed,
            "per_token": elapsed / new_tokens,
            "output_sha": hashlib.sha256(output.cpu().numpy().tobytes()).hexdigest()[:16],
        }
        if count:
            # one target forward per round (greedy: per token), one assistant forward per drafted candidate; each
            # round adds its accepted candidates and the target's own token
            result.update(
                rounds=calls["target"],
                drafted=calls["assistant"],
                accepted=new_tokens - calls["target"],
                target_calls=calls["target"],
            )
        return result


def counts_of(result):
    """The counts of one call: from the worker's answer, or from a counted plain call."""
    drafted = result["drafted"] if "drafted" in result else result["proposed"]
    return {
        "rounds": result["rounds"],
        "drafted": drafted,
        "accepted": result["accepted"],
        "target_calls": result["target_calls"],
        "new_tokens": result["new_tokens"],
        "target_forwards_per_token": result["target_calls"] / result["new_tokens"],
    }


def counts_summary(calls):
    """Per count: the median and min-max over the calls (None without calls)."""
    if not calls:
        return None
    return {"calls": len(calls), **{key: summary([c[key] for c in calls]) for key in calls[0]}}


class Workload:
    """One workload in one dtype: the worker's models and their plain copy, the runs so far, their summary."""

    def __init__(self, workload, dtype, tokens, args):
        self.workload, self.dtype, self.tokens, self.args = workload, dtype, tokens, args
        settings = Settings(draft=args.schedule).to_json()
        worker_args = argparse.Namespace(device=args.device, dtype=dtype, threads=1, clock="auto", settings=settings)
        built = time.perf_counter()
        self.worker = bench_worker.Worker(worker_args)
        _, self.worker_assistant, _, weights = self.worker.workload(workload)
        self.plain = PlainModels(workload, dtype, args.device, args.schedule, self.worker.clock)
        if self.plain.weights != weights:
            raise SystemExit(f"bench: the plain copy of {workload} has other weights than the worker's")
        self.build_s = time.perf_counter() - built
        self.info = self.worker.info()
        self.runs = {timing: {method: [] for method in METHODS} for timing in TIMINGS}
        self.counted_plain = None
        self.schedule_run = None

    def call(self, timing, method, tokens, count=False):
        kind = "greedy" if method == "greedy_again" else method
        if timing == "plain":
            return self.plain.run(kind, tokens, count=count)
        result = self.worker.run(self.workload, kind, tokens)
        if "failed" in result:
            raise SystemExit(f"bench: {self.workload} {self.dtype} {kind}: {result['failed']}")
        if kind == "assisted" and self.schedule_run is None:
            # what the assistant's generation config held for the call (4.31 without the field: its heuristic)
            config = self.worker_assistant.generation_config
            self.schedule_run = getattr(config, "num_assistant_tokens_schedule", "heuristic")
        return result

    def warm_up(self):
        # kernels, caches, the allocator; the plain copy's assisted call also checks that the schedule is accepted
        for timing in TIMINGS:
            for method in ("greedy", "assisted"):
                self.call(timing, method, WARMUP_TOKENS)

    def repetition(self, rep, log, start):
        order = [(timing, method) for timing in TIMINGS for method in METHODS]
        for timing, method in order if rep % 2 == 0 else reversed(order):
            result = self.call(timing, method, self.tokens)
            self.runs[timing][method].append(result)
            note = ""
            if method == "assisted" and timing == "synced":
                note = f", rounds {result['rounds']}, accepted {result['accepted']}/{result['proposed']}"
            log(
                f"[{time.perf_counter() - start:5.1f}s] {self.workload} {self.dtype} rep {rep + 1} {timing:<6} "
                f"{method:<12} {result['new_tokens']} tok {result['per_token'] * 1e3:7.2f} ms/tok{note}"
            )

    def count_plain(self):
        self.counted_plain = counts_of(self.plain.run("assisted", self.tokens, count=True))

    def result(self, reps_planned):
        timings = {}
        shas = set()
        for timing in TIMINGS:
            runs = self.runs[timing]
            per_token = {method: [r["per_token"] * 1e3 for r in runs[method]] for method in METHODS}
            ratios = [g / a for g, a in zip(per_token["greedy"], per_token["assisted"], strict=True)]
            noise = [again / g for g, again in zip(per_token["greedy"], per_token["greedy_again"], strict=True)]
            noise_summary = summary(noise)
            shas |= {r["output_sha"] for method in METHODS for r in runs[method]}
            if timing == "synced":
                calls = [counts_of(r) for r in runs["assisted"]]
                greedy_calls = [counts_of(r) for r in runs["greedy"] + runs["greedy_again"]]
                counts = {"assisted": counts_summary(calls), "greedy": counts_summary(greedy_calls)}
                counts_from = "every assisted call of this timing (the worker's hooks)"
            else:
                counts = {"assisted": counts_summary([self.counted_plain] if self.counted_plain else [])}
                counts_from = "one more assisted call with hooks that only count forwards (no synchronization)"
            timings[timing] = {
                "label": TIMING_LABELS[timing],
                "greedy_ms_per_token": per_token["greedy"],
                "assisted_ms_per_token": per_token["assisted"],
                "greedy_again_ms_per_token": per_token["greedy_again"],
                "greedy_ms": summary(per_token["greedy"]),
                "assisted_ms": summary(per_token["assisted"]),
                "ratios": ratios,  # greedy/assisted per repetition
                "ratio": summary(ratios),
                "noise_ratios": noise,  # greedy again/greedy per repetition
                "noise": noise_summary,
                "noise_within_limit": noise_summary is not None and abs(noise_summary["median"] - 1.0) <= NOISE_LIMIT,
                "counts": counts,
                "counts_from": counts_from,
            }
        info = self.info
        return {
            "workload": self.workload,
            "dtype": self.dtype,
            "tokens": self.tokens,
            "reps": len(self.runs["synced"]["assisted"]),
            "reps_planned": reps_planned,
            "build_s": self.build_s,
            "schedule": self.schedule_run,
            "timings": timings,
            "same_tokens": len(shas) == 1,
            "clock": info["clock"],
            "device_name": info["device_name"],
            "transformers": info["transformers"],
            "transformers_file": info["transformers_file"],
            "torch": info["torch"],
        }


def fmt_summary(values, digits=2, suffix=""):
    if values is None:
        return "-"
    text = f"{values['median']:.{digits}f}{suffix}"
    if values["min"] != values["max"]:
        text += f" ({values['min']:.{digits}f}-{values['max']:.{digits}f})"
    return text


def fmt_count(values):
    """A count's median (min-max): whole numbers as such, a median between two calls with its half."""
    if values is None:
        return "-"
    text = f"{values['median']:g}"
    return text if values["min"] == values["max"] else text + f" ({values['min']:g}-{values['max']:g})"


def schedule_text(report):
    setting = report["schedule_setting"]
    source = "the fork's default" if setting == "defaults" else f"asked: {setting}"
    return f"{report['schedule']} ({source})"


def markdown(report):
    results = report["results"]
    head = results[0] if results else {}
    lines = [
        f"Patched fork on {head.get('device_name', report['device'])} (torch {head.get('torch', '?')}, "
        f"{head.get('clock', '?')} clock). Draft-length schedule: **{schedule_text(report)}**. Each repetition runs "
        "greedy, assisted and greedy again, in both timings, the next one in the reverse order; ratios are per "
        "repetition, median (min-max). Timings: **synced**: the bench worker, the device synchronized before and "
        "after every model forward and every round; **plain**: `model.generate(...)` without hooks, the device "
        "synchronized only around the call (as users run it). The noise is greedy again/greedy (within "
        f"{NOISE_LIMIT:.0%} of 1.00: the ratios can be trusted).",
        "",
        "| workload | dtype | tokens/run | timing | reps | greedy ms/token | assisted ms/token | greedy/assisted | "
        "noise (greedy/greedy) | same tokens |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        reps = f"{r['reps']}" + (f" of {r['reps_planned']}" if r["reps"] < r["reps_planned"] else "")
        for timing in TIMINGS:
            t = r["timings"][timing]
            noise = fmt_summary(t["noise"], 3)
            if t["noise"] is not None:
                noise += " ok" if t["noise_within_limit"] else " **beyond 3%**"
            lines.append(
                f"| {r['workload']} | {r['dtype']} | {r['tokens']} | {timing} | {reps} | "
                f"{fmt_summary(t['greedy_ms'])} | {fmt_summary(t['assisted_ms'])} | "
                f"{fmt_summary(t['ratio'], 3, 'x')} | {noise} | {'yes' if r['same_tokens'] else 'no'} |"
            )
    lines += [
        "",
        "Counts per assisted call, median (min-max): synced over every assisted call, plain from one more call with "
        "hooks that only count forwards (the adaptive schedule decides from the time its rounds take). Greedy search "
        "runs one target forward per token.",
        "",
        "| workload | dtype | timing | calls | rounds | candidates drafted | candidates accepted | target forwards/"
        "token |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        for timing in TIMINGS:
            c = r["timings"][timing]["counts"]["assisted"]
            if c is None:
                continue
            lines.append(
                f"| {r['workload']} | {r['dtype']} | {timing} | {c['calls']} | {fmt_count(c['rounds'])} | "
                f"{fmt_count(c['drafted'])} | {fmt_count(c['accepted'])} | "
                f"{fmt_summary(c['target_forwards_per_token'], 3)} |"
            )
    lines += ["", "Greedy/assisted per repetition:", ""]
    for r in results:
        for timing in TIMINGS:
            ratios = ", ".join(f"{x:.3f}" for x in r["timings"][timing]["ratios"])
            lines.append(f"- {r['workload']} {r['dtype']} {timing}: {ratios or '-'}")
    return "\n".join(lines) + "\n"


def headline_line(report, seconds):
    if not report["results"]:
        return f"bench: no workload measured in {seconds:.0f}s"
    head = report["results"][0]
    parts = []
    for timing in TIMINGS:
        t = head["timings"][timing]
        parts.append(
            f"{timing} greedy {t['greedy_ms']['median']:.2f} / assisted {t['assisted_ms']['median']:.2f} ms/token = "
            f"{t['ratio']['median']:.3f}x (noise {t['noise']['median']:.3f})"
        )
    counts = head["timings"]["synced"]["counts"]["assisted"]
    reps = f"{head['reps']}" + (f" of {head['reps_planned']}" if head["reps"] < head["reps_planned"] else "")
    return (
        f"bench: {head['workload']} {head['dtype']}, schedule {schedule_text(report)}, {reps} reps: "
        + "; ".join(parts)
        + f"; per assisted call {counts['rounds']['median']:g} rounds, {counts['drafted']['median']:g} drafted, "
        f"{counts['accepted']['median']:g} accepted, {counts['target_forwards_per_token']['median']:.3f} target "
        f"forwards/token; {len(report['results'])} workloads in {seconds:.0f}s"
    )


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()

    def log(message):
        print(message, file=sys.stderr, flush=True)

    report = {
        "device": args.device,
        "schedule": None,  # the schedule the assistant ran (filled from the first assisted call)
        "schedule_setting": args.schedule.label(),  # "defaults": the fork's own
        "asked": args.schedule.schedule,
        "budget_s": args.budget,
        "reps_planned": args.reps,
        "noise_limit": NOISE_LIMIT,
        "timing_labels": TIMING_LABELS,
        "results": [],
    }

    def save():
        report["elapsed_s"] = time.perf_counter() - start
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=1) + "\n")
        if args.markdown and report["results"]:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            args.markdown.write_text(markdown(report))

    head_cost = None  # (build and warm-up, one repetition) of the headline
    for index, (workload, dtype, tokens) in enumerate(args.plan):
        tokens = max(WARMUP_TOKENS, int(tokens * args.tokens_scale))
        reps = args.reps if index == 0 else args.extra_reps
        if index > 0:
            # another workload only starts when the headline's set-up and one of its repetitions still fit
            spent = time.perf_counter() - start
            if head_cost is None or spent + sum(head_cost) > args.budget:
                log(f"bench: no time left for {workload} {dtype} ({spent:.0f}s of {args.budget:.0f}s spent)")
                break
        began = time.perf_counter()
        measured = Workload(workload, dtype, tokens, args)
        measured.warm_up()
        ready = time.perf_counter()
        if report["schedule"] is None:
            report["schedule"] = measured.schedule_run
        log(
            f"bench: {workload} {dtype}, {tokens} tokens, schedule {schedule_text(report)}: built in "
            f"{measured.build_s:.1f}s, warmed up in {ready - began - measured.build_s:.1f}s"
        )
        report["results"].append(None)
        rep_cost = None
        for rep in range(reps):
            elapsed = time.perf_counter() - start
            if rep >= 1 and elapsed + rep_cost > args.budget:
                log(f"bench: {workload} {dtype}: {rep} of {reps} repetitions in the budget ({args.budget:.0f}s)")
                break
            rep_start = time.perf_counter()
            measured.repetition(rep, log, start)
            rep_cost = time.perf_counter() - rep_start
            if index == 0 and rep == 0:
                head_cost = (ready - began, rep_cost)
            if rep == 0:
                measured.count_plain()
            report["results"][-1] = measured.result(reps)
            save()
    save()
    print(headline_line(report, time.perf_counter() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
