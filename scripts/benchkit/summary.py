"""From measurements to tables: medians and min-max over the repetitions, ratios paired per repetition (from runs made
next to each other), the token checks. Pure Python: the report and the tests use it on saved results."""

import re
import statistics

from .sides import PATCHED, STOCK
from .workloads import ASR_ANY_PAIR, BATCH_EOS_METHODS, BATCH_METHODS, CASES, NOISE_TOLERANCE, TARGETS, greedy_name


def median(values):
    return statistics.median(values) if values else float("nan")


def spread(values):
    return (min(values), max(values)) if values else (float("nan"), float("nan"))


def summary_of(values):
    """(median, min, max), or None without values."""
    return (median(values), *spread(values)) if values else None


def by_rep(results, case):
    """{rep: {side: measurement}} of the A/B runs of a case."""
    table = {}
    for result in results:
        if result["phase"] == "ab" and result["case"] == case:
            table.setdefault(result["rep"], {})[result["side"]] = result
    return table


def summarize(results, sides, cases, quick=False):
    """({case: row}, growth) of a run: `sides` are the run's `Side`s in table order, `cases` the cases' names."""
    names = [side.name for side in sides]
    peers = [side.name for side in sides if side.kind == "peer"]
    constants = [side.name for side in sides if side.is_constant]
    table = {}
    for case in cases:
        if CASES[case].kind == "real":
            continue  # measured apart, summarized by `benchkit.real.summarize_real`
        runs = by_rep(results, case)
        # the case's own reference runs (runs saved before each case had its own share them)
        own = [result for result in results if result.get("reference_for", case) == case]
        greedy = by_rep(own, greedy_name(CASES[case].greedy_key(quick)))
        if not runs or not greedy:
            continue
        tokens = CASES[case].new_tokens(quick)
        row = {"reps": len(runs), "tokens": tokens, "failed": {}, "side": {}, "sampling": CASES[case].temperature}
        for side in names:
            measured = [rep[side] for rep in runs.values() if side in rep]
            failures = [m["failed"] for m in measured if "failed" in m]
            if failures:
                row["failed"][side] = failures[0]
                continue
            if not measured:
                continue
            row["side"][side] = side_summary(measured, tokens)
        greedy_runs = {side: [rep[side] for rep in greedy.values() if side in rep] for side in (STOCK, PATCHED)}
        row["greedy"] = median([m["per_token"] for m in greedy_runs[PATCHED]])
        row["greedy_overhead"] = median([m["overhead_per_round"] for m in greedy_runs[PATCHED]])
        row["greedy_round"] = median([m["round_time"] for m in greedy_runs[PATCHED]])
        row["greedy_first"] = median([m["first_round"] for m in greedy_runs[PATCHED]])
        row["reference"] = side_summary(greedy_runs[PATCHED], tokens) if greedy_runs[PATCHED] else None
        noise = [
            g[PATCHED]["per_token"] / g[STOCK]["per_token"] for g in greedy.values() if STOCK in g and PATCHED in g
        ]
        row["noise"] = summary_of(noise)  # None without stock's greedy runs (a sampling case)
        greedy_output = {m["output_sha"] for runs_ in greedy_runs.values() for m in runs_}

        def paired(side, other, runs=runs):
            return summary_of(
                [
                    rep[side]["per_token"] / rep[other]["per_token"]
                    for rep in runs.values()
                    if side in rep and other in rep and "failed" not in rep[side] and "failed" not in rep[other]
                ]
            )

        done = row["side"]
        row["ratio"] = paired(PATCHED, STOCK) if PATCHED in done and STOCK in done else None
        ran = [peer for peer in peers if peer in done]
        row["best_peer"] = min(ran, key=lambda peer: done[peer]["per_token"]) if ran else None
        row["peer_ratio"] = paired(PATCHED, row["best_peer"]) if row["best_peer"] and PATCHED in done else None
        # The constant draft length that was fastest in hindsight (lowest median), and patched over it per repetition.
        ran = [name for name in constants if name in done]
        row["best_constant"] = min(ran, key=lambda name: done[name]["per_token"]) if ran else None
        row["constant_ratio"] = (
            paired(PATCHED, row["best_constant"]) if row["best_constant"] and PATCHED in done else None
        )
        # Against greedy: the patched greedy run of the same repetition and each side's assisted run; the speedup is
        # greedy over assisted, the slowdown assisted over greedy (> 1 where assisted decoding loses).
        row["speedup"], row["slowdown"] = {}, {}
        for side in done:
            pairs = [
                (greedy[rep][PATCHED]["per_token"], runs[rep][side]["per_token"])
                for rep in runs
                if rep in greedy and PATCHED in greedy[rep] and side in runs[rep] and "failed" not in runs[rep][side]
            ]
            row["speedup"][side] = summary_of([g / a for g, a in pairs]) or (float("nan"),) * 3
            row["slowdown"][side] = summary_of([a / g for g, a in pairs]) or (float("nan"),) * 3
        outputs = set().union(*(values["output"] for values in done.values())) if done else set()
        if row["sampling"] is None:
            row["same_tokens"] = len(outputs) == 1
            row["same_as_greedy"] = outputs == greedy_output
        else:
            # Sampled tokens differ from side to side (each samples its own way): the check is their number.
            row["same_tokens"] = row["same_as_greedy"] = None
        references = [row["reference"]] if row["reference"] else []
        row["lengths_ok"] = all(values["lengths_ok"] for values in list(done.values()) + references)
        table[case] = row
    growth = {}
    for result in results:
        if result["phase"] == "growth" and "failed" not in result:
            label = "greedy" if result["method"] == "greedy" else result["side"]
            growth[label] = {int(mark): value for mark, value in result["prefix_per_token"].items()}
    return table, growth


def side_summary(measured, tokens):
    """A side's runs of a case: medians of the times; the work (acceptance, tokens per round and per target forward)
    over all its runs together, as sampling runs differ from one repetition to the next (greedy ones do not)."""
    sample = measured[0]
    proposed = sum(m["proposed"] for m in measured)
    accepted = sum(m["accepted"] for m in measured)
    generated = sum(m["new_tokens"] for m in measured)
    forwards = sum(m.get("target_calls", m["rounds"]) for m in measured)
    return {
        "per_token": median([m["per_token"] for m in measured]),
        "acceptance": accepted / proposed if proposed else float("nan"),
        "accepted": sample["accepted"],
        "proposed": sample["proposed"],
        "rounds": sample["rounds"],
        "tokens_per_round": generated / sum(m["rounds"] for m in measured),
        "tokens_per_forward": generated / forwards if forwards else float("nan"),
        "overhead": median([m["overhead_per_round"] for m in measured]),
        "round_time": median([m["round_time"] for m in measured]),
        "first_round": median([m["first_round"] for m in measured]),
        "output": {m["output_sha"] for m in measured},
        # every run generated the tokens asked for (no EOS: the same number on every side)
        "lengths_ok": all(m["new_tokens"] == tokens for m in measured),
        "runs": len(measured),
        "decoding_stats": decoding_summary(measured),
    }


def decoding_summary(measured):
    """What the patched fork says of its calls (`assisted_decoding_stats`, recorded by the worker), over a
    side's runs: the schedule, the medians of the rounds and of the candidates drafted and accepted, and the reasons
    it gave for drafting nothing or stopping, each with the number of runs that gave it (reasons differing only in
    their figures counted together, the first one's words kept); None where no run has it (the other versions)."""
    stats = [m["decoding_stats"] for m in measured if m.get("decoding_stats")]
    if not stats:
        return None
    reasons = {}
    for values in stats:
        if values.get("stop_reason"):
            kind = re.sub(r"\d+(\.\d+)?", "#", values["stop_reason"])
            reasons.setdefault(kind, [values["stop_reason"], 0])[1] += 1
    return {
        "runs": len(stats),
        "schedule": stats[0]["schedule"],
        "rounds": median([values["num_rounds"] for values in stats]),
        "drafted": median([values["num_drafted"] for values in stats]),
        "accepted": median([values["num_accepted"] for values in stats]),
        "stopped": sum(count for _, count in reasons.values()),
        "reasons": [tuple(reason) for reason in reasons.values()],
    }


def judge_target(row, limit, side=PATCHED):
    """A case's target: `side`'s assisted over greedy time per token, the median of the ratios paired per repetition,
    against `limit`. {"value": (median, min, max), "met": bool, "noise": (median, min, max) or None, "noise_ok":
    whether the noise floor's median is within NOISE_TOLERANCE of 1 (None without one)}, or None where the side did not
    run the case."""
    value = row["slowdown"].get(side) if row else None
    if not value or value[0] != value[0]:  # not run, or no paired repetition (nan)
        return None
    noise = row.get("noise")
    return {
        "value": value,
        "limit": limit,
        "met": value[0] <= limit,
        "noise": noise,
        "noise_ok": abs(noise[0] - 1.0) <= NOISE_TOLERANCE if noise else None,
        "reps": row["reps"],
        "tokens": row["tokens"],
    }


def targets(table):
    """{case: (label, limit, judged or None)} of the cases with a target (`workloads.TARGETS`), in its order."""
    return {case: (label, limit, judge_target(table.get(case), limit)) for case, (label, limit) in TARGETS.items()}


def worst_poor_draft(table, side=PATCHED):
    """(case, row) of the poor-draft case where `side`'s assisted decoding loses most against greedy, or None."""
    rows = [
        (case, row)
        for case, row in table.items()
        if CASES[case].poor_draft and side in row["side"] and row["slowdown"].get(side)
    ]
    return max(rows, key=lambda item: item[1]["slowdown"][side][0]) if rows else None


def worst_best_constant(table):
    """(case, row) of the case where the patched side loses most against its best constant draft length, or None."""
    rows = [(case, row) for case, row in table.items() if row.get("constant_ratio")]
    return max(rows, key=lambda item: item[1]["constant_ratio"][0]) if rows else None


def first_difference(rows, reference):
    """(rows that differ, the earliest position where one does), or (0, None)."""
    differing = [
        next((i for i, (a, b) in enumerate(zip(row, other, strict=False)) if a != b), min(len(row), len(other)))
        for row, other in zip(rows, reference, strict=True)
        if row != other
    ]
    return len(differing), (min(differing) if differing else None)


def summarize_batch(results, sizes):
    """{size: row} of the batch table, and {side: answer} of the sides asked whether they take a batch. A size is
    left out unless every way of `BATCH_METHODS` ran on it (a run saved before the aligned rows had a way of their
    own has none)."""
    probes = {r["side"]: r for r in results if r.get("phase") == "batch-probe"}
    table = {}
    for size in sizes:
        runs = {name: {} for name in BATCH_METHODS}
        for result in results:
            if result.get("phase") != "batch" or "failed" in result:
                continue
            for name in BATCH_METHODS:
                if result["case"] == f"batch:{name}:{size}":
                    runs[name][result["rep"]] = result
        if not all(runs.values()):
            continue
        row = {"method": {}, "failed": {}}
        for name, measured in runs.items():
            sample = next(iter(measured.values()))
            row["method"][name] = {
                "per_token": median([m["per_token"] for m in measured.values()]),
                "wall_per_token": median([m["wall_per_token"] for m in measured.values()]),
                "rounds": sample["rounds"] / sample["calls"],  # per call
                # the call that ran most target forwards (separate calls: the slowest prompt alone)
                "rounds_max": sample.get("rounds_max", sample["rounds"]),
                "tokens_per_round": sample["new_tokens"] / sample["rounds"],
                "accepted": sample["accepted"],
                "proposed": sample["proposed"],
                "acceptance": sample["accepted"] / sample["proposed"] if sample["proposed"] else float("nan"),
                "reps": len(measured),
                # every repetition of a method returns the same tokens (checked below)
                "rows": sample["rows"],
                "stable": all(m["rows"] == sample["rows"] for m in measured.values()),
            }
        sample = next(iter(runs["batched-assisted"].values()))
        row["tokens"] = sample["max_new_tokens"]
        row["prompt_lengths"] = sample["prompt_lengths"]
        row["reps"] = min(len(measured) for measured in runs.values())

        def paired(numerator, denominator, runs=runs):
            return paired_ratios(runs, numerator, denominator, "per_token")

        # time per token of the slower over the faster: > 1 when the second one is faster
        row["assisted_over_greedy"] = paired("batched-greedy", "batched-assisted")
        row["aligned_over_greedy"] = paired("batched-greedy", "aligned-assisted")
        row["holes_over_aligned"] = paired("aligned-assisted", "batched-assisted")
        # and the other way, as the closing lines give them: < 1 when the first one is faster
        row["assisted_slowdown"] = paired("batched-assisted", "batched-greedy")
        row["holes_slowdown"] = paired("batched-assisted", "aligned-assisted")
        row["batched_over_separate"] = paired("separate-assisted", "batched-assisted")
        row["separate_assisted_over_greedy"] = paired("separate-greedy", "separate-assisted")
        row["greedy_batched_over_separate"] = paired("separate-greedy", "batched-greedy")
        m = row["method"]
        stable = all(values["stable"] for values in m.values())
        row["batched_same"] = stable and m["batched-assisted"]["rows"] == m["batched-greedy"]["rows"]
        row["aligned_same"] = stable and m["aligned-assisted"]["rows"] == m["batched-greedy"]["rows"]
        row["separate_same"] = stable and m["separate-assisted"]["rows"] == m["separate-greedy"]["rows"]
        row["batched_diff"] = first_difference(m["batched-assisted"]["rows"], m["batched-greedy"]["rows"])
        row["aligned_diff"] = first_difference(m["aligned-assisted"]["rows"], m["batched-greedy"]["rows"])
        row["separate_diff"] = first_difference(m["separate-assisted"]["rows"], m["separate-greedy"]["rows"])
        # Left padding changes the shapes of the matrix products: float rounding may change a greedy token.
        row["greedy_diff"] = first_difference(m["batched-greedy"]["rows"], m["separate-greedy"]["rows"])
        # Target forwards of the batch over those of its slowest row alone: a batch runs until its last row is done,
        # so rows of their own need about as many as that row (the draft length the rows share may differ from the
        # one it runs alone); aligned rows need more, each round waiting for the row that matches fewest.
        slowest = m["separate-assisted"]["rounds_max"]
        row["forwards_over_slowest"] = m["batched-assisted"]["rounds"] / slowest
        row["aligned_forwards_over_slowest"] = m["aligned-assisted"]["rounds"] / slowest
        row["stable"] = stable
        table[size] = row
    return table, probes


def paired_ratios(runs, numerator, denominator, key):
    """The summary of `key` of one way over another (`runs`: {way: {rep: result}}), paired per repetition."""
    return summary_of(
        [
            runs[numerator][rep][key] / runs[denominator][rep][key]
            for rep in runs[numerator]
            if rep in runs[denominator]
        ]
    )


def summarize_batch_eos(results, sizes):
    """{size: row} of the batch table's rows ending on an EOS (cases `batch-eos:NAME:B`). Time per token is a call's
    time over its rows' real new tokens (each row's up to and including its EOS); the ratios are paired per
    repetition, of the call times (the ways return the same tokens, checked, so they are ratios of time per token
    too). A size is left out unless every way of `BATCH_EOS_METHODS` ran on it."""
    table = {}
    for size in sizes:
        runs = {name: {} for name in BATCH_EOS_METHODS}
        for result in results:
            if result.get("phase") != "batch-eos" or "failed" in result:
                continue
            for name in BATCH_EOS_METHODS:
                if result["case"] == f"batch-eos:{name}:{size}":
                    runs[name][result["rep"]] = result
        if not all(runs.values()):
            continue
        row = {"method": {}}
        for name, measured in runs.items():
            sample = next(iter(measured.values()))
            row["method"][name] = {
                "per_token": median([m["time"] / m["generated"] for m in measured.values()]),
                "wall_per_token": median([m["wall"] / m["generated"] for m in measured.values()]),
                "generated": sample["generated"],
                # Medians: the fork's adaptive draft length reads a clock, so these vary from one repetition to the
                # next. Rounds are target forwards, drafted candidates assistant forwards (each one for every row).
                "rounds": median([m["rounds"] for m in measured.values()]),
                "proposed": median([m["proposed"] for m in measured.values()]),
                "row_ends": sample["row_ends"],
                "reps": len(measured),
                "rows": sample["rows"],
                "stable": all(m["rows"] == sample["rows"] for m in measured.values()),
            }
        greedy = runs["batched-greedy"]
        sample = next(iter(greedy.values()))
        row["tokens"] = sample["max_new_tokens"]
        row["eos"] = sample["eos_token_id"]
        row["prompt_lengths"] = sample["prompt_lengths"]
        row["row_ends"] = sample["row_ends"]  # batched greedy's: the steps every way must end its rows at
        row["generated"] = sample["generated"]
        row["reps"] = min(len(measured) for measured in runs.values())

        def paired(numerator, denominator, runs=runs):
            return paired_ratios(runs, numerator, denominator, "time")

        # time of the slower over the faster, as the table gives them: > 1 when the second one is faster
        row["assisted_over_greedy"] = paired("batched-greedy", "batched-assisted")
        row["aligned_over_greedy"] = paired("batched-greedy", "aligned-assisted")
        row["holes_over_aligned"] = paired("aligned-assisted", "batched-assisted")
        # and the other way, as the closing lines give them: < 1 when the first one is faster
        row["assisted_slowdown"] = paired("batched-assisted", "batched-greedy")
        row["holes_slowdown"] = paired("batched-assisted", "aligned-assisted")

        def same(name, runs=runs, greedy=greedy):
            """Every repetition of the way returned that repetition's batched greedy tokens, row for row."""
            return all(rep in greedy and m["rows"] == greedy[rep]["rows"] for rep, m in runs[name].items())

        m = row["method"]
        row["batched_same"] = same("batched-assisted")
        row["aligned_same"] = same("aligned-assisted")
        row["batched_diff"] = first_difference(m["batched-assisted"]["rows"], m["batched-greedy"]["rows"])
        row["aligned_diff"] = first_difference(m["aligned-assisted"]["rows"], m["batched-greedy"]["rows"])
        row["stable"] = all(values["stable"] for values in m.values())
        table[size] = row
    return table


def same_every_rep(measured):
    """Whether the runs of {rep: measurement} (one method, one batch size) returned the same texts and tokens."""
    first = next(iter(measured.values()))
    return all(m["texts"] == first["texts"] and m.get("tokens") == first.get("tokens") for m in measured.values())


def asr_decoding(stats):
    """The fork's account of one pipeline call (`assisted_decoding_stats` of each of its batches): the schedule,
    the rounds and the candidates drafted and accepted summed over the batches, and the reasons it gave for drafting
    nothing or stopping (`distinct_reasons`); None where the worker recorded none (greedy calls, the other versions).
    """
    if not stats:
        return None
    return {
        "batches": len(stats),
        "schedule": stats[0]["schedule"],
        "rounds": sum(values["num_rounds"] for values in stats),
        "drafted": sum(values["num_drafted"] for values in stats),
        "accepted": sum(values["num_accepted"] for values in stats),
        "reasons": distinct_reasons(values.get("stop_reason") for values in stats),
    }


def distinct_reasons(reasons):
    """The reasons given, once each: reasons differing only in their figures count as one, the first one's words
    kept."""
    kept = {}
    for reason in reasons:
        if reason:
            kept.setdefault(re.sub(r"\d+(\.\d+)?", "#", reason), reason)
    return list(kept.values())


def summarize_asr(results, workload=ASR_ANY_PAIR):
    """(table, probes) of the asr-batch case with one of its pairs (`workload`; a run before several pairs ran the
    whisper pair alone and did not record it). table: {batch_size: row}, the sizes in the order measured, a row for
    each size with both methods' runs: each method's median time per row and per token, its target and assistant
    forwards, its texts and the fork's account of its calls (`asr_decoding`); the ratio of assisted over greedy time
    per row, paired per repetition (median, min, max); whether each method's texts and tokens are the same in every
    repetition (`stable`) and whether assisted transcription returned greedy's texts (`same_texts`) and tokens
    (`same_tokens`, None where the worker did not record them) in every repetition. probes: {side: answer} of the
    versions asked once what they do with a batch and the assistant."""
    probes = {r["side"]: r for r in results if r.get("phase") == "asr-probe"}
    runs = {}  # batch_size -> method -> rep -> measurement
    for result in results:
        if (
            result.get("phase") == "asr"
            and "failed" not in result
            and result.get("workload", ASR_ANY_PAIR) == workload
        ):
            runs.setdefault(result["batch_size"], {}).setdefault(result["method"], {})[result["rep"]] = result
    table = {}
    for size, by_method in runs.items():
        if set(by_method) != {"greedy", "assisted"}:
            continue
        row = {"method": {}}
        for method, measured in by_method.items():
            sample = next(iter(measured.values()))
            row["method"][method] = {
                "per_row": median([m["per_row"] for m in measured.values()]),
                "per_token": median([m["per_row"] / m["max_new_tokens"] for m in measured.values()]),
                "target_calls": sample["target_calls"],
                "assistant_calls": sample["assistant_calls"],
                "texts": sample["texts"],
                "decoding_stats": asr_decoding(sample.get("decoding_stats")),
            }
        greedy, assisted = by_method["greedy"], by_method["assisted"]
        paired = [rep for rep in assisted if rep in greedy]
        row["ratio"] = summary_of([assisted[rep]["per_row"] / greedy[rep]["per_row"] for rep in paired])
        row["stable"] = all(same_every_rep(measured) for measured in by_method.values())
        row["same_texts"] = all(assisted[rep]["texts"] == greedy[rep]["texts"] for rep in paired)
        recorded = all(run.get("tokens") is not None for rep in paired for run in (assisted[rep], greedy[rep]))
        row["same_tokens"] = (
            all(assisted[rep]["tokens"] == greedy[rep]["tokens"] for rep in paired) if recorded and paired else None
        )
        row["reps"] = len(paired)
        sample = next(iter(greedy.values()))
        row["rows"], row["batch_size"], row["tokens"] = sample["rows"], size, sample["max_new_tokens"]
        table[size] = row
    return table, probes
