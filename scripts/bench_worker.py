"""Benchmark worker: times generation with the transformers its interpreter imports.

Started by `scripts/bench.py`, once per side (stock 4.31.0, the upstream releases it is compared with, the patched
fork), so that no two transformers versions ever share a process. It reads
one JSON command per line on stdin and answers one JSON line per command on its original stdout (everything the
libraries print goes to stderr). Commands:

    {"op": "info"}
    {"op": "load", "workloads": [NAME, ...], "trained": {"dir": PATH, "prompt": [BYTE, ...]}}
    {"op": "costs", "workload": NAME}   (time of one cached forward of the target and of the assistant)
    {"op": "run", "workload": NAME, "method": "greedy" | "assisted", "max_new_tokens": N, "marks": [...]}
        (with "count_ops": true, the answer also counts the tensor operations run outside the model forwards:
        "ops_outside", "ops_by_name"; such a run is slowed down by the counting and is not a timing)
    {"op": "batch", "workload": NAME, "method": "greedy" | "assisted", "max_new_tokens": N,
     "prompts": [[TOKEN, ...], ...], "separate": BOOL}
        (the prompts as one left-padded batch with its attention mask, or with "separate" one call per prompt;
        the answer sums the calls and carries every row's new tokens)

Models are built from config classes with random weights under a fixed seed, so every side builds bit-identical
models (the answer carries a weight checksum to prove it); the trained pair is loaded with `from_pretrained` from the
directory `scripts/bench_train.py` saved it to. A run that raises (a release that refuses or fails a workload) is
answered with the error instead of measurements; the driver reports it and goes on.

Times are taken on one clock: on CPU the CPU time of the computing thread (`time.thread_time`; torch runs one
thread), on CUDA the wall clock. Model forwards are timed
with forward pre/post hooks on the target and the assistant (outermost call only), and every round of the decoding
loop is timestamped by a stopping criterion that never stops anything (the loops call the stopping criteria once per
round: once per token for greedy, once per verification for assisted).
"""

import argparse
import contextlib
import copy
import hashlib
import json
import os
import sys
import time

import torch

PROMPT_LENGTH = 16
MAX_POSITIONS = 2048  # prompt + 1024 new tokens + the largest candidate block fit comfortably
INITIAL_DRAFT_LENGTH = 5  # 4.31's fixed start, 4.35+'s default
PERTURBATION = float(os.environ.get("BENCH_PERTURBATION", "0.15"))  # noise scale of the partial-acceptance assistant


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads on CPU (default 1)")
    parser.add_argument(
        "--clock",
        default="auto",
        choices=["auto", "cpu", "wall"],
        help="CPU time of the (single) computing thread, or wall clock (auto: cpu on CPU, wall on CUDA)",
    )
    return parser.parse_args()


class Clock:
    """Accumulates the time spent inside model forwards and timestamps the rounds of the decoding loop."""

    def __init__(self, device, clock):
        self.device = device
        # With one torch thread every forward runs on this thread, and its CPU time is the time the work takes on a
        # core of its own: unlike wall clock, it does not count the time the scheduler gives to other processes.
        self.now = time.thread_time if clock == "cpu" else time.perf_counter
        self.depth = 0
        self.started = 0.0
        self.forward_time = 0.0
        self.forward_calls = 0
        self.calls_by_module = {}  # id(module) -> outermost forward calls
        self.rounds = []  # (wall time, sequence length, forward calls so far, forward time so far)

    def sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()

    def reset(self):
        self.depth = 0
        self.forward_time = 0.0
        self.forward_calls = 0
        self.calls_by_module = {}
        self.rounds = []

    def pre_hook(self, module, args):
        if self.depth == 0:
            self.sync()
            self.started = self.now()
        self.depth += 1

    def post_hook(self, module, args, output):
        self.depth -= 1
        if self.depth == 0:
            self.sync()
            self.forward_time += self.now() - self.started
            self.forward_calls += 1
            self.calls_by_module[id(module)] = self.calls_by_module.get(id(module), 0) + 1

    def attach(self, modules):
        seen = set()
        for module in modules:
            if module is None or id(module) in seen:
                continue
            seen.add(id(module))
            module.register_forward_pre_hook(self.pre_hook)
            module.register_forward_hook(self.post_hook)

    def round_end(self, length):
        self.sync()
        entry = (self.now(), length, self.forward_calls, self.forward_time)
        if self.rounds and self.rounds[-1][2] == self.forward_calls and self.rounds[-1][1] < length:
            # No forward since the last call: the same round, checked after each of its accepted tokens (the series
            # checks the stopping criteria after every accepted candidate, as greedy search does after every token).
            # The round ends at its last call.
            self.rounds[-1] = entry
        else:
            self.rounds.append(entry)


def build_workloads(device, dtype, trained=None):
    """Name -> factory returning (target, assistant, prompt kwargs). Factories are called lazily."""
    import transformers
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, T5Config, T5ForConditionalGeneration

    transformers.logging.set_verbosity_error()

    def finish(model):
        return model.to(device=device, dtype=dtype).eval()

    def gpt2_target():
        # GPT-2 small: 12 layers, 768 wide, 12 heads, 50257-token vocabulary (~124M parameters with 1024 positions).
        torch.manual_seed(0)
        return GPT2LMHeadModel(GPT2Config(n_positions=MAX_POSITIONS))

    def gpt2_draft():
        # A small draft with the same vocabulary: 2 layers, 256 wide (~14M parameters, most of them the embedding).
        torch.manual_seed(1)
        return GPT2LMHeadModel(GPT2Config(n_positions=MAX_POSITIONS, n_layer=2, n_embd=256, n_head=4))

    def perturbed(model, scale, seed):
        # A copy of the target with Gaussian noise on every weight: it agrees with the target on part of the tokens.
        copied = copy.deepcopy(model)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for parameter in copied.parameters():
                noise = torch.randn(parameter.shape, generator=generator, dtype=torch.float32)
                noise = noise.to(device=parameter.device, dtype=parameter.dtype)
                parameter.add_(noise * (parameter.float().std() * scale).to(parameter.dtype))
        return copied

    def decoder_prompt(vocab_size):
        generator = torch.Generator().manual_seed(2)
        input_ids = torch.randint(0, vocab_size, (1, PROMPT_LENGTH), generator=generator).to(device)
        return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}

    cache = {}

    def target():
        if "gpt2" not in cache:
            cache["gpt2"] = finish(gpt2_target())
        return cache["gpt2"]

    def draft():
        model = target()
        return model, finish(gpt2_draft()), decoder_prompt(model.config.vocab_size)

    def self_assist():
        model = target()
        return model, model, decoder_prompt(model.config.vocab_size)

    def partial():
        model = target()
        return model, finish(perturbed(model, PERTURBATION, seed=3)), decoder_prompt(model.config.vocab_size)

    def encoder_decoder():
        # T5-small-like target (6+6 layers, 512 wide, ~60M parameters) and a 2+2-layer, 256-wide draft.
        torch.manual_seed(4)
        model = finish(T5ForConditionalGeneration(T5Config(decoder_start_token_id=0)))
        torch.manual_seed(5)
        small = T5Config(d_model=256, d_ff=1024, d_kv=32, num_layers=2, num_heads=8, decoder_start_token_id=0)
        assistant = finish(T5ForConditionalGeneration(small))
        return model, assistant, decoder_prompt(model.config.vocab_size)

    def loop():
        # Models so small that the forwards cost about as much as the Python around them: the loop's own cost per
        # round shows here as it would next to the fast forwards of an accelerator.
        torch.manual_seed(6)
        model = finish(
            GPT2LMHeadModel(GPT2Config(n_positions=MAX_POSITIONS, n_layer=2, n_embd=64, n_head=2, vocab_size=1000))
        )
        torch.manual_seed(7)
        small = GPT2Config(n_positions=MAX_POSITIONS, n_layer=1, n_embd=32, n_head=2, vocab_size=1000)
        return model, finish(GPT2LMHeadModel(small)), decoder_prompt(model.config.vocab_size)

    def trained_pair():
        # The byte-level pair of scripts/bench_train.py: a target and a draft distilled from its greedy outputs.
        if not trained:
            raise ValueError("the trained workload needs the directory of the trained models")
        model = finish(AutoModelForCausalLM.from_pretrained(os.path.join(trained["dir"], "target")))
        assistant = finish(AutoModelForCausalLM.from_pretrained(os.path.join(trained["dir"], "draft")))
        input_ids = torch.tensor([trained["prompt"]], dtype=torch.long, device=device)
        return model, assistant, {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}

    return {
        "draft": draft,
        "self": self_assist,
        "partial": partial,
        "encdec": encoder_decoder,
        "loop": loop,
        "trained": trained_pair,
    }


def checksum(*models):
    digest = hashlib.sha256()
    seen = set()
    for model in models:
        if id(model) in seen:
            continue
        seen.add(id(model))
        for name, tensor in sorted(model.state_dict().items()):
            digest.update(name.encode())
            digest.update(f"{tensor.float().sum().item():.6e}".encode())
    return digest.hexdigest()[:16]


# Calls that make the host wait for the device (on a GPU, a stall of the pipeline): reading a value, a length or a
# bool out of a tensor, and indexing with a boolean mask (its result's size depends on the values).
SYNC_FUNCTIONS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "cpu"})


def is_sync(name, args):
    """Whether the torch call `name` with `args` waits for the device."""
    if name in SYNC_FUNCTIONS:
        return True
    if name == "__getitem__" and len(args) > 1:
        indices = args[1] if isinstance(args[1], tuple) else (args[1],)
        return any(torch.is_tensor(index) and index.dtype == torch.bool for index in indices)
    return False


class OpCounter:
    """Counts the torch operations called outside the model forwards (the `Clock`'s depth is 0 there), by name, and
    among them the host-device synchronizations (`is_sync`).

    Through `torch.overrides.TorchFunctionMode`, which sees every torch function and tensor method called from
    Python. Attribute reads (`.shape`, `.device`: `__get__`) are not operations and are left out.
    """

    def __init__(self, clock):
        from torch.overrides import TorchFunctionMode

        counts = self.counts = {}
        syncs = self.syncs = {}

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                if clock.depth == 0:
                    name = getattr(func, "__name__", str(func))
                    if name != "__get__":
                        counts[name] = counts.get(name, 0) + 1
                        if is_sync(name, args):
                            syncs[name] = syncs.get(name, 0) + 1
                return func(*args, **(kwargs or {}))

        self.mode = Mode()


class Worker:
    def __init__(self, args):
        self.device = args.device
        self.dtype = getattr(torch, args.dtype)
        if self.device == "cpu":
            torch.set_num_threads(args.threads)
        self.clock_name = args.clock if args.clock != "auto" else ("wall" if self.device == "cuda" else "cpu")
        self.clock = Clock(self.device, self.clock_name)
        self.factories = None
        self.loaded = {}
        self.trained = None

    def info(self):
        import transformers

        return {
            "transformers": transformers.__version__,
            "transformers_file": os.path.dirname(os.path.abspath(transformers.__file__)),
            "torch": torch.__version__,
            "python": sys.version.split()[0],
            "threads": torch.get_num_threads(),
            "device": self.device,
            "device_name": torch.cuda.get_device_name(0) if self.device == "cuda" else "cpu",
            "dtype": str(self.dtype).replace("torch.", ""),
            "pid": os.getpid(),
            "clock": self.clock_name,
        }

    def workload(self, name):
        if name not in self.loaded:
            if self.factories is None:
                self.factories = build_workloads(self.device, self.dtype, self.trained)
            target, assistant, prompt = self.factories[name]()
            self.clock.attach([target, assistant])
            for model in (target, assistant):
                if model.config.is_encoder_decoder:
                    self.clock.attach([model.get_encoder()])
            self.loaded[name] = (target, assistant, prompt, checksum(target, assistant))
        return self.loaded[name]

    def forward_costs(self, workload, calls=50):
        """Time of one cached single-token forward of the target and of the assistant, after the prompt."""
        target, assistant, prompt, _ = self.workload(workload)
        costs = {}
        with torch.no_grad():
            for name, model in (("target", target), ("assistant", assistant)):
                if model.config.is_encoder_decoder:
                    continue
                past = model(**prompt, use_cache=True).past_key_values
                token = prompt["input_ids"][:, -1:]
                mask = torch.ones_like(prompt["input_ids"][:, :1]).repeat(1, prompt["input_ids"].shape[1] + 1)
                for _ in range(5):
                    model(input_ids=token, attention_mask=mask, past_key_values=past, use_cache=True)
                self.clock.sync()
                start = self.clock.now()
                for _ in range(calls):
                    model(input_ids=token, attention_mask=mask, past_key_values=past, use_cache=True)
                self.clock.sync()
                costs[name] = (self.clock.now() - start) / calls
        return {"forward_costs": costs}

    def run(self, workload, method, max_new_tokens, marks=(), prompt=None, keep_rows=False, count_ops=False):
        """One timed `generate` call on the workload's prompt, or on `prompt` (input_ids and attention_mask); with
        `count_ops`, the operations run outside the model forwards are counted (and the timings are not worth
        keeping)."""
        from transformers import GenerationConfig, MaxLengthCriteria, StoppingCriteriaList

        clock = self.clock
        target, assistant, workload_prompt, weights = self.workload(workload)
        prompt = workload_prompt if prompt is None else prompt

        class RoundEnd(MaxLengthCriteria):
            """Timestamps the rounds; a length limit that is never reached, so that the loops call it as they call the
            length limits (the fork calls other criteria after every accepted token, not only after the round)."""

            def __init__(self):
                super().__init__(max_length=2**31)

            def __call__(self, input_ids, scores, **kwargs):
                clock.round_end(input_ids.shape[-1])
                return False

        config = GenerationConfig(
            max_new_tokens=max_new_tokens,
            min_new_tokens=0,
            do_sample=False,
            num_beams=1,
            eos_token_id=None,  # random weights: never stop early, every run generates exactly max_new_tokens
            pad_token_id=0,
            decoder_start_token_id=0 if target.config.is_encoder_decoder else None,
            use_cache=True,
        )
        extra = {}
        if method == "assisted":
            # Every version runs its own draft-length heuristic, from the same start (5 candidates), reset before every
            # call: 4.31 keeps it on the assistant (`max_assistant_tokens`) across calls, 4.35+ start each call from
            # the assistant's `generation_config.num_assistant_tokens` (an `assistant.num_assistant_tokens` attribute
            # would override it).
            for name in ("max_assistant_tokens", "num_assistant_tokens"):
                if name in assistant.__dict__:
                    delattr(assistant, name)
            if hasattr(assistant.generation_config, "num_assistant_tokens"):
                assistant.generation_config.num_assistant_tokens = INITIAL_DRAFT_LENGTH
                assistant.generation_config.num_assistant_tokens_schedule = "heuristic"
            extra["assistant_model"] = assistant
        start_length = 1 if target.config.is_encoder_decoder else prompt["input_ids"].shape[1]
        prompt_length = prompt["input_ids"].shape[1]

        clock.reset()
        counter = OpCounter(clock) if count_ops else None
        with torch.no_grad():
            clock.sync()
            cpu_start = time.process_time()
            wall_start = time.perf_counter()
            start = clock.now()
            try:
                with counter.mode if counter is not None else contextlib.nullcontext():
                    output = target.generate(
                        **prompt,
                        generation_config=config,
                        stopping_criteria=StoppingCriteriaList([RoundEnd()]),
                        **extra,
                    )
            except Exception as error:
                # A version that cannot run this workload: the driver shows the error in its tables.
                clock.depth = 0
                kind = "refuses" if isinstance(error, (ValueError, NotImplementedError)) else "fails"
                return {"workload": workload, "method": method, "failed": f"{kind}: {type(error).__name__}: {error}"}
            clock.sync()
            elapsed = clock.now() - start
            wall = time.perf_counter() - wall_start
            cpu = time.process_time() - cpu_start

        new_tokens = output.shape[1] - start_length
        rounds = clock.rounds
        if not rounds or rounds[-1][1] < output.shape[1]:
            # The stopping criteria list stops asking at the first criterion that fires (the length limit, which
            # comes first), so the last round is not timestamped: it ends when generate() returns (and replaces the
            # checks made within it, after its accepted tokens, if any).
            end = (start + elapsed, output.shape[1], clock.forward_calls, clock.forward_time)
            if rounds and rounds[-1][2] == clock.forward_calls:
                rounds[-1] = end
            else:
                rounds.append(end)
        # Per round: tokens added, forwards run (one target verification + one assistant forward per candidate).
        added, forwards = [], []
        previous_length, previous_calls = start_length, 0
        for _, length, calls, _ in rounds:
            added.append(length - previous_length)
            forwards.append(calls - previous_calls)
            previous_length, previous_calls = length, calls
        if method == "assisted":
            proposed = sum(max(calls - 1, 0) for calls in forwards)
            accepted = sum(max(count - 1, 0) for count in added)
        else:
            proposed = accepted = 0
        # Loop overhead: between the end of the first round (which holds the prompt's forward) and the last one.
        if len(rounds) > 1:
            span = rounds[-1][0] - rounds[0][0]
            span_forward = rounds[-1][3] - rounds[0][3]
            overhead_per_round = (span - span_forward) / (len(rounds) - 1)
            round_time = span / (len(rounds) - 1)
            loop_per_token = span / (rounds[-1][1] - rounds[0][1])
        else:
            overhead_per_round = loop_per_token = round_time = float("nan")
        # Time per token for a run of M new tokens (the prefix of this run: identical work), for each mark M.
        prefix = {}
        for mark in marks:
            for when, length, _, _ in rounds:
                if length - start_length >= mark:
                    prefix[str(mark)] = (when - start) / (length - start_length)
                    break
        return {
            "workload": workload,
            "method": method,
            "max_new_tokens": max_new_tokens,
            "new_tokens": new_tokens,
            "time": elapsed,  # on the worker's clock, as every time below
            "per_token": elapsed / new_tokens,
            "wall": wall,
            "wall_per_token": wall / new_tokens,
            "cpu": cpu,  # process CPU time, all threads
            "cpu_per_token": cpu / new_tokens,
            "forward_time": clock.forward_time,
            "forward_calls": clock.forward_calls,
            "rounds": len(rounds),
            "overhead_per_round": overhead_per_round,
            "round_time": round_time,
            # Everything outside the model forwards (set-up included), per generated token.
            "outside_per_token": (elapsed - clock.forward_time) / new_tokens,
            "forward_per_token": clock.forward_time / new_tokens,
            "loop_per_token": loop_per_token,
            "proposed": proposed,
            "accepted": accepted,
            "prefix_per_token": prefix,
            "prompt_length": prompt_length,
            "first_round": rounds[0][0] - start,  # the prompt's round: time to the first token
            # The trained pair speaks bytes: its continuation is worth reading.
            "continuation": output[0, start_length:].tolist() if workload == "trained" else None,
            "output_sha": hashlib.sha256(output.cpu().numpy().tobytes()).hexdigest()[:16],
            "weights_sha": weights,
            # Counted by forward hooks, whatever the stopping criteria see: one target forward per round (greedy:
            # per token), one assistant forward per drafted candidate (for every row of a batch at once).
            "batch_size": output.shape[0],
            "target_calls": clock.calls_by_module.get(id(target), 0),
            "assistant_calls": clock.calls_by_module.get(id(assistant), 0) if assistant is not target else 0,
            "rows": output[:, start_length:].tolist() if keep_rows else None,
            "ops_outside": sum(counter.counts.values()) if counter is not None else None,
            "ops_by_name": counter.counts if counter is not None else None,
            "syncs_outside": sum(counter.syncs.values()) if counter is not None else None,
            "syncs_by_name": counter.syncs if counter is not None else None,
        }

    def batch_prompt(self, prompts, pad_token_id=0):
        """Prompts of different lengths as one batch: left padded with `pad_token_id`, masked by the attention mask."""
        width = max(len(prompt) for prompt in prompts)
        input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[row, width - len(prompt) :] = 1
        return {"input_ids": input_ids.to(self.device), "attention_mask": attention_mask.to(self.device)}

    def batch(self, workload, method, max_new_tokens, prompts, separate=False):
        """The prompts as one batched call, or one call per prompt (`separate`): the calls' sums, every row's tokens.

        Rounds are target forwards (one per verification; greedy: one per token), drafted candidates are assistant
        forwards (each drafts one candidate for every row), accepted candidates are the new tokens less the rounds
        (each round adds the accepted candidates and the model's own token); all counted per row, the same for every
        row of a batch, as the rows stay aligned.
        """
        calls = [[prompt] for prompt in prompts] if separate else [prompts]
        measured = []
        for rows in calls:
            answer = self.run(workload, method, max_new_tokens, prompt=self.batch_prompt(rows), keep_rows=True)
            if "failed" in answer:
                return answer
            measured.append(answer)
        generated = sum(m["new_tokens"] * m["batch_size"] for m in measured)
        new_tokens = sum(m["new_tokens"] for m in measured)
        rounds = sum(m["target_calls"] for m in measured)
        elapsed = sum(m["time"] for m in measured)
        wall = sum(m["wall"] for m in measured)
        return {
            "workload": workload,
            "method": method,
            "separate": separate,
            "calls": len(calls),
            "batch_size": len(prompts),
            "prompt_lengths": [len(prompt) for prompt in prompts],
            "max_new_tokens": max_new_tokens,
            "new_tokens": new_tokens,  # per row, summed over the calls
            "generated": generated,  # every row's tokens
            "time": elapsed,
            "per_token": elapsed / generated,
            "wall": wall,
            "wall_per_token": wall / generated,
            "cpu": sum(m["cpu"] for m in measured),
            "forward_time": sum(m["forward_time"] for m in measured),
            "rounds": rounds,
            "proposed": sum(m["assistant_calls"] for m in measured),
            "accepted": new_tokens - rounds if method == "assisted" else 0,
            "rows": [row for m in measured for row in m["rows"]],
            "weights_sha": measured[0]["weights_sha"],
        }


def main():
    args = parse_args()
    # Answers go to the original stdout; anything else printed (warnings, libraries) goes to stderr.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    worker = Worker(args)
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        try:
            if command["op"] == "info":
                answer = worker.info()
            elif command["op"] == "load":
                worker.trained = command.get("trained")
                answer = {"weights": {name: worker.workload(name)[3] for name in command["workloads"]}}
            elif command["op"] == "costs":
                answer = worker.forward_costs(command["workload"])
            elif command["op"] == "batch":
                answer = worker.batch(
                    command["workload"],
                    command["method"],
                    command["max_new_tokens"],
                    command["prompts"],
                    command.get("separate", False),
                )
            elif command["op"] == "run":
                answer = worker.run(
                    command["workload"],
                    command["method"],
                    command["max_new_tokens"],
                    command.get("marks", ()),
                    count_ops=command.get("count_ops", False),
                )
            elif command["op"] == "quit":
                break
            else:
                raise ValueError(f"unknown op {command['op']!r}")
            answer = {"ok": True, **answer}
        except Exception as error:  # reported to the driver, which stops the benchmark
            import traceback

            answer = {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
        answers.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
