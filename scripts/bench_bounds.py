"""What two benchmark targets could reach on this machine: prompt lookup by an oracle, rows at every draft length.

`lookup`: prompt lookup on SmolLM2-135M-Instruct (`make real-models`), the prompts of the `lookup-grounded` (batch 1,
64 new tokens) and `lookup-batch` (8 rows, left padded, 48 new tokens) cases. An oracle drafter is scored against
greedy search's tokens: in every round it proposes, among the continuations of every earlier occurrence of the last
1 to 4 tokens (prompt lookup with any n-gram size, `LOOKUP_TOKENS` tokens at most), the one the model accepts
furthest, and only the tokens it accepts: no candidate is ever rejected, and the lookup costs nothing. A round that
accepts `a` candidates costs the model's forward pass of `a + 1` new tokens on the prompt's cache, measured here (CPU
time, medians); greedy search's step is that of one token. In a batch each row keeps its own accepted candidates
(rows with holes), a round costs the pass of the batch over the most any row keeps, and the batch ends with its last
row: the draft length is capped per call, the best cap in hindsight taken.

`rows`: the trained pair of the batch table, B=4, 128 new tokens per row, no EOS: rows of their own against aligned
rows at every constant draft length of `--lengths` and the adaptive schedule, paired per repetition, interleaved,
with a second run of rows of their own as the noise floor.

    .venv/bin/python scripts/bench_bounds.py [--only lookup|rows] [--reps 5]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchkit

from benchkit import real, train, workloads  # noqa: E402
from benchkit.worker import left_padded  # noqa: E402

MAX_NGRAM = 4


def oracle_acceptance(sequence, prompt_length, num_new, max_tokens=real.LOOKUP_TOKENS):
    """For each new position, the most candidates a lookup in the tokens before it could propose and have accepted."""
    accepted, end = [], prompt_length + num_new
    for position in range(prompt_length, end):
        context, best = sequence[:position], 0
        for size in range(1, MAX_NGRAM + 1):
            tail = context[-size:]
            for start in range(len(context) - size):
                if context[start : start + size] != tail:
                    continue
                continuation = context[start + size : start + size + max_tokens]
                count = 0
                while (
                    count < min(len(continuation), end - position)
                    and continuation[count] == sequence[position + count]
                ):
                    count += 1
                best = max(best, min(count, end - position - 1))
        accepted.append(best)
    return accepted


def pass_costs(model, inputs, reps, max_tokens=real.LOOKUP_TOKENS + 1):
    """The CPU time of the model's forward pass of n new tokens per row on the prompt's cache, n = 1..max_tokens."""
    with torch.no_grad():
        cache = model(**inputs, use_cache=True).past_key_values
        costs = {}
        batch_size = inputs["input_ids"].shape[0]
        for num_tokens in range(1, max_tokens + 1):
            ids = torch.full((batch_size, num_tokens), 100)
            mask = torch.cat([inputs["attention_mask"], torch.ones_like(ids)], dim=1)
            durations = []
            for _ in range(reps):
                start = time.thread_time()
                model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
                durations.append(time.thread_time() - start)
            costs[num_tokens] = statistics.median(durations)
    return costs


def lookup_bounds(reps):
    root = real.models_dir() / real.SMOLLM2
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(root, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(root, torch_dtype=torch.float32).eval()
    (_, grounded_tokens), (_, batch_tokens) = real.PLAN["lookup-grounded"][0], real.PLAN["lookup-batch"][0]

    def greedy(inputs, max_new_tokens):
        with torch.no_grad():
            return model.generate(
                **inputs, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=real.EOS, pad_token_id=real.EOS
            )

    def new_tokens(row):
        return row.index(real.EOS) + 1 if real.EOS in row else len(row)

    print(f"## lookup, batch 1 ({len(real.GROUNDED)} grounded prompts, {grounded_tokens} new tokens at most)\n")
    print("| prompt | new tokens | oracle rounds | accepted | 2 / 3 / 5 / 11 tokens' pass over one token's | bound |")
    print("|---|---|---|---|---|---|")
    total_greedy = total_oracle = 0.0
    for name, text in real.GROUNDED.items():
        inputs = tokenizer([text], return_tensors="pt")
        sequence = greedy(inputs, grounded_tokens)[0].tolist()
        prompt_length = inputs["input_ids"].shape[1]
        num_new = new_tokens(sequence[prompt_length:])
        accepted = oracle_acceptance(sequence, prompt_length, num_new)
        costs = pass_costs(model, inputs, reps)
        rounds, position = [], 0
        while position < num_new:
            rounds.append(accepted[position])
            position += accepted[position] + 1
        greedy_time, oracle_time = num_new * costs[1], sum(costs[count + 1] for count in rounds)
        total_greedy, total_oracle = total_greedy + greedy_time, total_oracle + oracle_time
        relative = " / ".join(f"{costs[n] / costs[1]:.2f}" for n in (2, 3, 5, 11))
        print(
            f"| {name} | {num_new} | {len(rounds)} | {sum(rounds)} | {relative} | "
            f"{greedy_time / oracle_time:.2f}x |"
        )
    print(f"\noracle lookup over greedy search, batch 1, all prompts: {total_greedy / total_oracle:.2f}x speed\n")

    texts = list({**real.GROUNDED, **real.MORE_GROUNDED}.values())
    inputs = tokenizer(texts, return_tensors="pt", padding=True)
    output = greedy(inputs, batch_tokens)
    width = inputs["input_ids"].shape[1]
    rows = []
    for row, mask in zip(output.tolist(), inputs["attention_mask"].tolist(), strict=True):
        sequence = [token for token, kept in zip(row[:width], mask, strict=True) if kept] + row[width:]
        prompt_length = sum(mask)
        num_new = new_tokens(row[width:])
        rows.append((oracle_acceptance(sequence, prompt_length, num_new), num_new))
    costs = pass_costs(model, inputs, reps)
    greedy_time = (output.shape[1] - width) * costs[1]
    results = []
    for cap in range(real.LOOKUP_TOKENS + 1):
        positions, elapsed, rounds = [0] * len(rows), 0.0, 0
        while any(position < num_new for position, (_, num_new) in zip(positions, rows, strict=True)):
            kept = [
                min(accepted[position], cap) if position < num_new else 0
                for position, (accepted, num_new) in zip(positions, rows, strict=True)
            ]
            elapsed, rounds = elapsed + costs[max(kept) + 1], rounds + 1
            positions = [position + count + 1 for position, count in zip(positions, kept, strict=True)]
        results.append((greedy_time / elapsed, cap, rounds))
    best, cap, rounds = max(results)
    relative = " ".join(f"{n}:{costs[n] / costs[1]:.2f}" for n in range(2, real.LOOKUP_TOKENS + 2))
    print(f"## lookup, batch 8 ({len(texts)} grounded prompts, left padded, {batch_tokens} new tokens at most)\n")
    print(f"batch of 8, pass of n tokens per row over one token's: {relative}")
    print(
        f"oracle lookup with rows of their own over batched greedy search: {best:.2f}x speed (best cap {cap}, "
        f"{rounds} rounds against {output.shape[1] - width})\n"
    )


def trained_pair():
    """The target and the draft of the batch table's trained pair (trained and cached by `make bench`)."""
    from transformers import AutoModelForCausalLM

    directory = Path(train.ensure())
    return tuple(AutoModelForCausalLM.from_pretrained(directory / name).eval() for name in ("target", "draft"))


def rows_bounds(reps, lengths):
    target, draft = trained_pair()
    batch = left_padded(workloads.batch_prompts(4))

    def run(length, aligned):
        # aligned rows: the bench's private switch, the fork's behaviour where rows may not keep their own
        if aligned:
            target._supports_rows_with_holes = lambda cache_length: False
        else:
            target.__dict__.pop("_supports_rows_with_holes", None)
        schedule = {}
        if length:
            schedule = {"num_assistant_tokens": length, "num_assistant_tokens_schedule": "constant"}
        with torch.no_grad():
            start = time.thread_time()
            output = target.generate(
                **batch,
                assistant_model=draft,
                max_new_tokens=128,
                do_sample=False,
                pad_token_id=0,
                return_dict_in_generate=True,
                **schedule,
            )
            return time.thread_time() - start, output.assisted_decoding_stats.num_rounds

    ways = ("own", "aligned", "own again")
    times = {(length, way): [] for length in lengths for way in ways}
    rounds = {}
    run(0, False)  # warm-up
    for rep in range(reps):
        for length in lengths:
            order = ways[rep % 3 :] + ways[: rep % 3]
            for way in order:
                elapsed, rounds[length, way] = run(length, way == "aligned")
                times[length, way].append(elapsed)
    print(f"## rows, trained pair, B=4, 128 new tokens per row, no EOS ({reps} repetitions, CPU time)\n")
    print("| draft length | own ms | aligned ms | rounds own / aligned | own over aligned | own over own again |")
    print("|---|---|---|---|---|---|")

    def paired(first, second, length):
        return [a / b for a, b in zip(times[length, first], times[length, second], strict=True)]

    for length in lengths:
        own, aligned = statistics.median(times[length, "own"]), statistics.median(times[length, "aligned"])
        ratio, noise = paired("own", "aligned", length), paired("own", "own again", length)
        print(
            f"| {length or 'adaptive'} | {1000 * own:.1f} | {1000 * aligned:.1f} | "
            f"{rounds[length, 'own']} / {rounds[length, 'aligned']} | {statistics.median(ratio):.3f} "
            f"({min(ratio):.3f}-{max(ratio):.3f}) | {statistics.median(noise):.3f} |"
        )
    best_own = min(statistics.median(times[length, "own"]) for length in lengths)
    best_aligned = min(statistics.median(times[length, "aligned"]) for length in lengths)
    print(f"\nbest rows of their own over best aligned rows, any draft length: {best_own / best_aligned:.3f}\n")


def cache_peaks():
    """The most cache entries (key and value elements, all layers) the target and the draft hold at once in a batched
    call of the trained pair, rows of their own and aligned, over batched greedy search's target cache."""
    target, draft = trained_pair()
    peaks = {}

    def watch(name):
        def hook(module, args, output):
            size = sum(state.numel() for layer in output.past_key_values for state in layer)
            peaks[name] = max(peaks.get(name, 0), size)

        return hook

    target.register_forward_hook(watch("target"))
    draft.register_forward_hook(watch("draft"))
    print("## cache peaks, trained pair, 128 new tokens per row at most\n")
    print("| B | EOS | greedy's target cache | own: target / draft over it | aligned: target / draft over it |")
    print("|---|---|---|---|---|")
    for batch_size in (4, 8):
        batch = left_padded(workloads.batch_prompts(batch_size))
        for eos in (None, 32):
            cells = []
            for way in ("greedy", "own", "aligned"):
                if way == "aligned":
                    target._supports_rows_with_holes = lambda cache_length: False
                else:
                    target.__dict__.pop("_supports_rows_with_holes", None)
                peaks.clear()
                assistant = {} if way == "greedy" else {"assistant_model": draft}
                with torch.no_grad():
                    target.generate(
                        **batch,
                        max_new_tokens=128,
                        do_sample=False,
                        pad_token_id=0,
                        eos_token_id=eos,
                        **assistant,
                    )
                cells.append(dict(peaks))
            greedy = cells[0]["target"]
            own, aligned = (f"{c['target'] / greedy:.2f} / {c['draft'] / greedy:.2f}" for c in cells[1:])
            print(f"| {batch_size} | {eos if eos is not None else 'none'} | {greedy} | {own} | {aligned} |")
    print()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("lookup", "rows", "cache"))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--lengths", default="0,1,2,3,4,5,6,8,10", help="constant draft lengths, 0: adaptive")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    if args.only in (None, "lookup"):
        lookup_bounds(args.reps)
    if args.only in (None, "rows"):
        rows_bounds(args.reps, [int(length) for length in args.lengths.split(",")])
    if args.only in (None, "cache"):
        cache_peaks()


if __name__ == "__main__":
    main()
