"""Assisted generation under DeepSpeed ZeRO-3 itself (`deepspeed==0.19.8`), the engine `synced_gpus` exists for.

Two ranks under `torchrun`, DeepSpeed's CPU accelerator (`DS_ACCELERATOR=cpu`) and gloo collectives, every parameter
partitioned (`stage3_param_persistence_threshold: 0`): every forward pass of a model gathers its parameters from both
ranks, so the ranks must run the same forward passes. The model and the assistant each have a ZeRO-3 engine of their
own. The ranks have different prompts and lengths (rank 0: one prompt that meets an EOS token early; rank 1: a padded
batch of two, longer); `_deepspeed_worker.py` runs greedy and assisted `generate(synced_gpus=True)`.

Contract: on every rank, equal to greedy generation of the unpartitioned model, within a timeout (a hang fails).
Stock 4.31.0 runs greedy search, refuses rank 1's batch, and hangs in assisted generation when the ranks draft
different numbers of tokens. DeepSpeed's shared-memory collective op, which it builds with g++ at its first start on
the CPU (minutes), is marked incompatible in the worker: gloo is all this needs. Skipped where deepspeed is not
installed (`requirements-integration.txt`, with `DS_BUILD_OPS=0`).
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("deepspeed", reason="deepspeed is not installed (requirements-integration.txt)")

WORKER = Path(__file__).resolve().parent / "_deepspeed_worker.py"
TIMEOUT_S = 300
RANKS = 2


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def zero3_run(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("zero3")
    env = dict(os.environ, DS_ACCELERATOR="cpu", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={RANKS}",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        str(WORKER),
        str(out_dir),
    ]
    try:
        completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        log = completed.stdout + completed.stderr
    except subprocess.TimeoutExpired as expired:
        log = f"timed out after {TIMEOUT_S} s\n{expired.stdout or ''}{expired.stderr or ''}"
    return out_dir, log


@pytest.mark.parametrize("mode", ["greedy", "assisted"])
def test_zero3_synced_gpus(zero3_run, mode):
    out_dir, log = zero3_run
    for rank in range(RANKS):
        path = out_dir / f"{mode}-rank{rank}.json"
        assert path.exists(), f"rank {rank} has no {mode} result (crashed or hung):\n{log[-3000:]}"
        result = json.loads(path.read_text())
        assert result["partitioned"], "the parameters are not partitioned: the test proves nothing"
        assert result["tokens"] == result["reference"], (
            f"rank {rank}, {mode}: other tokens than unpartitioned greedy search\n"
            f"  greedy:   {result['reference']}\n  {mode}: {result['tokens']}"
        )
