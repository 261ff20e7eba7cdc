"""How long a full run would take, from the measurements of a QUICK run (`--estimate-from`, and printed at the end
of every QUICK run): a full run has to fit in 40 minutes on two cores.

Every measured call of the quick run is scaled to the full run: by the ratio of new tokens after its first round (the
prompt's round, encoders included, costs what it costs whatever the number of tokens; time per token taken as constant
after it), and, for the paired repetitions, by the ratio of repetitions of its group (the full run's minimum: optional
repetitions only start within `FULL["budget_s"]`, which the minimum repetitions already exceed). What no call measures
(starting the workers, building the models) is taken as it was. Pure Python: no torch.
"""

from . import real
from .measure import FULL, QUICK
from .workloads import ASR_ANY_PAIR, ASR_WORKLOADS, CASES, greedy_name


def reference_cases(cases):
    """{name of a reference run in a quick run: the first case measured against it}."""
    found = {}
    for case in cases:
        if CASES[case].kind == "generate":
            found.setdefault(greedy_name(CASES[case].greedy_key(True)), case)
    return found


def token_scale(result, ratio):
    """How much longer a call gets with `ratio` times the new tokens: its first round (`first_round`, the share of
    the call's time to its first token) stays, the rest grows by `ratio`; the whole of it for calls that did not time
    their first round."""
    first, whole = result.get("first_round"), result.get("time")
    if not first or not whole or not 0 < first <= whole:
        return ratio
    share = first / whole
    return share + (1 - share) * ratio


def full_seconds(results, meta, clock="wall", full=FULL, quick=QUICK):
    """({part: seconds of a full run}, seconds in all): a part is a case (with its reference runs), or one of
    "warm-up", "counted", "growth", "batches", "start-up and the rest"."""
    references = reference_cases(meta["cases"])
    parts = {}
    measured = 0.0
    for result in results:
        seconds = result.get(clock if clock == "wall" else "cpu")
        if seconds is None:
            continue
        measured += seconds
        phase = result["phase"]
        if phase in ("ab", "ops"):
            case = result.get("reference_for") or references.get(result["case"], result["case"])
            scale = token_scale(result, CASES[case].tokens / CASES[case].quick_tokens)
            if phase == "ab":
                group = CASES[case].group
                scale *= full[f"{group}_reps"][0] / quick[f"{group}_reps"][0]
                part = case
            else:
                part = "counted"
        elif phase == "warmup":
            part, scale = "warm-up", full["warmup_tokens"] / quick["warmup_tokens"]
        elif phase == "growth":
            part, scale = "growth", max(full["growth"]) / max(quick["growth"])
        elif phase == "batch":
            part = "batches"
            scale = full["batch_tokens"] * full["batch_reps"] / (quick["batch_tokens"] * quick["batch_reps"])
        elif phase == "batch-eos":
            # the rows ending on an EOS: the same tokens in both runs, their rows end where they end
            part = "batches"
            scale = full["batch_eos_tokens"] * full["batch_reps"] / (quick["batch_eos_tokens"] * quick["batch_reps"])
        elif phase.startswith("batch"):
            part, scale = "batches", full["warmup_tokens"] / quick["warmup_tokens"]
        elif phase == "asr":
            # Every batch size transcribes the same recordings in both runs: a pair's calls scale alike, by its own
            # tokens and repetitions (a run before several pairs ran the whisper pair alone).
            part = "asr-batch"
            way = ASR_WORKLOADS[result.get("workload", ASR_ANY_PAIR)]
            scale = way.new_tokens(False) / way.new_tokens(True) * full[way.reps] / quick[way.reps]
        elif phase.startswith("asr"):
            part, scale = "asr-batch", 1.0
        elif phase.startswith("real"):
            part, scale = "real checkpoints", real.full_scale(result)
        else:
            part, scale = phase, 1.0
        parts[part] = parts.get(part, 0.0) + seconds * scale
    if clock == "wall":
        parts["start-up and the rest"] = max(meta["wall"] - measured, 0.0)
    return parts, sum(parts.values())


def estimate_lines(results, meta):
    """The estimate as the driver prints it: the total on the wall clock and in CPU time, then the parts."""
    if not meta.get("quick"):
        return []
    wall_parts, wall = full_seconds(results, meta, "wall")
    _, cpu = full_seconds(results, meta, "cpu")
    lines = [
        f"estimated full run: {wall / 60:.1f} minutes on the wall clock of this machine as loaded now "
        f"({cpu / 60:.1f} minutes of CPU time in the measured calls), from this QUICK run:"
    ]
    for part, seconds in sorted(wall_parts.items(), key=lambda item: -item[1]):
        lines.append(f"  {part:<28} {seconds / 60:5.1f} min")
    return lines
