"""One rank of `test_deepspeed.py`: `torchrun --nproc_per_node 2 _deepspeed_worker.py OUT_DIR`.

Builds the same tiny GPT-2 and its draft on every rank, computes each rank's greedy reference without DeepSpeed,
then puts the model and the assistant under ZeRO-3 engines of their own (every parameter partitioned) and runs
greedy and assisted `generate(synced_gpus=True)`. Rank 0 generates for one prompt and meets an EOS token early; rank
1 generates for a padded batch of two prompts, longer. Each result is written as soon as it is known, to
`OUT_DIR/<mode>-rank<rank>.json`, so that a hang in one mode leaves the other's results.
"""

import datetime
import json
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import deepspeed  # noqa: E402
import deepspeed.ops  # noqa: E402
import torch.distributed as dist  # noqa: E402
import transformers  # noqa: E402
from transformers import GPT2LMHeadModel  # noqa: E402

from support.assistants import reset_assistant  # noqa: E402
from support.tiny_models import draft_model, tiny_model  # noqa: E402

ZERO3 = {
    "train_micro_batch_size_per_gpu": 1,
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
    "fp16": {"enabled": False},
    "bf16": {"enabled": False},
}


def main(out_dir):
    warnings.simplefilter("ignore")
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    # DeepSpeed builds a shared-memory collective op with g++ at its first start on the CPU (minutes on two cores);
    # marking it incompatible keeps the gloo collectives, which is all ZeRO-3 needs here.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend="gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()

    target = tiny_model(GPT2LMHeadModel, seed=0, device="cpu")
    assistant = draft_model(target, device="cpu")
    generator = torch.Generator().manual_seed(3 + rank)
    rows, length = (1, 7) if rank == 0 else (2, 9)
    input_ids = torch.randint(5, 99, (rows, length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    if rows > 1:
        input_ids[1, :3], attention_mask[1, :3] = 0, 0
    kwargs = {"input_ids": input_ids, "attention_mask": attention_mask, "do_sample": False}
    kwargs["max_new_tokens"] = 12 if rank == 0 else 18
    with torch.no_grad():
        if rank == 0:  # an EOS token that greedy search meets early
            kwargs["eos_token_id"] = int(target.generate(**kwargs)[0, length + 3])
            kwargs["pad_token_id"] = 0
        reference = target.generate(**kwargs).tolist()

    engine, *_ = deepspeed.initialize(model=target, config=ZERO3)
    assistant_engine, *_ = deepspeed.initialize(model=assistant, config=ZERO3)
    partitioned = engine.module.transformer.h[0].attn.c_attn.weight
    for mode in ("greedy", "assisted"):
        extra = {"assistant_model": assistant_engine.module} if mode == "assisted" else {}
        if extra:
            reset_assistant(extra["assistant_model"])
        with torch.no_grad():
            tokens = engine.module.generate(**kwargs, synced_gpus=True, **extra).tolist()
        result = {"tokens": tokens, "reference": reference, "partitioned": partitioned.numel() == 0}
        (Path(out_dir) / f"{mode}-rank{rank}.json").write_text(json.dumps(result))
        dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1])
