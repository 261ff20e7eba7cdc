"""Assisted generation with `synced_gpus=True` across two real processes (torch.distributed, gloo, CPU).

Under DeepSpeed ZeRO-3 every rank has to keep calling the target's forward until all ranks are done, because each
forward gathers parameters from all ranks. The workers reproduce that constraint with a collective in every forward
pass of the target (an all_reduce of a zero tensor, added to its logits); the ranks get different prompts and
`max_new_tokens`, and in some jobs one rank meets its EOS token after a few tokens, so they finish at different
times. The test fails on a deadlock (bounded by a timeout, hung ranks are killed), on an exception in a rank, when
the ranks call the target's forward a different number of times, when a rank's output differs from its greedy
output, or when a rank meant to meet EOS early does not. Fails on stock 4.31.0 (a rank crashes on the size of its
attention mask, the other loses its peer) and on the series without the lockstep of the draft loop (the ranks call the
assistant's forward a different number of times, or block on it). Prompt lookup runs the same loop without an
assistant: a rank that is done drafts nothing (fails where its candidate budget goes negative once it is done).
"""

import dataclasses
import json
import multiprocessing
import os
import socket
import time

from reliability._helpers import timeout_scale
from reliability._synced_worker import rank_main
from reliability.test_property_equivalence import Case

WORLD_SIZE = 2
# Generous on purpose: two spawned interpreters import torch and transformers on a possibly busy 2-core machine.
JOIN_TIMEOUT_S = 150
COLLECTIVE_TIMEOUT_S = 60


def _case(prompt_length, max_new_tokens, padding=0, assistant="sibling", draft_length=3, token_types=False):
    prompt = tuple(3 + (7 * i) % 50 for i in range(prompt_length))
    token_type_ids = tuple(i % 2 for i in range(prompt_length)) if token_types else None
    return dataclasses.asdict(
        Case(prompt, padding, "left", max_new_tokens, assistant, draft_length, token_type_ids=token_type_ids)
    )


# Each job runs on both ranks at the same time (same model), with rank-specific inputs.
# "itself" is not used as assistant here: its draft forwards would go through the target's hook and be counted as
# the target's. The assistant's forward passes are collectives of their own: the ranks must run as many of them, in
# lockstep, whatever their own draft lengths, EOS or `max_length` (fails without the lockstep of the draft loop).
JOBS = [
    {
        "name": "gpt2: rank 0 stops first",
        "spec": "gpt2",
        "cases": [_case(2, 2), _case(9, 14, padding=3, token_types=True, draft_length=6)],
    },
    {
        "name": "bart: rank 1 stops first",
        "spec": "bart",
        "cases": [_case(4, 12, draft_length=1), _case(11, 3, padding=2)],
    },
    {
        "name": "llama: rank 0 stops after one token, foreign assistant",
        "spec": "llama",
        "cases": [_case(1, 1), _case(5, 20, padding=4, assistant="foreign", draft_length=10)],
    },
    {
        "name": "gpt2: rank 0 meets EOS after 2 tokens",
        "spec": "gpt2",
        "cases": [_case(6, 16, draft_length=4), _case(8, 12, padding=2)],
        "eos_after": [2, None],
    },
    {
        "name": "bart: rank 1 meets EOS after 3 tokens",
        "spec": "bart",
        "cases": [_case(5, 10), _case(7, 18, padding=1, draft_length=5)],
        "eos_after": [None, 3],
    },
    {
        # a done rank drafts nothing: its budget would be negative (a crash in the lookup, then in its peer's
        # collective)
        "name": "gpt2, prompt lookup: rank 0 stops first",
        "spec": "gpt2",
        "cases": [_case(30, 3, assistant="lookup"), _case(30, 12, padding=2, assistant="lookup", draft_length=4)],
    },
]


def _jobs_per_rank():
    return [
        [
            {
                "name": job["name"],
                "spec": job["spec"],
                "case": job["cases"][rank],
                "eos_after": job.get("eos_after", [None] * WORLD_SIZE)[rank],
            }
            for job in JOBS
        ]
        for rank in range(WORLD_SIZE)
    ]


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run_ranks(result_dir):
    context = multiprocessing.get_context("spawn")
    jobs = _jobs_per_rank()
    port = _free_port()
    processes = [
        context.Process(
            target=rank_main,
            args=(rank, WORLD_SIZE, port, jobs, str(result_dir), COLLECTIVE_TIMEOUT_S * timeout_scale()),
            daemon=True,
        )
        for rank in range(WORLD_SIZE)
    ]
    for process in processes:
        process.start()
    deadline = time.monotonic() + JOIN_TIMEOUT_S * timeout_scale()
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    hung = [rank for rank, process in enumerate(processes) if process.is_alive()]
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join()

    payloads = {}
    for rank in range(WORLD_SIZE):
        path = os.path.join(result_dir, f"rank{rank}.json")
        if os.path.exists(path):
            with open(path) as handle:
                payloads[rank] = json.load(handle)
    return hung, payloads, [process.exitcode for process in processes]


def test_synced_gpus_ranks_finishing_at_different_times(tmp_path):
    hung, payloads, exitcodes = _run_ranks(tmp_path)

    errors = {rank: payload["error"] for rank, payload in payloads.items() if "error" in payload}
    assert not hung, (
        f"ranks {hung} did not finish within {JOIN_TIMEOUT_S * timeout_scale():.0f}s (deadlock?) and were killed; "
        f"errors from the other ranks: {errors}"
    )
    assert not errors, "\n".join(f"rank {rank} failed:\n{error}" for rank, error in errors.items())
    assert sorted(payloads) == list(range(WORLD_SIZE)), f"missing rank results, exit codes {exitcodes}"

    for index, job in enumerate(JOBS):
        per_rank = [payloads[rank]["results"][index] for rank in range(WORLD_SIZE)]
        for rank, result in enumerate(per_rank):
            assert result["assisted"] == result["greedy"], (
                f"{job['name']}: rank {rank} diverged from its single-process greedy output\n"
                f"  greedy:   {result['greedy']}\n  assisted: {result['assisted']}"
            )
        for rank, eos_after in enumerate(job.get("eos_after", [None] * WORLD_SIZE)):
            if eos_after is not None:
                assert per_rank[rank]["stopped_at_eos"], f"{job['name']}: rank {rank} did not stop at its EOS"
        calls = [result["target_forward_calls"] for result in per_rank]
        assert len(set(calls)) == 1, f"{job['name']}: ranks called the target's forward {calls} times"
        assistant_calls = [result["assistant_forward_calls"] for result in per_rank]
        assert (
            len(set(assistant_calls)) == 1
        ), f"{job['name']}: ranks called the assistant's forward {assistant_calls} times"
