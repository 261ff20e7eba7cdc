"""The benchmark's worker: times generation with the transformers its interpreter imports (4.31 to 5.x).

`scripts/bench_worker.py` starts it, once per side, so that no two transformers versions (nor two sides' settings) ever
share a process. It reads one JSON command per line on stdin and answers one JSON line per command on its original
stdout (everything the libraries print goes to stderr). Commands:

    {"op": "info"}
    {"op": "load", "workloads": [NAME, ...], "trained": {"dir": PATH, "prompt": [BYTE, ...]}}
        (answers each workload's weight checksum and the attention its models run)
    {"op": "save_weights", "workload": NAME, "path": PATH}   (its weights, for the sides that build them otherwise)
    {"op": "adopt_weights", "workload": NAME, "path": PATH}  (load those; answers the new checksum)
    {"op": "costs", "workload": NAME}   (time of one cached forward of the target and of the assistant)
    {"op": "run", "workload": NAME, "method": "greedy" | "assisted" | "sample", "max_new_tokens": N, "marks": [...],
     "temperature": T, "seed": S}   (with a temperature, assisted decoding samples too; seeded before the call)
        (with "count_ops": true, the answer also counts the tensor operations run outside the model forwards:
        "ops_outside", "ops_by_name"; such a run is slowed down by the counting and is not a timing)
    {"op": "asr", "method": "greedy" | "assisted", "max_new_tokens": N, "batch_size": B, "workload": NAME}
        (the speech recognition pipeline on the recordings of `workloads.asr_parts`, B at a time, with the target and
        assistant of a Whisper workload, "whisper" by default: time per row, texts, tokens, the fork's account of
        each batch)
    {"op": "real", "task": "generate" | "asr", ...}   (the cases on real checkpoints: `benchkit.real`)
    {"op": "batch", "workload": NAME, "method": "greedy" | "assisted", "max_new_tokens": N,
     "prompts": [[TOKEN, ...], ...], "separate": BOOL, "aligned_rows": BOOL, "eos_token_id": TOKEN}
        (the prompts as one left-padded batch with its attention mask, or with "separate" one call per prompt;
        with "aligned_rows", the patched fork keeps the rows of an assisted batch aligned; with "eos_token_id", rows
        end on that token, otherwise every row generates max_new_tokens; the answer sums the calls and carries every
        row's new tokens)

Models are built by `benchkit.workloads` from config classes with random weights under a fixed seed, so every side
builds the same models (the answer carries a weight checksum to prove it; a version that initializes a model in
another order loads the weights the reference side saved); the trained pair is loaded with `from_pretrained`. A run
that raises (a release that refuses or fails a workload, a draft length it cannot run) is answered with the error
instead of measurements; the driver reports it and goes on.

Model forwards are timed with forward pre/post hooks on the target and the assistant (outermost call only), and every
round of the decoding loop is timestamped by a stopping criterion that never stops anything (the loops call the
stopping criteria once per round: once per token for greedy, once per verification for assisted). The batch table's
calls run without it: a criterion of a class of its own makes the patched fork keep the rows of a batch aligned.
"""

import argparse
import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import sys
import time

import torch

from . import real
from .clock import Clock
from .counting import OpCounter
from .settings import INITIAL_DRAFT_LENGTH, Settings
from .workloads import PAIRS, Builder, asr_parts

# The assistant's generation_config fields that hold its draft length (4.35+; 5.x adds the confidence threshold).
DRAFT_FIELDS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


def parse_args(argv=None):
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
    parser.add_argument("--settings", help="the side's settings as JSON (benchkit.settings.Settings; default: none)")
    return parser.parse_args(argv)


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


def draft_defaults():
    """How this transformers sets the draft length, and its defaults for a model that sets nothing."""
    from transformers import GenerationConfig

    config = GenerationConfig()
    if not hasattr(config, "num_assistant_tokens"):
        # 4.31: `assistant_model.max_assistant_tokens`, 5 unless set, its heuristic kept on the assistant across calls.
        return {"via": "max_assistant_tokens", "num_assistant_tokens": INITIAL_DRAFT_LENGTH, "schedule": "heuristic"}
    values = {
        "via": "generation_config",
        "num_assistant_tokens": config.num_assistant_tokens,
        "schedule": config.num_assistant_tokens_schedule,
        "confidence": getattr(config, "assistant_confidence_threshold", None),
    }
    # 5.x leaves them unset on the config and fills them in at generation time.
    filled = getattr(GenerationConfig, "_get_default_generation_params", None)
    if filled is not None:
        defaults = filled()
        for key, name in (
            ("num_assistant_tokens", "num_assistant_tokens"),
            ("schedule", "num_assistant_tokens_schedule"),
            ("confidence", "assistant_confidence_threshold"),
        ):
            if values[key] is None:
                values[key] = defaults.get(name)
    if values["confidence"] is not None:
        # The threshold adapts during generation only where scikit-learn is installed.
        try:
            from transformers.utils import is_sklearn_available

            values["confidence_adapts"] = bool(is_sklearn_available())
        except ImportError:
            values["confidence_adapts"] = False
    return values


def set_draft_length(assistant, draft, saved):
    """The hook: puts the assistant's draft length in the state `draft` (a `DraftLength`) asks for, before a call.

    `saved`: the assistant's generation_config draft fields as loaded (the side's defaults). Every call starts from
    the same state, whatever the previous call's heuristic left: 4.31 keeps `max_assistant_tokens` on the assistant
    across calls, 4.35+ write the heuristic's last value back to `generation_config.num_assistant_tokens` (and an
    `assistant.num_assistant_tokens` attribute would override it). Raises ValueError for what the version cannot run.
    """
    for name in ("max_assistant_tokens", "num_assistant_tokens"):
        if name in assistant.__dict__:
            delattr(assistant, name)
    config = assistant.generation_config
    if not hasattr(config, "num_assistant_tokens"):
        # 4.31 (stock, and the patched fork until its generation_config has the fields): the heuristic only.
        if draft.schedule not in (None, "heuristic"):
            raise ValueError(
                f"this transformers has no draft-length schedule but its heuristic (asked for {draft.schedule!r}): "
                "`assistant_model.generation_config.num_assistant_tokens_schedule` does not exist"
            )
        if draft.confidence:
            raise ValueError("this transformers has no `assistant_confidence_threshold`")
        if draft.start is not None and draft.start != INITIAL_DRAFT_LENGTH:
            assistant.max_assistant_tokens = draft.start
        return
    for name, value in saved.items():
        setattr(config, name, value)
    if draft.start is not None:
        config.num_assistant_tokens = draft.start
    if draft.schedule is not None:
        config.num_assistant_tokens_schedule = draft.schedule
    if draft.confidence is not None:
        if hasattr(config, "assistant_confidence_threshold"):
            config.assistant_confidence_threshold = draft.confidence
        elif draft.confidence:
            raise ValueError("this transformers has no `assistant_confidence_threshold`")


def returns_decoding_stats():
    """Whether this transformers returns the account of an assisted call in its output (the patched fork's
    `assisted_decoding_stats`): only then are its calls asked for a dict, the other versions' calls stay as they are.
    """
    import transformers.generation.utils as generation_utils

    output_class = getattr(generation_utils, "GreedySearchDecoderOnlyOutput", None)
    return "assisted_decoding_stats" in getattr(output_class, "__dataclass_fields__", {})


def decoding_stats(output):
    """What the patched fork's assisted decoding says of a call in its output (`assisted_decoding_stats`: its
    schedule, rounds, candidates drafted and accepted, per row too, and why it drafted nothing or stopped drafting), or
    None where the version keeps no such account."""
    stats = output.get("assisted_decoding_stats") if isinstance(output, dict) else None
    if stats is None or not dataclasses.is_dataclass(stats):
        return None
    return dataclasses.asdict(stats)


def left_padded(prompts, pad_token_id=0):
    """Prompts of different lengths as one batch: left padded with `pad_token_id`, masked by the attention mask."""
    width = max(len(prompt) for prompt in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        attention_mask[row, width - len(prompt) :] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


class Worker:
    def __init__(self, args):
        self.device = args.device
        self.dtype = getattr(torch, args.dtype)
        if self.device == "cpu":
            torch.set_num_threads(args.threads)
        self.clock_name = args.clock if args.clock != "auto" else ("wall" if self.device == "cuda" else "cpu")
        self.clock = Clock(self.device, self.clock_name)
        self.settings = Settings.from_json(getattr(args, "settings", None))
        self.builder = None
        self.loaded = {}  # name -> (target, assistant, prompt, weights checksum)
        self.saved_draft = {}  # id(assistant) -> its generation_config's draft fields as built
        self.trained = None
        self.asr_pipelines = {}  # workload -> the speech recognition pipeline of its target

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
            "settings": json.loads(self.settings.to_json()),
            "draft_defaults": draft_defaults(),
        }

    def workload(self, name):
        if name not in self.loaded:
            if self.builder is None:
                self.builder = Builder(self.device, self.dtype, self.trained, self.settings.attention)
            target, assistant, prompt = PAIRS[name].build(self.builder)
            for model in (target, assistant):
                # Every run generates exactly max_new_tokens: 5.x fills the EOS token the call leaves unset from the
                # model's own generation_config (4.3x takes the call's config alone).
                model.generation_config.eos_token_id = None
            config = assistant.generation_config
            self.saved_draft[id(assistant)] = {
                name: getattr(config, name) for name in DRAFT_FIELDS if hasattr(config, name)
            }
            self.clock.attach([target, assistant])
            for model in (target, assistant):
                if model.config.is_encoder_decoder:
                    self.clock.attach([model.get_encoder()])
            self.loaded[name] = (target, assistant, prompt, checksum(target, assistant))
        return self.loaded[name]

    def attention(self, name):
        """The attention implementations the workload's models run (None: the version has no choice)."""
        target, assistant, _, _ = self.workload(name)
        found = {getattr(model.config, "_attn_implementation", None) for model in (target, assistant)}
        return sorted(found, key=str)[0] if len(found) == 1 else "/".join(sorted(map(str, found)))

    def save_weights(self, name, path):
        target, assistant, _, weights = self.workload(name)
        state = {"target": target.state_dict(), "assistant": None if assistant is target else assistant.state_dict()}
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
        return {"weights": weights}

    def adopt_weights(self, name, path):
        target, assistant, prompt, _ = self.workload(name)
        state = torch.load(path, map_location=self.device)
        target.load_state_dict(state["target"])
        if state["assistant"] is not None:
            assistant.load_state_dict(state["assistant"])
        weights = checksum(target, assistant)
        self.loaded[name] = (target, assistant, prompt, weights)
        return {"weights": weights}

    def forward_costs(self, workload, calls=50):
        """Time of one cached single-token forward of the target and of the assistant, after the prompt."""
        target, assistant, prompt, _ = self.workload(workload)
        clock = self.clock
        costs = {}
        with torch.no_grad():
            for name, model in (("target", target), ("assistant", assistant)):
                if model.config.is_encoder_decoder:
                    continue
                length = prompt["input_ids"].shape[1]
                past = model(**prompt, use_cache=True).past_key_values
                token = prompt["input_ids"][:, -1:]
                mask = torch.ones_like(prompt["input_ids"][:, :1]).repeat(1, length + 1)
                # 5.x caches are objects that each forward extends: cropped back to the prompt after each call.
                crop = getattr(past, "crop", None)
                total = 0.0
                for call in range(calls + 5):
                    clock.sync()
                    start = clock.now()
                    model(input_ids=token, attention_mask=mask, past_key_values=past, use_cache=True)
                    clock.sync()
                    if call >= 5:  # the first five warm up
                        total += clock.now() - start
                    if crop is not None:
                        crop(-(past.get_seq_length() - length))  # a negative crop removes that many tokens
                costs[name] = total / calls
        return {"forward_costs": costs}

    def run(
        self,
        workload,
        method,
        max_new_tokens,
        marks=(),
        prompt=None,
        keep_rows=False,
        count_ops=False,
        temperature=None,
        seed=None,
        time_rounds=True,
        aligned_rows=False,
        eos_token_id=None,
    ):
        """One timed `generate` call on the workload's prompt, or on `prompt` (input_ids and attention_mask); with
        `count_ops`, the operations run outside the model forwards are counted (and the timings are not worth
        keeping). `method`: "greedy", "assisted", or "sample" (plain sampling); with `temperature`, "assisted"
        samples too (top_k 0: the whole distribution, no other warper), after `torch.manual_seed(seed)`.

        `time_rounds`: the rounds are timestamped by a stopping criterion (`RoundEnd`); without it the call has the
        generation config's length limit alone, and counts as one round (the per-round figures then describe the
        whole call; the target and assistant forwards are counted all the same). The patched fork keeps the rows of
        a batch aligned where any stopping criterion is of another class than its length limits, so batches whose
        rows keep their own run without it. `aligned_rows`: the patched fork keeps the rows of a batch aligned
        anyway (`_supports_rows_with_holes` answering False on the target for the call: a switch private to the bench,
        which gives the fork's behaviour before rows kept their own). `eos_token_id`: the rows end on that token (the
        batch table's variant whose rows end at different steps); None, the default: every run generates exactly
        max_new_tokens."""
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
                if counter is not None:
                    counter.mark(len(clock.rounds))
                return False

        sampling = method == "sample" or temperature is not None
        if sampling:
            sample_args = {"do_sample": True, "temperature": 1.0 if temperature is None else temperature, "top_k": 0}
        else:
            sample_args = {"do_sample": False}
        config = GenerationConfig(
            max_new_tokens=max_new_tokens,
            min_new_tokens=0,
            **sample_args,
            num_beams=1,
            # random weights: never stop early, every run generates exactly max_new_tokens (unless asked for an EOS)
            eos_token_id=eos_token_id,
            pad_token_id=0,
            decoder_start_token_id=0 if target.config.is_encoder_decoder else None,
            use_cache=True,
        )
        extra = {}
        if method == "assisted":
            # Every side runs its own draft-length rule, in the state its settings ask for, reset before every call.
            try:
                set_draft_length(assistant, self.settings.draft, self.saved_draft.get(id(assistant), {}))
            except ValueError as error:
                return {"workload": workload, "method": method, "failed": f"refuses: ValueError: {error}"}
            extra["assistant_model"] = assistant
        start_length = 1 if target.config.is_encoder_decoder else prompt["input_ids"].shape[1]
        # tokens, or feature frames for a speech model (input_features)
        prompt_length = prompt[target.main_input_name].shape[-1]
        # The patched fork's own account of the call (rounds, candidates, why it stopped drafting), in its output.
        if method == "assisted" and returns_decoding_stats():
            extra["return_dict_in_generate"] = True

        clock.reset()
        counter = OpCounter(clock) if count_ops else None
        if seed is not None:
            torch.manual_seed(seed)
        with torch.no_grad():
            clock.sync()
            cpu_start = time.process_time()
            wall_start = time.perf_counter()
            start = clock.now()
            if aligned_rows:
                # The fork reads the target's declaration: an instance attribute over the class's, for this call
                target._supports_rows_with_holes = lambda cache_length: False
            try:
                with counter.mode if counter is not None else contextlib.nullcontext():
                    output = target.generate(
                        **prompt,
                        generation_config=config,
                        stopping_criteria=StoppingCriteriaList([RoundEnd()] if time_rounds else []),
                        **extra,
                    )
            except Exception as error:
                # A version that cannot run this workload: the driver shows the error in its tables.
                clock.depth = 0
                kind = "refuses" if isinstance(error, (ValueError, NotImplementedError)) else "fails"
                return {"workload": workload, "method": method, "failed": f"{kind}: {type(error).__name__}: {error}"}
            finally:
                if aligned_rows:
                    target.__dict__.pop("_supports_rows_with_holes", None)
            clock.sync()
            elapsed = clock.now() - start
            wall = time.perf_counter() - wall_start
            cpu = time.process_time() - cpu_start
        stats = decoding_stats(output) if method == "assisted" else None
        if isinstance(output, dict):
            output = output["sequences"]

        new_tokens = output.shape[1] - start_length
        loop_counts = counter.loop_per_round() if counter is not None else None
        rounds = clock.rounds
        if not rounds or rounds[-1][1] < output.shape[1]:
            # The stopping criteria list stops asking at the first criterion that fires (the length limit, which
            # comes first), so the last round is not timestamped: it ends when generate() returns (and replaces the
            # checks made within it, after its accepted tokens, if any). Without `time_rounds`, the whole call.
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
            # The encoders' forwards (once per call and model, in whichever round the version runs them) are not
            # candidates.
            encoders = {id(model.get_encoder()) for model in (target, assistant) if model.config.is_encoder_decoder}
            encoder_calls = sum(clock.calls_by_module.get(encoder, 0) for encoder in encoders)
            proposed = sum(max(calls - 1, 0) for calls in forwards) - encoder_calls
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
            "temperature": temperature if sampling else None,
            "seed": seed,
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
            # per round of the loop, the call's set-up and first round left out
            "ops_loop_per_round": loop_counts[0] if loop_counts else None,
            "syncs_loop_per_round": loop_counts[1] if loop_counts else None,
            "decoding_stats": stats,
        }

    def batch_prompt(self, prompts, pad_token_id=0):
        """`left_padded` prompts, on the worker's device."""
        return {name: tensor.to(self.device) for name, tensor in left_padded(prompts, pad_token_id).items()}

    def batch(self, workload, method, max_new_tokens, prompts, separate=False, aligned_rows=False, eos_token_id=None):
        """The prompts as one batched call, or one call per prompt (`separate`): the calls' sums, every row's tokens.
        The calls run without timestamped rounds (`run`'s `time_rounds`), so that the patched fork lets the rows of
        an assisted batch keep all their accepted candidates where the model supports it (`_supports_rows_with_holes`:
        GPT-2, the trained pair, does), unless `aligned_rows` keeps them aligned.

        Rounds are target forwards (one per verification; greedy: one per token), `rounds_max` those of the call
        that ran most (separate calls: the slowest prompt alone), drafted candidates are assistant forwards (each
        drafts one candidate for every row), accepted candidates are the new tokens of a row less the rounds (each
        round adds a row's accepted candidates and the model's own token), summed over separate calls. With aligned
        rows that is every row's count, the same for every row of a batch. Where the rows keep their own, they accept
        different numbers and finish in different rounds: every row has the same new tokens, and the new tokens less
        the rounds are the accepted candidates of the row that runs in every round, the one that accepts fewest (the
        others accept more, and so are done in fewer rounds).

        With `eos_token_id` the rows end on it, at different steps: `row_ends` holds each row's step of its EOS (None
        for a row that reaches the length limit without one), and `generated`, the tokens the time per token is over,
        counts each row's tokens up to and including its EOS (not the padding after it). No row's accepted candidates
        are then its new tokens less the rounds (`accepted` is None): rounds and drafted candidates describe the call.
        """
        calls = [[prompt] for prompt in prompts] if separate else [prompts]
        measured = []
        for rows in calls:
            answer = self.run(
                workload,
                method,
                max_new_tokens,
                prompt=self.batch_prompt(rows),
                keep_rows=True,
                time_rounds=False,
                aligned_rows=aligned_rows,
                eos_token_id=eos_token_id,
            )
            if "failed" in answer:
                return answer
            measured.append(answer)
        rows = [row for m in measured for row in m["rows"]]
        if eos_token_id is None:
            row_ends = None
            generated = sum(m["new_tokens"] * m["batch_size"] for m in measured)
        else:
            # A row's EOS is its last real token: what follows it is padding (a call runs until its last row ends).
            row_ends = [row.index(eos_token_id) + 1 if eos_token_id in row else None for row in rows]
            generated = sum(end or len(row) for end, row in zip(row_ends, rows, strict=True))
        new_tokens = sum(m["new_tokens"] for m in measured)
        rounds = sum(m["target_calls"] for m in measured)
        if method != "assisted":
            accepted = 0
        elif eos_token_id is not None:
            accepted = None  # the rows end at different steps: no row's count is the new tokens less the rounds
        else:
            accepted = new_tokens - rounds
        elapsed = sum(m["time"] for m in measured)
        wall = sum(m["wall"] for m in measured)
        return {
            "workload": workload,
            "method": method,
            "separate": separate,
            "aligned_rows": aligned_rows,
            "calls": len(calls),
            "batch_size": len(prompts),
            "prompt_lengths": [len(prompt) for prompt in prompts],
            "max_new_tokens": max_new_tokens,
            "new_tokens": new_tokens,  # per row, summed over the calls
            "generated": generated,  # every row's tokens (with an EOS: up to and including it)
            "time": elapsed,
            "per_token": elapsed / generated,
            "wall": wall,
            "wall_per_token": wall / generated,
            "cpu": sum(m["cpu"] for m in measured),
            "forward_time": sum(m["forward_time"] for m in measured),
            "rounds": rounds,
            "rounds_max": max(m["target_calls"] for m in measured),
            "proposed": sum(m["assistant_calls"] for m in measured),
            "accepted": accepted,
            "rows": rows,
            "eos_token_id": eos_token_id,
            "row_ends": row_ends,
            "weights_sha": measured[0]["weights_sha"],
        }

    def asr(self, method, max_new_tokens, batch_size, workload="whisper"):
        """One timed call of the speech recognition pipeline on the recordings of `workloads.asr_parts`, `batch_size`
        at a time, with the target of `workload` (a Whisper pair over the byte-level vocabulary of those parts),
        greedy or with its assistant: the time per row, every row's text and tokens (what `generate` returned to the
        pipeline, in the order of the recordings), the fork's account of each batch's assisted call, or the failure
        (building the pipeline included: a version may not take these parts)."""
        from transformers import pipeline

        try:
            target, assistant, _, weights = self.workload(workload)
            parts = asr_parts(self.builder)
            # A pipeline wraps one model: one per workload, built at its first call and kept for the next ones.
            if workload not in self.asr_pipelines:
                self.asr_pipelines[workload] = pipeline(
                    "automatic-speech-recognition",
                    model=target,
                    tokenizer=parts["tokenizer"],
                    feature_extractor=parts["feature_extractor"],
                    device=self.device,
                )
        except Exception as error:
            return {"method": method, "failed": f"fails: {type(error).__name__}: {error}"}
        generate_kwargs = {"max_new_tokens": max_new_tokens}
        if method == "assisted":
            try:
                set_draft_length(assistant, self.settings.draft, self.saved_draft.get(id(assistant), {}))
            except ValueError as error:
                return {"method": method, "failed": f"refuses: ValueError: {error}"}
            generate_kwargs["assistant_model"] = assistant
        audio = parts["audio"]
        tokens, stats = [], []
        generate = target.generate

        def recording_generate(*args, **kwargs):
            # The texts alone could hide a difference (bytes that decode to no character): keep the tokens, and the
            # fork's account of each batch, from its output (the pipeline gets what it asked for).
            asks_dict = kwargs.get("return_dict_in_generate")
            if method == "assisted" and returns_decoding_stats():
                kwargs["return_dict_in_generate"] = True
            output = generate(*args, **kwargs)
            sequences = output.get("sequences") if isinstance(output, dict) else output
            if torch.is_tensor(sequences):
                tokens.extend(sequences.tolist())
            stats.append(decoding_stats(output) if method == "assisted" else None)
            return output if asks_dict or not isinstance(output, dict) else sequences

        clock = self.clock
        clock.reset()
        target.generate = recording_generate  # the pipeline calls its model's generate: this call's, on the instance
        with torch.no_grad():
            clock.sync()
            wall_start = time.perf_counter()
            start = clock.now()
            try:
                outputs = self.asr_pipelines[workload](
                    list(audio), batch_size=batch_size, generate_kwargs=generate_kwargs
                )
            except Exception as error:
                clock.depth = 0
                kind = "refuses" if isinstance(error, (ValueError, NotImplementedError)) else "fails"
                return {"method": method, "failed": f"{kind}: {type(error).__name__}: {error}"}
            finally:
                del target.generate
            clock.sync()
            elapsed = clock.now() - start
            wall = time.perf_counter() - wall_start
        return {
            "method": method,
            "workload": workload,
            "rows": len(audio),
            "wall": wall,
            "batch_size": batch_size,
            "max_new_tokens": max_new_tokens,
            "time": elapsed,
            "per_row": elapsed / len(audio),
            "forward_time": clock.forward_time,
            "target_calls": clock.calls_by_module.get(id(target), 0),
            "assistant_calls": clock.calls_by_module.get(id(assistant), 0),
            "texts": [output["text"] for output in outputs],
            "tokens": tokens if len(tokens) == len(audio) else None,
            "decoding_stats": stats if stats and all(stats) else None,  # one per batch
            "weights_sha": weights,
        }

    def cache_bound(self, workload, sizes, draft_lengths, max_new_tokens, prompts):
        """The peak cache of the target (the most positions a forward pass of it reads: its attention mask's width) in
        batched assisted calls whose rows keep their own candidates, and in batched greedy search, for each batch size
        (the first `size` prompts, left padded), constant draft length and draft: one that agrees rarely (the draft's
        architecture with untrained weights, seeded) and one that agrees unevenly (the trained draft with noise on its
        weights, seeded). Counts, not times: one call each. Every assisted call's tokens are checked against greedy's.
        """
        target, trained_draft, _, _ = self.workload(workload)
        torch.manual_seed(0)
        rarely = type(trained_draft)(trained_draft.config).to(self.device, self.dtype).eval()
        unevenly = copy.deepcopy(trained_draft)
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for parameter in unevenly.parameters():
                noise = torch.randn(parameter.shape, generator=generator).to(parameter.device, parameter.dtype)
                parameter.add_(0.3 * parameter.std().nan_to_num(0.0) * noise)
        widest = [0]

        def hook(module, args, kwargs):
            mask = kwargs.get("attention_mask")
            if mask is not None:
                widest[0] = max(widest[0], mask.shape[1])

        handle = target.register_forward_pre_hook(hook, with_kwargs=True)
        rows = []
        try:
            for size in sizes:
                batch = {key: value.to(self.device) for key, value in left_padded(prompts[:size]).items()}
                kwargs = dict(batch, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0, eos_token_id=None)
                widest[0] = 0
                with torch.no_grad():
                    greedy = target.generate(**kwargs)
                greedy_width = widest[0]
                for name, draft in (("rarely", rarely), ("unevenly", unevenly)):
                    for length in draft_lengths:
                        widest[0] = 0
                        with torch.no_grad():
                            assisted = target.generate(
                                **kwargs,
                                assistant_model=draft,
                                num_assistant_tokens=length,
                                num_assistant_tokens_schedule="constant",
                            )
                        rows.append(
                            {
                                "size": size,
                                "draft": name,
                                "draft_length": length,
                                "greedy_width": greedy_width,
                                "assisted_width": widest[0],
                                "same": torch.equal(assisted, greedy),
                            }
                        )
        finally:
            handle.remove()
        return {"rows": rows, "tokens": max_new_tokens}

    def answer(self, command):
        """The answer to one command of the driver (see the module's docstring)."""
        op = command["op"]
        if op == "info":
            return self.info()
        if op == "load":
            self.trained = command.get("trained")
            if self.builder is not None:
                self.builder.trained = self.trained
            names = command["workloads"]
            return {
                "weights": {name: self.workload(name)[3] for name in names},
                "attention": {name: self.attention(name) for name in names},
            }
        if op == "save_weights":
            return self.save_weights(command["workload"], command["path"])
        if op == "adopt_weights":
            return self.adopt_weights(command["workload"], command["path"])
        if op == "costs":
            return self.forward_costs(command["workload"])
        if op == "real":
            return real.answer(self, command)
        if op == "asr":
            return self.asr(
                command["method"],
                command["max_new_tokens"],
                command["batch_size"],
                command.get("workload", "whisper"),
            )
        if op == "cache_bound":
            return self.cache_bound(
                command["workload"],
                command["sizes"],
                command["draft_lengths"],
                command["max_new_tokens"],
                command["prompts"],
            )
        if op == "batch":
            return self.batch(
                command["workload"],
                command["method"],
                command["max_new_tokens"],
                command["prompts"],
                command.get("separate", False),
                command.get("aligned_rows", False),
                command.get("eos_token_id"),
            )
        if op == "run":
            return self.run(
                command["workload"],
                command["method"],
                command["max_new_tokens"],
                command.get("marks", ()),
                count_ops=command.get("count_ops", False),
                temperature=command.get("temperature"),
                seed=command.get("seed"),
            )
        raise ValueError(f"unknown op {op!r}")


def main(argv=None):
    args = parse_args(argv)
    # Answers go to the original stdout; anything else printed (warnings, libraries) goes to stderr.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    worker = Worker(args)
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        if command["op"] == "quit":
            break
        try:
            answer = {"ok": True, **worker.answer(command)}
        except Exception as error:  # reported to the driver, which stops the benchmark
            import traceback

            answer = {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
        answers.write(json.dumps(answer) + "\n")
