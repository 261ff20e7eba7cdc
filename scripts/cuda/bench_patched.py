"""The benchmark's headline workload on one device, patched fork only: greedy vs assisted time per token.

Uses `scripts/bench_worker.py` in this process (its models, its clock: wall clock with CUDA synchronisation on a
GPU), with the transformers the interpreter imports (`scripts/cuda/run.sh` puts the fork first on PYTHONPATH). After
a warm-up, greedy and assisted runs of the main workload (`draft`: a GPT-2 small target with a 2-layer draft,
`scripts/bench.py`) alternate until `--budget` seconds are spent or `--reps` repetitions are done; then, while time is
left, the same for the `loop` workload (tiny models: the loop's own cost) and for `draft` in bfloat16. Medians and the
min-max spread go to `--json` and `--markdown`. Timing is reported, never asserted; stock is not measured here.
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

# (workload, dtype, tokens per run), the headline first; the tokens are those of `scripts/bench.py`'s full runs
PLAN = [("draft", "float32", 128), ("loop", "float32", 1024), ("draft", "bfloat16", 128)]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--budget", type=float, default=50.0, help="seconds for everything (default 50)")
    parser.add_argument("--reps", type=int, default=5, help="greedy/assisted pairs per workload at most (default 5)")
    parser.add_argument("--tokens-scale", type=float, default=1.0, help="scale the tokens per run (a quick CPU test)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    return parser.parse_args(argv)


def measure(workload, dtype, tokens, args, start, log):
    worker_args = argparse.Namespace(device=args.device, dtype=dtype, threads=1, clock="auto")
    worker = bench_worker.Worker(worker_args)
    built = time.perf_counter()
    worker.workload(workload)
    build_s = time.perf_counter() - built
    for method in ("greedy", "assisted"):  # warm-up: kernels, caches, the allocator
        worker.run(workload, method, 8)
    runs = {"greedy": [], "assisted": []}
    rep_cost = None
    for rep in range(args.reps):
        elapsed = time.perf_counter() - start
        if rep >= 1 and rep_cost is not None and elapsed + rep_cost > args.budget:
            break
        rep_start = time.perf_counter()
        order = ("greedy", "assisted") if rep % 2 == 0 else ("assisted", "greedy")
        for method in order:
            result = worker.run(workload, method, tokens)
            runs[method].append(result)
            log(
                f"[{time.perf_counter() - start:5.1f}s] {workload} {dtype} {method:<8} {result['new_tokens']} tok "
                f"{result['per_token'] * 1e3:7.2f} ms/tok, rounds {result['rounds']}"
                + (f", accepted {result['accepted']}/{result['proposed']}" if method == "assisted" else "")
            )
        rep_cost = time.perf_counter() - rep_start
    info = worker.info()
    greedy = [r["per_token"] for r in runs["greedy"]]
    assisted = [r["per_token"] for r in runs["assisted"]]
    same = {r["output_sha"] for r in runs["greedy"]} == {r["output_sha"] for r in runs["assisted"]}
    return {
        "workload": workload,
        "dtype": dtype,
        "tokens": tokens,
        "reps": len(greedy),
        "build_s": build_s,
        "greedy_ms_per_token": [t * 1e3 for t in greedy],
        "assisted_ms_per_token": [t * 1e3 for t in assisted],
        "greedy_median_ms": statistics.median(greedy) * 1e3,
        "assisted_median_ms": statistics.median(assisted) * 1e3,
        "speedup": statistics.median(greedy) / statistics.median(assisted),
        "accepted": runs["assisted"][-1]["accepted"],
        "proposed": runs["assisted"][-1]["proposed"],
        "rounds": runs["assisted"][-1]["rounds"],
        "same_tokens": same,
        "clock": info["clock"],
        "device_name": info["device_name"],
        "transformers": info["transformers"],
        "transformers_file": info["transformers_file"],
        "torch": info["torch"],
    }


def markdown(results, args):
    lines = [
        f"Patched fork on {results[0]['device_name'] if results else args.device} (torch "
        f"{results[0]['torch'] if results else '?'}, {results[0]['clock'] if results else '?'} clock): median time "
        "per generated token, min-max over the repetitions.",
        "",
        "| workload | dtype | tokens/run | reps | greedy ms/token | assisted ms/token | greedy/assisted | accepted "
        "candidates | same tokens |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r['workload']} | {r['dtype']} | {r['tokens']} | {r['reps']} | {r['greedy_median_ms']:.2f} "
            f"({min(r['greedy_ms_per_token']):.2f}-{max(r['greedy_ms_per_token']):.2f}) | "
            f"{r['assisted_median_ms']:.2f} ({min(r['assisted_ms_per_token']):.2f}-"
            f"{max(r['assisted_ms_per_token']):.2f}) | {r['speedup']:.2f}x | {r['accepted']}/{r['proposed']} | "
            f"{'yes' if r['same_tokens'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()

    def log(message):
        print(message, file=sys.stderr, flush=True)

    results = []
    for index, (workload, dtype, tokens) in enumerate(PLAN):
        tokens = max(8, int(tokens * args.tokens_scale))
        spent = time.perf_counter() - start
        if index > 0:
            # an optional workload only starts when the headline's cost (build, warm-up, runs) still fits
            cost = spent / index
            if spent + cost > args.budget:
                log(f"bench: no time left for {workload} {dtype} ({spent:.0f}s of {args.budget:.0f}s spent)")
                break
        results.append(measure(workload, dtype, tokens, args, start, log))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=1) + "\n")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown(results, args))
    head = results[0]
    print(
        f"bench: {head['workload']} {head['dtype']}: greedy {head['greedy_median_ms']:.2f} ms/token, assisted "
        f"{head['assisted_median_ms']:.2f} ms/token ({head['speedup']:.2f}x, {head['reps']} reps, accepted "
        f"{head['accepted']}/{head['proposed']}); {len(results)} workloads in {time.perf_counter() - start:.0f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
