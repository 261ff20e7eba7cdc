"""How often assisted generation departs from greedy generation in low precision, per supported class.

The suite compares assisted and greedy generation in float32, where they must be equal token for token. In bfloat16
and float16 they need not be: assisted generation verifies several candidate tokens in one forward pass, whose
matrix products reduce in another order (other kernels, other tile shapes) than greedy's one-token passes, and low
precision rounds the two differently, so a close call between two tokens can go the other way. This script measures
how often that happens; it asserts nothing.

For every supported class of `tests/support/expectations.py` (the suite's tiny models, `tests/support/tiny_models.py`)
and every dtype, the target and the suite's draft assistant (the target without its last layers) are built in float32
as in the suite, then cast. Each prompt (`--prompts` random prompts of the plain scenario, plus the class's scenario
with an extra input: padding, token types or an encoder mask) is generated greedily and then assisted, by the target
itself (`self`: every candidate is accepted) and by the draft (`draft`: some are rejected). A run "differs" when the
sequences are not equal; `first_step` is the first generated position where they part. float32 runs on the same
device are the control: they must not differ.

    python scripts/cuda_precision.py --limit 3 --jobs 0                   # a few classes, in-process (CPU test)
    DEVICE=cuda python scripts/cuda_precision.py --jobs 8 --csv out.csv --markdown out.md --deadline 150

The CSV (one row per class, dtype, prompt and assistant) is rewritten after every class, so a run stopped by its
deadline or killed still leaves what it measured; tasks not started by the deadline are listed as not run.
"""

import argparse
import copy
import csv
import multiprocessing
import os
import re
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

DTYPES = ("bfloat16", "float16", "float32")
ASSISTANTS = ("self", "draft")
FIELDS = [
    "class",
    "dtype",
    "prompt",
    "assistant",
    "status",
    "first_step",
    "new_tokens",
    "differing_tokens",
    "greedy_distinct_tokens",
    "error",
]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default=",".join(DTYPES), help=f"comma-separated, in order (default {DTYPES})")
    parser.add_argument("--assistants", default=",".join(ASSISTANTS), help="self, draft (default both)")
    parser.add_argument("--prompts", type=int, default=3, help="random plain prompts per class (default 3)")
    parser.add_argument("--limit", type=int, help="only the first N supported classes (sorted by name)")
    parser.add_argument("--classes", help="only the supported classes whose name matches this regular expression")
    parser.add_argument("--jobs", type=int, default=0, help="worker processes (0: run in this process)")
    parser.add_argument("--deadline", type=float, help="seconds from the start after which no task starts")
    parser.add_argument("--csv", type=Path, default=REPO / "build" / "precision" / "precision.csv")
    parser.add_argument("--markdown", type=Path, help="write the per-class table here")
    args = parser.parse_args(argv)
    args.dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    args.assistants = [a.strip() for a in args.assistants.split(",") if a.strip()]
    for dtype in args.dtypes:
        if dtype not in DTYPES:
            parser.error(f"unknown dtype {dtype!r} (choose from {', '.join(DTYPES)})")
    for assistant in args.assistants:
        if assistant not in ASSISTANTS:
            parser.error(f"unknown assistant {assistant!r} (choose from {', '.join(ASSISTANTS)})")
    if args.prompts < 1:
        parser.error("--prompts must be at least 1")
    return args


def supported_classes(limit=None, pattern=None):
    from models import harness

    from support.expectations import EXPECTATIONS

    names = [
        name
        for name in sorted(harness.classes())
        if EXPECTATIONS.get(name) is not None
        and EXPECTATIONS[name].supported
        and not harness.missing_requirement(name)
    ]
    if pattern:
        names = [name for name in names if re.search(pattern, name)]
    return names[:limit] if limit else names


def _prompts(model, name, count, dtype):
    """(label, generate() kwargs): `count` random plain prompts (the first one is the suite's), then the class's
    scenario with an extra input. Floating-point inputs (features, pixels) are cast to the model's dtype."""
    import torch
    from models import harness

    from support import tiny_models

    base = tiny_models.generation_inputs(model, "plain")
    vocab = tiny_models._vocab_size(model.config)
    prompts = [("plain0", base)]
    for index in range(1, count):
        generator = torch.Generator().manual_seed(1000 + index)
        kwargs = dict(base)
        for key, value in base.items():
            if not torch.is_tensor(value):
                continue
            if key == "input_ids":
                fresh = torch.randint(tiny_models.FIRST_PLAIN_TOKEN, vocab, value.shape, generator=generator)
                kwargs[key] = fresh.to(value.device)
            elif value.dtype.is_floating_point:
                fresh = torch.randn(value.shape, generator=generator).to(value.device)
                if key == "flattened_patches":  # the first two columns are the patches' row and column numbers
                    fresh[..., :2] = value[..., :2]
                kwargs[key] = fresh
        prompts.append((f"plain{index}", kwargs))
    for scenario in harness.plain_input_sets(name)[1:]:
        prompts.append((scenario, tiny_models.generation_inputs(model, scenario)))
    cast = []
    for label, kwargs in prompts:
        kwargs = {
            key: value.to(dtype) if torch.is_tensor(value) and value.dtype.is_floating_point else value
            for key, value in kwargs.items()
        }
        cast.append((label, kwargs))
    return cast


def _sequences(model, kwargs, assistant=None):
    import torch

    from support.assistants import reset_assistant
    from support.tiny_models import generate

    kwargs = dict(kwargs)
    if assistant is not None:
        reset_assistant(assistant)
        kwargs["assistant_model"] = assistant
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        output = generate(model, **kwargs)
    sequences = output if torch.is_tensor(output) else output.sequences
    return sequences.detach().cpu()


def _continuation(sequences):
    from support.tiny_models import MAX_NEW_TOKENS

    return sequences[..., -MAX_NEW_TOKENS:].flatten().tolist()


def compare(greedy, assisted):
    """(status, first differing step or None, number of differing tokens, tokens compared) of two continuations."""
    length = max(len(greedy), len(assisted))
    differing = [i for i in range(length) if i >= len(greedy) or i >= len(assisted) or greedy[i] != assisted[i]]
    if not differing:
        return "same", None, 0, length
    return "differs", differing[0], len(differing), length


def run_task(task):
    """All the runs of one (class, dtype): a list of CSV rows. A task started after the deadline returns None."""
    name, dtype_name, prompts, assistants, deadline = task
    if deadline is not None and time.time() > deadline:
        return name, dtype_name, None, 0.0
    start = time.time()
    import torch
    import transformers
    from models import harness

    from support.tiny_models import draft_model, tiny_model

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    dtype = getattr(torch, dtype_name)
    rows = []

    def row(prompt, assistant, status, first=None, differing=0, compared=0, distinct="", error=""):
        rows.append(
            {
                "class": name,
                "dtype": dtype_name,
                "prompt": prompt,
                "assistant": assistant,
                "status": status,
                "first_step": "" if first is None else first,
                "new_tokens": compared,
                "differing_tokens": differing,
                "greedy_distinct_tokens": distinct,
                "error": error,
            }
        )

    try:
        target32 = tiny_model(harness.classes()[name], seed=0)
        models = {"self": None, "draft": draft_model(target32) if "draft" in assistants else None}
        target = copy.deepcopy(target32).to(dtype) if dtype != torch.float32 else target32
        if models["draft"] is not None and dtype != torch.float32:
            models["draft"] = models["draft"].to(dtype)
        models["self"] = target
        inputs = _prompts(target, name, prompts, dtype)
    except Exception as error:  # the class cannot be built or prompted in this dtype: reported, not raised
        for assistant in assistants:
            row("-", assistant, "error", error=f"build: {type(error).__name__}: {str(error)[:200]}")
        return name, dtype_name, rows, time.time() - start

    for label, kwargs in inputs:
        try:
            greedy = _continuation(_sequences(target, kwargs))
        except Exception as error:
            for assistant in assistants:
                row(label, assistant, "error", error=f"greedy: {type(error).__name__}: {str(error)[:200]}")
            continue
        for assistant in assistants:
            try:
                assisted = _continuation(_sequences(target, kwargs, models[assistant]))
            except Exception as error:
                row(label, assistant, "error", error=f"assisted: {type(error).__name__}: {str(error)[:200]}")
                continue
            status, first, differing, compared = compare(greedy, assisted)
            row(label, assistant, status, first, differing, compared, len(set(greedy)))
    return name, dtype_name, rows, time.time() - start


def _worker_init():
    import torch

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")


def write_csv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    order = {dtype: index for index, dtype in enumerate(DTYPES)}
    rows = sorted(rows, key=lambda r: (r["class"], order.get(r["dtype"], 99), r["prompt"], r["assistant"]))
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def summarize(rows, not_run, dtypes, meta):
    """Markdown: totals per dtype, then one line per class with any departure or error (every class when few)."""
    by_key = defaultdict(list)
    for r in rows:
        by_key[(r["class"], r["dtype"])].append(r)
    lines = [
        f"Assisted vs greedy generation by dtype: {meta}.",
        "",
        "| dtype | classes measured | classes with a departure | runs that differ | runs | errors "
        "| earliest first step |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for dtype in dtypes:
        keys = [key for key in by_key if key[1] == dtype]
        runs = [r for key in keys for r in by_key[key]]
        differ = [r for r in runs if r["status"] == "differs"]
        errors = [r for r in runs if r["status"] == "error"]
        classes_differ = {r["class"] for r in differ}
        first = min((int(r["first_step"]) for r in differ), default=None)
        lines.append(
            f"| {dtype} | {len(keys)} | {len(classes_differ)} | {len(differ)} | {len(runs)} | {len(errors)} | "
            f"{'-' if first is None else first} |"
        )
    lines += [
        "",
        "Per class and dtype (runs that differ / runs; `first`: first differing generated position, per run that "
        "differs; `self`/`draft`: the assistant):",
        "",
        "| class | " + " | ".join(dtypes) + " |",
        "| --- | " + " | ".join("---" for _ in dtypes) + " |",
    ]
    classes = sorted({key[0] for key in by_key})
    for name in classes:
        cells = []
        for dtype in dtypes:
            runs = by_key.get((name, dtype))
            if runs is None:
                cells.append("not run" if (name, dtype) in not_run else "-")
                continue
            differ = [r for r in runs if r["status"] == "differs"]
            errors = [r for r in runs if r["status"] == "error"]
            cell = f"{len(differ)}/{len(runs)}"
            if differ:
                detail = ", ".join(f"{r['assistant']}@{r['prompt']}:{r['first_step']}" for r in differ)
                cell += f" (first {detail})"
            if errors:
                cell += f", {len(errors)} errors ({errors[0]['error'][:80]})"
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if not_run:
        lines += ["", f"Not run (deadline): {len(not_run)} class-dtype pairs."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    start = time.time()
    deadline = start + args.deadline if args.deadline is not None else None
    from support.device import DEVICE

    names = supported_classes(args.limit, args.classes)
    if not names:
        raise SystemExit("cuda_precision: no supported class selected")
    tasks = [(name, dtype, args.prompts, args.assistants, deadline) for dtype in args.dtypes for name in names]
    rows, not_run, done = [], set(), 0
    meta = (
        f"device {DEVICE}, {len(names)} supported classes, {args.prompts} plain prompts + the extra-input scenario, "
        f"assistants {', '.join(args.assistants)}"
    )
    print(f"cuda_precision: {len(tasks)} tasks ({meta}), {args.jobs or 'no'} worker processes", file=sys.stderr)

    def record(result):
        nonlocal done
        name, dtype, task_rows, seconds = result
        if task_rows is None:
            not_run.add((name, dtype))
            return
        rows.extend(task_rows)
        done += 1
        differ = sum(r["status"] == "differs" for r in task_rows)
        errors = sum(r["status"] == "error" for r in task_rows)
        print(
            f"[{time.time() - start:6.1f}s] {name} {dtype}: {differ}/{len(task_rows)} differ"
            + (f", {errors} errors" if errors else "")
            + f" ({seconds:.1f}s)",
            file=sys.stderr,
            flush=True,
        )
        write_csv(args.csv, rows)

    if args.jobs <= 0:
        for task in tasks:
            record(run_task(task))
    else:
        context = multiprocessing.get_context("spawn")
        pool = context.Pool(args.jobs, initializer=_worker_init)
        results = pool.imap_unordered(run_task, tasks)
        pending = {(task[0], task[1]) for task in tasks}
        try:
            while pending:
                timeout = None if deadline is None else max(deadline - time.time(), 0) + 30
                try:
                    result = results.next(timeout=timeout)
                except StopIteration:
                    break
                except multiprocessing.TimeoutError:
                    print("cuda_precision: deadline passed with tasks still running; stopping them", file=sys.stderr)
                    break
                pending.discard((result[0], result[1]))
                record(result)
        finally:
            pool.terminate()
            pool.join()
        not_run |= pending
    write_csv(args.csv, rows)
    summary = summarize(rows, not_run, args.dtypes, meta)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(summary)
    totals = []
    for dtype in args.dtypes:
        runs = [r for r in rows if r["dtype"] == dtype]
        differ = [r for r in runs if r["status"] == "differs"]
        errors = sum(r["status"] == "error" for r in runs)
        totals.append(
            f"{dtype} {len(differ)}/{len(runs)} runs differ in {len({r['class'] for r in differ})} classes"
            + (f" ({errors} errors)" if errors else "")
        )
    print(
        f"precision: {'; '.join(totals)}; {done}/{len(tasks)} tasks in {time.time() - start:.0f}s"
        + (f", {len(not_run)} not run (deadline)" if not_run else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
