"""Replays acceptance patterns against the fork's draft-length schedules, without running a model per round.

A pattern is the set of positions where the draft's greedy token differs from the target's, given the target's own
prefix: a round that starts at position `s` and drafts `k` candidates accepts those before the first such position
(at most `k`), and adds the target's own token. That is exactly what assisted decoding does with greedy search, so a
schedule's rounds and draft steps on a pattern are those of a real call; only the time is modelled, a round that
drafts `k` candidates costing `1 + b * k` (a verification, and per candidate a draft step and a longer verification),
the clock the adaptive schedule reads. A pattern may come with its prompt's agreement (how many of its last positions
were compared, at how many the draft predicts what the target predicts), which the adaptive schedule is told in the
first round when that round drafts, as in a real call.

Patterns: the trained pair of the benchmark on held-out prompts (`--trained`, the models of `build/bench/trained/`),
and independent acceptances with probability p (`--iid`, with prompts that agree as often). Each schedule's simulated
time is divided by that of the best of greedy search and the constant draft lengths 1 to 24, chosen in hindsight per
pattern.

    .venv/bin/python scripts/draft_schedules.py --trained 40 --iid 0.5,0.7,0.9 --set quick_probes=2
"""

import argparse
import random
import statistics
import sys
from pathlib import Path

from transformers.generation import draft_length

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchkit, for the trained pair

MAX_CONSTANT = 24


def simulate(schedule, mismatches, new_tokens, per_candidate, prompt=None):
    """(time, rounds, draft steps) of one call; `schedule` drafts, `mismatches` decides what is accepted, `prompt`
    is (positions compared, positions agreeing) or None."""
    clock = [0.0]
    if isinstance(schedule, draft_length.AdaptiveDraftLength):
        schedule.clock = lambda: clock[0]
    position = rounds = steps = 0
    while position < new_tokens:
        drafted = schedule.num_candidates(new_tokens - position - 1)
        accepted = 0
        while accepted < drafted and position + accepted not in mismatches:
            accepted += 1
        position += accepted + 1
        if rounds == 0 and drafted > 0 and prompt is not None and schedule.judges_prompt:
            schedule.judge_prompt(*prompt)
        rounds, steps = rounds + 1, steps + drafted
        clock[0] += 1.0 + per_candidate * drafted
        schedule.update(drafted, accepted)
    return clock[0], rounds, steps


def best_in_hindsight(mismatches, new_tokens, per_candidate):
    greedy = float(new_tokens)
    constants = (
        simulate(draft_length.ConstantDraftLength(k), mismatches, new_tokens, per_candidate)[0]
        for k in range(1, MAX_CONSTANT + 1)
    )
    return min(greedy, *constants)


def trained_patterns(count, new_tokens):
    """The draft's mismatches with the target's greedy continuation of `count` held-out prompts of the trained pair,
    and the agreement of their predictions on each prompt."""
    import torch
    from benchkit import train
    from benchkit.workloads import TRAINED_PROMPT_LENGTH
    from transformers import AutoModelForCausalLM

    directory = train.ensure()
    target = AutoModelForCausalLM.from_pretrained(Path(directory) / "target").eval()
    draft = AutoModelForCausalLM.from_pretrained(Path(directory) / "draft").eval()
    prompts = torch.tensor(train.prompts(count, TRAINED_PROMPT_LENGTH))
    with torch.no_grad():
        sequences = target.generate(
            prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new_tokens, eos_token_id=None
        )
        predicted = draft(sequences).logits.argmax(-1)
        expected = target(prompts).logits.argmax(-1)
    differs = predicted[:, prompts.shape[1] - 1 : -1] != sequences[:, prompts.shape[1] :]
    positions = min(prompts.shape[1] - 1, draft_length.AdaptiveDraftLength.prompt_positions)
    agreeing = (
        predicted[:, prompts.shape[1] - 1 - positions : prompts.shape[1] - 1] == expected[:, -positions - 1 : -1]
    )
    return [
        (set(row.nonzero().flatten().tolist()), (positions, int(agree.sum())))
        for row, agree in zip(differs, agreeing, strict=True)
    ]


def iid_pattern(acceptance, new_tokens, seed):
    generator = random.Random(seed)
    mismatches = {position for position in range(new_tokens) if generator.random() >= acceptance}
    positions = draft_length.AdaptiveDraftLength.prompt_positions
    return mismatches, (positions, sum(generator.random() < acceptance for _ in range(positions)))


def make_schedule(name, overrides):
    if name == "heuristic":
        return lambda ratio: draft_length.HeuristicDraftLength(5)
    attributes = dict(overrides)
    schedule_class = type("Adaptive", (draft_length.AdaptiveDraftLength,), attributes)
    return lambda ratio: schedule_class(ratio, judges_prompt=True)


def parse_overrides(items):
    overrides = {}
    for item in items:
        name, _, value = item.partition("=")
        if not hasattr(draft_length.AdaptiveDraftLength, name):
            raise SystemExit(f"AdaptiveDraftLength has no attribute {name!r}")
        overrides[name] = type(getattr(draft_length.AdaptiveDraftLength, name))(value)
    return overrides


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trained", type=int, default=0, help="held-out prompts of the trained pair (0: none)")
    parser.add_argument("--iid", default="0.5,0.7,0.9,0.97", help="independent acceptances, comma-separated")
    parser.add_argument("--seeds", type=int, default=20, help="patterns per independent acceptance")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--costs", default="0.2,0.3", help="costs of a candidate, in verifications")
    parser.add_argument("--size-ratio", type=float, default=0.165, help="the assistant's size over the model's")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="an adaptive parameter")
    args = parser.parse_args(argv)

    families = {}
    if args.trained:
        families["trained pair"] = trained_patterns(args.trained, args.tokens)
    for acceptance in filter(None, args.iid.split(",")):
        patterns = [iid_pattern(float(acceptance), args.tokens, seed) for seed in range(args.seeds)]
        families[f"iid {acceptance}"] = patterns
    schedules = {"adaptive": make_schedule("adaptive", {}), "heuristic": make_schedule("heuristic", {})}
    if args.set:
        schedules["adaptive " + " ".join(args.set)] = make_schedule("adaptive", parse_overrides(args.set))

    costs = [float(cost) for cost in args.costs.split(",")]
    print(
        f"time over the best of greedy search and constant lengths 1-{MAX_CONSTANT}, mean (max), {args.tokens} tokens"
    )
    print("| schedule | " + " | ".join(f"{family}, b={cost}" for family in families for cost in costs) + " |")
    print("|---" * (1 + len(families) * len(costs)) + "|")
    for name, build in schedules.items():
        cells = []
        for patterns in families.values():
            for cost in costs:
                ratios = [
                    simulate(build(args.size_ratio), mismatches, args.tokens, cost, prompt)[0]
                    / best_in_hindsight(mismatches, args.tokens, cost)
                    for mismatches, prompt in patterns
                ]
                cells.append(f"{statistics.mean(ratios):.3f} ({max(ratios):.3f})")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
