"""One rank of the synced_gpus test (runs in a process spawned by test_synced_gpus.py)."""

import json
import os
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist


def rank_main(rank, world_size, port, jobs, result_dir, collective_timeout_s):
    """Runs `jobs[rank]` and writes `result_dir/rank{rank}.json` (results, or the traceback of a failure)."""
    result_path = os.path.join(result_dir, f"rank{rank}.json")
    started = time.monotonic()
    timings = {"start": time.time()}
    try:
        # gloo on CPU, as the issue asks; read by support.device when the job imports the model helpers
        os.environ["DEVICE"] = "cpu"
        torch.set_num_threads(1)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=collective_timeout_s),
        )
        timings["init"] = time.monotonic() - started
        try:
            results = []
            for job in jobs[rank]:
                results.append(_run_job(job))
                timings[job["name"]] = time.monotonic() - started
        finally:
            dist.destroy_process_group()
        payload = {"rank": rank, "results": results, "timings": timings}
    except BaseException:  # noqa: B902 - everything goes back to the test
        payload = {"rank": rank, "error": traceback.format_exc(), "timings": timings}
    timings["end"] = time.time()
    with open(result_path + ".tmp", "w") as handle:
        json.dump(payload, handle)
    os.replace(result_path + ".tmp", result_path)


class _ForwardCollective:
    """Stands in for ZeRO-3's parameter gathering: each forward of the target is a collective over all ranks, so a
    rank that stops calling forward while another still needs it blocks that rank (until the gloo timeout). The
    collective is an all_reduce of a zero tensor that is added to the logits, so that the output depends on it, as
    the gathered parameters do."""

    def __init__(self, model):
        self.calls = 0
        self._handle = model.register_forward_hook(self)

    def __call__(self, module, args, output):
        self.calls += 1
        zero = torch.zeros(1)
        dist.all_reduce(zero)
        output.logits = output.logits + zero.to(output.logits.device)
        return output

    def remove(self):
        self._handle.remove()


def _eos_after(target, inputs, max_new_tokens, count):
    """The token greedy search generates as its `count`-th new token, to use as EOS, so that it stops there."""
    greedy = target.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    start = 1 if target.config.is_encoder_decoder else inputs["input_ids"].shape[1]
    new_tokens = greedy[0, start:].tolist()
    token = new_tokens[count - 1]
    assert token not in new_tokens[: count - 1], f"pick another EOS position: {new_tokens}"
    return token, greedy.shape[-1]


def _run_job(job):
    import transformers

    from reliability._helpers import SPECS_BY_NAME, get_model
    from reliability.test_property_equivalence import Case, build_inputs, pick_assistant

    transformers.logging.set_verbosity_error()
    spec = SPECS_BY_NAME[job["spec"]]
    case = Case(**{**job["case"], "prompt": tuple(job["case"]["prompt"])})
    target = get_model(spec.class_name, **spec.overrides)
    # prompt lookup drafts from the sequences alone: no assistant
    assistant = pick_assistant(spec, target, case.assistant) if case.assistant != "lookup" else None
    inputs = build_inputs(case, target)

    full_length = None
    with torch.no_grad():
        if job.get("eos_after"):
            # this rank meets EOS early and must keep joining the other rank's forward passes
            eos, full_length = _eos_after(target, inputs, case.max_new_tokens, job["eos_after"])
            inputs = dict(inputs, eos_token_id=eos, pad_token_id=eos)
        # Single-process reference: plain greedy search, no collectives.
        greedy = target.generate(**inputs, max_new_tokens=case.max_new_tokens, do_sample=False)

        if assistant is not None:
            assistant.max_assistant_tokens = case.draft_length
            candidates = {"assistant_model": assistant}
        else:
            candidates = {"prompt_lookup_num_tokens": case.draft_length}
        collective = _ForwardCollective(target)
        # every forward pass of every model is a collective under ZeRO-3, the assistant's draft steps too
        assistant_collective = _ForwardCollective(assistant) if assistant not in (target, None) else None
        try:
            assisted = target.generate(
                **inputs, max_new_tokens=case.max_new_tokens, do_sample=False, synced_gpus=True, **candidates
            )
        finally:
            collective.remove()
            if assistant_collective is not None:
                assistant_collective.remove()
    return {
        "name": job["name"],
        "greedy": greedy.tolist(),
        "assisted": assisted.tolist(),
        "target_forward_calls": collective.calls,
        "assistant_forward_calls": assistant_collective.calls if assistant_collective is not None else None,
        "stopped_at_eos": full_length is not None and greedy.shape[-1] < full_length,
    }
