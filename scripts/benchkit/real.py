"""Workloads on the real checkpoints of `make real-models` (build/real-models/, or the folder REAL_MODELS_DIR names):
prompt lookup decoding and assisted generation on SmolLM2-135M-Instruct, and the speech recognition pipeline on real
English clips with Whisper base and a 2-decoder-layer assistant sharing its encoder.

Cases (`--cases`; `make bench` runs them when the checkpoints are there, and says loudly when they are not):
  lookup-grounded  prompt lookup decoding on input-grounded requests (rewrite a passage, rename a variable in code,
                   summarize a paragraph in its own words, correct a text): the fork's greedy search, the fork's prompt
                   lookup, 5.23.0's prompt lookup (eager attention, its own environment, the same directory and
                   prompts)
  lookup-open      the same on open-ended questions, where the prompt holds little of the answer
  lookup-batch     eight input-grounded requests (lookup-grounded's and four more) as one left-padded batch: the
                   fork's prompt lookup against its batched greedy search (5.23.0 refuses prompt lookup on a batch:
                   asked once)
  real-assisted    SmolLM2 assisted by a draft of its own first DRAFT_LAYERS layers against greedy search
  real-asr         the speech recognition pipeline, Whisper base with and without the assistant of its first
                   WHISPER_DRAFT_LAYERS decoder layers (sharing the model's encoder module), clip by clip

Every call stops at the model's end of turn (`<|im_end|>`, Whisper's end of text) or at the case's number of new
tokens; every side's tokens must be the fork's greedy tokens (prompt by prompt, row by row), or the run stops. Each
repetition runs the sides next to each other, the order reversed every other repetition; the fork's greedy search runs
twice in each repetition of the lookup cases, and the ratio of the two is the noise floor (a side against itself).

The worker side (`answer`) runs in the patched fork's and 5.23.0's interpreters and imports torch and transformers
inside its functions; the driver side (`run`, `summarize_real`, `real_lines`, `real_section`) imports neither.
"""

import os
import statistics
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SMOLLM2 = "smollm2-135m-instruct"
WHISPER_BASE = "whisper-base"
SPEECH = "speech"
PEER = "5.23.0-eager"  # the upstream side of the lookup cases: 5.23.0 with the attention 4.31's models run
LOOKUP_TOKENS = 10  # prompt_lookup_num_tokens, on every side
DRAFT_LAYERS = 8  # of SmolLM2's 30
WHISPER_DRAFT_LAYERS = 2  # of Whisper base's 6
EOS = 2  # SmolLM2's `<|im_end|>` (its pad token too)
CLIPS = (
    "goforward.raw",
    "sense_and_sensibility_01_austen_64kb-0880.wav",
    "sense_and_sensibility_01_austen_64kb-0890.wav",
    "sense_and_sensibility_01_austen_64kb-0930.wav",
)
# (repetitions, new tokens at most) per case, full and QUICK; WARMUP_TOKENS: new tokens of the warm-up calls.
# About 6 minutes in all on the two shared cores of the project's machine (a full run), a little over half that QUICK.
PLAN = {
    "lookup-grounded": ((3, 64), (2, 32)),
    "lookup-open": ((2, 48), (2, 32)),
    "lookup-batch": ((2, 48), (1, 32)),
    "real-assisted": ((1, 32), (1, 32)),
    "real-asr": ((2, 64), (1, 64)),
}
WARMUP_TOKENS = 8
# Targets of the lookup cases (the most time per token against the reference): grounded at least 1.5 times greedy
# search's speed, open-ended at least 0.97 times, the fork at least 5% faster than 5.23.0, batched faster than greedy.
TARGETS = {"grounded": 0.667, "open": 1.031, "peer": 0.952, "batch": 1.0}


def chat(message):
    """A user message in SmolLM2-Instruct's chat template (ChatML, no system prompt), ready for the answer."""
    return f"<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n"


_PASSAGE = (
    "Every morning the baker opens the shop at six. She lights the oven, mixes the dough for the rye loaves and sets "
    "the croissants out to rise. By seven the first customers arrive, and the queue often reaches the corner."
)
_CODE = """def average(values):
    s = 0
    n = 0
    for v in values:
        s += v
        n += 1
    if n == 0:
        return None
    return s / n"""
_PARAGRAPH = (
    "Honey bees communicate the location of food through a movement called the waggle dance. A forager returning to "
    "the hive walks in a straight line while shaking her body, then circles back and repeats. The angle of the "
    "straight run relative to vertical shows the direction of the food relative to the sun, and the length of the "
    "run shows how far away it is."
)
_NOTE = (
    "The meeting on thursday has been moved too friday at 3 pm becuase the projector in room 12 is broken. Please "
    "bring you're laptops and the revised budget, wich Anna sent yesterday."
)
GROUNDED = {
    "past-tense": chat(f"Rewrite the following text in the past tense, keeping every sentence:\n\n{_PASSAGE}"),
    "rename": chat(
        "Rewrite this Python function with the variable `s` renamed to `total` and `n` renamed to `count`. Reply "
        f"with the code only.\n\n```python\n{_CODE}\n```"
    ),
    "summarize": chat(f"Summarize this paragraph in two sentences, reusing its own words:\n\n{_PARAGRAPH}"),
    "correct": chat(f"Correct the spelling and grammar mistakes in this note:\n\n{_NOTE}"),
}
# Four more input-grounded requests: the batch of 8 is made of these and GROUNDED.
MORE_GROUNDED = {
    "retell": chat(f"Rewrite this passage so that it is about a baker named Tom instead of a woman:\n\n{_PASSAGE}"),
    "docstring": chat(
        f"Add a docstring to this Python function and return the whole function:\n\n```python\n{_CODE}\n```"
    ),
    "email": chat(
        "Turn these notes into a polite email to the team:\n\n- meeting moved from Thursday to Friday at 3 pm\n- the "
        "projector in room 12 is broken, we will use room 14\n- bring laptops and the revised budget Anna sent "
        "yesterday"
    ),
    "bullets": chat(f"Turn this paragraph into a bulleted list of its facts, in its own words:\n\n{_PARAGRAPH}"),
}
OPEN = {
    "habits": chat("What are three good habits for staying healthy while working from home?"),
    "sky": chat("Why is the sky blue? Explain it simply."),
    "story": chat("Write a short story about a lighthouse keeper who finds a message in a bottle."),
}
ASSISTED_PROMPTS = ("past-tense", "rename", "sky", "habits")


def prompts_of(case):
    """{name: text} of a SmolLM2 case."""
    if case == "lookup-grounded":
        return dict(GROUNDED)
    if case == "lookup-open":
        return dict(OPEN)
    if case == "lookup-batch":
        return {**GROUNDED, **MORE_GROUNDED}
    if case == "real-assisted":
        both = {**GROUNDED, **OPEN}
        return {name: both[name] for name in ASSISTED_PROMPTS}
    raise KeyError(case)


def models_dir():
    return Path(os.environ.get("REAL_MODELS_DIR", REPO / "build" / "real-models")).resolve()


def missing(root=None):
    """Why the checkpoints cannot be used (a line), or None when build/real-models/ holds a complete build."""
    root = Path(root) if root is not None else models_dir()
    if not (root / "manifest.json").is_file():
        return f"{root} holds no complete build of the real checkpoints (no manifest.json; `make real-models`)"
    for folder in (SMOLLM2, WHISPER_BASE):
        if not (root / folder / "config.json").is_file():
            return f"{root / folder}/config.json is missing (`make real-models FORCE=1`)"
    for clip in CLIPS:
        if not (root / SPEECH / clip).is_file():
            return f"{root / SPEECH / clip} is missing (`make real-models FORCE=1`)"
    return None


# ---- the worker side (the patched fork's and 5.23.0's interpreters)


class RealModels:
    """The models of the real cases in one worker, loaded on first use, their forwards hooked to the worker's clock."""

    def __init__(self, worker):
        self.worker = worker
        self.root = models_dir()
        self.smollm2 = None  # (tokenizer, model)
        self.draft = None
        self.whisper = None  # (processor, model, assistant, pipeline)

    def language_model(self):
        if self.smollm2 is None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            attention = self.worker.settings.attention
            kwargs = {"attn_implementation": attention} if attention is not None else {}
            tokenizer = AutoTokenizer.from_pretrained(self.root / SMOLLM2, padding_side="left")
            model = AutoModelForCausalLM.from_pretrained(self.root / SMOLLM2, torch_dtype=torch.float32, **kwargs)
            model = model.to(self.worker.device).eval()
            self.worker.clock.attach([model])
            self.smollm2 = (tokenizer, model)
        return self.smollm2

    def draft_model(self):
        """SmolLM2's first DRAFT_LAYERS layers under its final norm and (tied) head, as the tests make it."""
        if self.draft is None:
            import copy

            from transformers import AutoModelForCausalLM

            _, model = self.language_model()
            config = copy.deepcopy(model.config)
            config.num_hidden_layers = DRAFT_LAYERS
            draft = AutoModelForCausalLM.from_config(config)
            weights = model.state_dict()
            draft.load_state_dict({name: weights[name] for name in draft.state_dict()}, strict=True)
            draft = draft.to(self.worker.device).eval()
            self.worker.clock.attach([draft])
            self.draft = draft
        return self.draft

    def speech(self):
        """(processor, Whisper base, its 2-decoder-layer assistant sharing its encoder module, the pipeline)."""
        if self.whisper is None:
            import copy

            from transformers import WhisperForConditionalGeneration, WhisperProcessor, pipeline

            processor = WhisperProcessor.from_pretrained(self.root / WHISPER_BASE)
            target = WhisperForConditionalGeneration.from_pretrained(self.root / WHISPER_BASE)
            target = target.to(self.worker.device).eval()
            config = copy.deepcopy(target.config)
            config.decoder_layers = WHISPER_DRAFT_LAYERS
            assistant = WhisperForConditionalGeneration(config).eval()
            weights = target.state_dict()
            names = [name for name in assistant.state_dict() if not name.startswith("model.encoder.")]
            assistant.load_state_dict({name: weights[name] for name in names}, strict=False)
            assistant.model.encoder = target.model.encoder
            assistant.generation_config = copy.deepcopy(target.generation_config)
            assistant = assistant.to(self.worker.device)
            self.worker.clock.attach([target, assistant, target.get_encoder()])
            recognizer = pipeline(
                "automatic-speech-recognition",
                model=target,
                tokenizer=processor.tokenizer,
                feature_extractor=processor.feature_extractor,
                device=self.worker.device,
            )
            self.whisper = (processor, target, assistant, recognizer)
        return self.whisper

    def audio(self, clip):
        import wave

        import numpy

        path = self.root / SPEECH / clip
        if path.suffix == ".raw":
            data = path.read_bytes()
        else:
            with wave.open(str(path)) as handle:
                data = handle.readframes(handle.getnframes())
        return numpy.frombuffer(data, dtype="<i2").astype(numpy.float32) / 32768.0


def _stats(output):
    """The fork's account of an assisted call, from its output, or None (5.23.0 keeps none)."""
    from benchkit.worker import decoding_stats

    return decoding_stats(output)


def _asks_stats(method):
    """Whether a call of `method` asks for a dict, for the account of the call (the fork's calls only)."""
    from benchkit.worker import returns_decoding_stats

    return method != "greedy" and returns_decoding_stats()


def _timed(worker, call):
    """(result of `call()`, seconds on the worker's clock, wall seconds, process CPU seconds); the clock's forward
    counts are reset."""
    import time

    import torch

    clock = worker.clock
    clock.reset()
    with torch.no_grad():
        clock.sync()
        wall = time.perf_counter()
        cpu = time.process_time()
        start = clock.now()
        result = call()
        clock.sync()
        return result, clock.now() - start, time.perf_counter() - wall, time.process_time() - cpu


def generate_prompts(worker, models, method, prompts, max_new_tokens, batch=False):
    """One timed `generate` call per prompt (or one for all of them, left padded, with `batch`), greedy ("greedy"),
    with prompt lookup ("lookup") or with the draft ("assisted"): the calls' sums and every row's new tokens."""
    tokenizer, model = models.language_model()
    extra = {}
    if method == "lookup":
        extra["prompt_lookup_num_tokens"] = LOOKUP_TOKENS
    elif method == "assisted":
        extra["assistant_model"] = models.draft_model()
    groups = [list(prompts)] if batch else [[text] for text in prompts]
    totals = {
        "time": 0.0,
        "wall": 0.0,
        "cpu": 0.0,
        "forward_time": 0.0,
        "target_calls": 0,
        "new_tokens": 0,
        "generated": 0,
    }
    rows, stats = [], []
    for texts in groups:
        inputs = tokenizer(texts, return_tensors="pt", padding=True).to(worker.device)
        if _asks_stats(method):
            extra["return_dict_in_generate"] = True

        def call(inputs=inputs):
            return model.generate(
                **inputs,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                num_beams=1,
                eos_token_id=EOS,
                pad_token_id=EOS,
                **extra,
            )

        try:
            output, elapsed, wall, cpu = _timed(worker, call)
        except Exception as error:
            worker.clock.depth = 0
            kind = "refuses" if isinstance(error, (ValueError, NotImplementedError)) else "fails"
            return {"method": method, "failed": f"{kind}: {type(error).__name__}: {error}"}
        call_stats = _stats(output) if method != "greedy" else None
        if isinstance(output, dict):
            output = output["sequences"]
        new = output[:, inputs["input_ids"].shape[1] :]
        for row in new.tolist():
            # what the row generated, up to its end of turn (a finished row of a batch is padded after it)
            rows.append(row[: row.index(EOS) + 1] if EOS in row else row)
        totals["time"] += elapsed
        totals["wall"] += wall
        totals["cpu"] += cpu
        totals["forward_time"] += worker.clock.forward_time
        totals["target_calls"] += worker.clock.calls_by_module.get(id(model), 0)
        totals["new_tokens"] += new.shape[1]  # per row: the call's steps
        stats.append(call_stats)
    totals["generated"] = sum(len(row) for row in rows)
    return {
        "method": method,
        **totals,
        "per_token": totals["time"] / totals["generated"],
        "rows": rows,
        "stats": stats,
        "batch_size": len(prompts) if batch else 1,
    }


def transcribe(worker, models, method, clips, max_new_tokens):
    """The pipeline on each clip (batch_size 1), greedy or with the assistant: time per clip, texts, the tokens and the
    fork's account of each `generate` call."""
    _, target, assistant, recognizer = models.speech()
    generate_kwargs = {"max_new_tokens": max_new_tokens}
    if method == "assisted":
        generate_kwargs["assistant_model"] = assistant
    audio = [{"raw": models.audio(clip), "sampling_rate": 16000} for clip in clips]
    generated, stats = [], []
    generate = target.generate

    def recording(*args, **kwargs):
        asks_dict = kwargs.get("return_dict_in_generate")
        if _asks_stats(method):
            kwargs["return_dict_in_generate"] = True
        output = generate(*args, **kwargs)
        tokens = output["sequences"] if isinstance(output, dict) else output
        generated.extend(tokens.tolist())
        stats.append(_stats(output) if method == "assisted" else None)
        return output if asks_dict else tokens

    target.generate = recording
    try:
        outputs, elapsed, wall, cpu = _timed(
            worker, lambda: recognizer(audio, batch_size=1, generate_kwargs=generate_kwargs)
        )
    except Exception as error:
        worker.clock.depth = 0
        return {"method": method, "failed": f"fails: {type(error).__name__}: {error}"}
    finally:
        del target.generate
    return {
        "method": method,
        "time": elapsed,
        "wall": wall,
        "cpu": cpu,
        "per_clip": elapsed / len(clips),
        "forward_time": worker.clock.forward_time,
        "target_calls": worker.clock.calls_by_module.get(id(target), 0),
        "assistant_calls": worker.clock.calls_by_module.get(id(assistant), 0),
        "encoder_calls": worker.clock.calls_by_module.get(id(target.get_encoder()), 0),
        "texts": [output["text"] for output in outputs],
        "rows": generated,
        "stats": stats,
    }


def answer(worker, command):
    """The worker's answer to {"op": "real", "task": "generate" | "asr", ...}."""
    if getattr(worker, "real_models", None) is None:
        worker.real_models = RealModels(worker)
    models = worker.real_models
    if command["task"] == "generate":
        return generate_prompts(
            worker,
            models,
            command["method"],
            command["prompts"],
            command["max_new_tokens"],
            batch=command.get("batch", False),
        )
    if command["task"] == "asr":
        return transcribe(worker, models, command["method"], command["clips"], command["max_new_tokens"])
    raise ValueError(f"unknown real task {command['task']!r}")


# ---- the driver side


def plan_of(case, quick):
    """(repetitions, new tokens at most) of a case."""
    return PLAN[case][1 if quick else 0]


def full_scale(result):
    """How much more a full run measures than a QUICK run, for a QUICK run's measurement of a real case (for
    `benchkit.estimate`): the ratio of repetitions times the ratio of new tokens; the warm-up stays."""
    if result.get("phase") != "real":
        return 1.0
    (reps, tokens), (quick_reps, quick_tokens) = PLAN[result["case"].split(":", 1)[1]]
    return reps * tokens / (quick_reps * quick_tokens)


def sequence(case, rep, peer):
    """The runs of one repetition of a case, as (side, method, label): the label names the measurement; the fork's
    second greedy run ("greedy-again") gives the noise floor. Reversed every other repetition, so that each ratio's
    runs stay next to each other."""
    if case in ("lookup-grounded", "lookup-open"):
        runs = [("patched", "greedy", "greedy"), ("patched", "lookup", "lookup")]
        if peer:
            runs.append((PEER, "lookup", "peer-lookup"))
        runs.append(("patched", "greedy", "greedy-again"))
    elif case == "lookup-batch":
        runs = [("patched", "greedy", "greedy"), ("patched", "lookup", "lookup")]
    else:
        runs = [("patched", "greedy", "greedy"), ("patched", "assisted", "assisted")]
    return runs if rep % 2 == 0 else runs[::-1]


def _command(case, method, tokens, warmup=False):
    """The worker command of one run; a warm-up runs the first prompt or clip alone (a batch stays whole)."""
    if case == "real-asr":
        clips = list(CLIPS[:1] if warmup else CLIPS)
        return {"op": "real", "task": "asr", "method": method, "clips": clips, "max_new_tokens": tokens}
    prompts = list(prompts_of(case).values())
    return {
        "op": "real",
        "task": "generate",
        "method": method,
        "prompts": prompts[:1] if warmup and case != "lookup-batch" else prompts,
        "max_new_tokens": tokens,
        "batch": case == "lookup-batch",
    }


def check_tokens(case, label, answer, reference):
    """SystemExit, loudly, where a run's tokens are not the fork's greedy tokens."""
    if "failed" in answer:
        raise SystemExit(f"bench: {case} {label} FAILED: {answer['failed']}")
    if answer["rows"] != reference["rows"]:
        differing = [row for row, (a, b) in enumerate(zip(answer["rows"], reference["rows"], strict=False)) if a != b]
        raise SystemExit(
            f"bench: {case}: {label} DID NOT RETURN THE FORK'S GREEDY TOKENS (rows {differing or 'count'}): "
            f"{answer['rows'][differing[0]] if differing else len(answer['rows'])} vs "
            f"{reference['rows'][differing[0]] if differing else len(reference['rows'])}"
        )


def run(bench, cases):
    """Measures the real cases with the run's workers (`benchkit.measure.Bench`): warm-up, a peer probe, the
    repetitions; appends every measurement to `bench.results` (phase "real") and returns the run's account."""
    quick = bench.quick
    peer = PEER if PEER in bench.workers else None
    meta = {"cases": list(cases), "peer": peer, "plan": {}, "dir": str(models_dir()), "lookup_tokens": LOOKUP_TOKENS}
    started = bench.elapsed()
    print(f"[{bench.elapsed():6.0f}s] real checkpoints: {', '.join(cases)}", flush=True)

    def ask(side, case, method, label, tokens, phase, rep=None):
        answer = bench.workers[side].ask(_command(case, method, tokens, warmup=phase != "real"))
        answer.update(side=side, phase=phase, case=f"real:{case}", label=label, rep=rep, max_new_tokens=tokens)
        bench.results.append(answer)
        return answer

    for case in cases:
        reps, tokens = plan_of(case, quick)
        meta["plan"][case] = {"reps": reps, "tokens": tokens}
        case_peer = peer if case in ("lookup-grounded", "lookup-open") else None
        if case == "lookup-batch" and peer:
            probe = ask(peer, case, "lookup", "peer-probe", WARMUP_TOKENS, "real-probe")
            meta["batch_probe"] = probe.get("failed", "accepted the batch")
            print(f"[{bench.elapsed():6.0f}s] {case}: {peer} on a batch of 8: {meta['batch_probe'][:120]}", flush=True)
        for side, method, _ in sequence(case, 0, case_peer):
            ask(side, case, method, "warmup", WARMUP_TOKENS, "real-warmup")
        for rep in range(reps):
            answers = {}
            for side, method, label in sequence(case, rep, case_peer):
                answers[label] = ask(side, case, method, label, tokens, "real", rep)
            for label, found in answers.items():
                if label != "greedy":
                    check_tokens(case, label, found, answers["greedy"])
            greedy = answers["greedy"]
            other = "assisted" if "assisted" in answers else "lookup"
            unit, per = ("clip", "per_clip") if case == "real-asr" else ("tok", "per_token")
            print(
                f"[{bench.elapsed():6.0f}s] real   {case:<15} rep {rep}  "
                + "  ".join(f"{label} {answers[label][per] * 1e3:7.2f}" for label in answers)
                + f" ms/{unit}  {other}/greedy {answers[other][per] / greedy[per]:.3f}",
                flush=True,
            )
    meta["seconds"] = bench.elapsed() - started
    return meta


def _median(values):
    return statistics.median(values) if values else float("nan")


def _summary(values):
    return (_median(values), min(values), max(values)) if values else None


def _count(measured):
    """What a measurement's time is divided by: its generated tokens, or its clips (real-asr)."""
    return measured["generated"] if "generated" in measured else len(measured["texts"])


def summarize_real(results):
    """{case: row} of the real cases' measurements: per label the median time per token (per clip for real-asr) and
    target forwards per token, the paired ratios per repetition, the fork's account of its calls."""
    runs = {}
    for result in results:
        if result.get("phase") == "real" and "failed" not in result:
            case = result["case"].split(":", 1)[1]
            runs.setdefault(case, {}).setdefault(result["rep"], {})[result["label"]] = result
    table = {}
    for case, reps in runs.items():
        per = "per_clip" if case == "real-asr" else "per_token"
        other = {"lookup-batch": "lookup", "real-assisted": "assisted", "real-asr": "assisted"}.get(case, "lookup")

        def ratios(top, bottom, reps=reps, per=per):
            return _summary(
                [rep[top][per] / rep[bottom][per] for rep in reps.values() if top in rep and bottom in rep]
            )

        labels = sorted({label for rep in reps.values() for label in rep})
        row = {"reps": len(reps), "labels": {}}
        for label in labels:
            measured = [rep[label] for rep in reps.values() if label in rep]
            row["labels"][label] = {
                "time": _median([m[per] for m in measured]),
                "target_forwards": _median([m["target_calls"] / _count(m) for m in measured]),
                "outside": _median([(m["time"] - m["forward_time"]) / _count(m) for m in measured]),
                # the model's forwards (and the draft's, when there is one) per forward of the model
                "per_forward": _median([m["forward_time"] / m["target_calls"] for m in measured if m["target_calls"]]),
            }
        first = next(iter(reps.values()))
        row["generated"] = first["greedy"].get("generated")
        row["ratio"] = ratios(other, "greedy")
        row["noise"] = ratios("greedy-again", "greedy")
        row["peer"] = ratios("lookup", "peer-lookup")
        row["stats"] = first[other].get("stats")
        row["texts"] = first["greedy"].get("texts")
        table[case] = row
    return table


def _ratio(values, digits=3):
    return "-" if values is None else f"{values[0]:.{digits}f} ({values[1]:.{digits}f}-{values[2]:.{digits}f})"


def _verdict(values, limit, strict=False):
    if values is None:
        return f"target {'<' if strict else '<='} {limit:g}: n/a"
    met = values[0] < limit if strict else values[0] <= limit
    return f"target {'<' if strict else '<='} {limit:g}: {'met' if met else 'NOT met'}"


def _noise(row):
    return f"noise floor (the fork's greedy against itself) {_ratio(row['noise'])}" if row.get("noise") else ""


def schedule_text(stats):
    """The fork's account of a case's calls, as 'rounds/drafted/accepted' per call with the schedule and stops."""
    stats = [s for s in stats or [] if s]
    if not stats:
        return "-"
    calls = ", ".join(f"{s['num_rounds']}/{s['num_drafted']}/{s['num_accepted']}" for s in stats)
    stops = [s["stop_reason"] for s in stats if s.get("stop_reason")]
    text = f"schedule `{stats[0]['schedule']}`, rounds/drafted/accepted per call {calls}"
    if not stops:
        return text + "; no call stopped drafting"
    return text + f"; stopped drafting in {len(stops)} of {len(stats)} calls, the first because: {stops[0]}"


def time_text(row):
    """Where a lookup case's time goes: the fork's forwards per token, their cost each, and the rest per token, for
    greedy search and prompt lookup."""
    labels = row["labels"]
    parts = []
    for label in ("greedy", "lookup"):
        if label in labels:
            values = labels[label]
            parts.append(
                f"{label} {values['target_forwards']:.3f} forwards/token x {values['per_forward'] * 1e3:.1f} ms, "
                f"{values['outside'] * 1e3:.2f} ms/token outside the forwards"
            )
    return "; ".join(parts)


def real_lines(table, meta):
    """The closing lines of the real cases (the targets beside them, met or not)."""
    if not meta:
        return []
    if meta.get("skipped"):
        return [f"real checkpoints: SKIPPED ({meta['skipped']})"]
    lines = []
    plan = meta["plan"]
    for case, name, limit in (("lookup-grounded", "grounded", "grounded"), ("lookup-open", "open-ended", "open")):
        row = table.get(case)
        if row is None:
            continue
        verdict = _verdict(row["ratio"], TARGETS[limit])
        lines.append(
            f"prompt lookup/greedy time per token, {name}: {_ratio(row['ratio'])}, {verdict}"
            f"; {_noise(row)}; median of {row['reps']} paired runs; SmolLM2-135M-Instruct, {plan[case]['tokens']} "
            f"new tokens at most, {len(prompts_of(case))} prompts"
        )
    row = table.get("lookup-grounded")
    if row is not None and row["peer"] is not None:
        verdict = _verdict(row["peer"], TARGETS["peer"])
        lines.append(
            f"prompt lookup patched/5.23.0 time per token: {_ratio(row['peer'])}, {verdict}"
            f"; {_noise(row)}; grounded prompts, 5.23.0 with eager attention, median of {row['reps']} paired runs"
        )
    for case, name in (("lookup-grounded", "grounded"), ("lookup-open", "open-ended")):
        row = table.get(case)
        if row is None:
            continue
        forwards = row["labels"]
        text = f"prompt lookup target forwards per token, {name}: patched {forwards['lookup']['target_forwards']:.3f}"
        if "peer-lookup" in forwards:
            text += f", 5.23.0 {forwards['peer-lookup']['target_forwards']:.3f}"
        lines.append(text + f" (greedy 1.000); {schedule_text(row['stats'])}")
    for case, name in (("lookup-grounded", "grounded"), ("lookup-open", "open-ended")):
        row = table.get(case)
        if row is not None:
            lines.append(f"prompt lookup, where the time goes, {name}: {time_text(row)}")
    row = table.get("lookup-batch")
    if row is not None:
        verdict = _verdict(row["ratio"], TARGETS["batch"], strict=True)
        lines.append(
            f"prompt lookup/greedy time per token, batch 8 (left padded, the fork's batched greedy search): "
            f"{_ratio(row['ratio'])}, {verdict}; median of {row['reps']} "
            f"paired runs; {schedule_text(row['stats'])}; 5.23.0: {meta.get('batch_probe', 'not asked')[:100]}"
        )
    row = table.get("real-assisted")
    if row is not None:
        lines.append(
            f"assisted/greedy time per token, SmolLM2 + its first {DRAFT_LAYERS} layers: {_ratio(row['ratio'])}; "
            f"median of {row['reps']} paired runs, {len(ASSISTED_PROMPTS)} prompts; {schedule_text(row['stats'])}"
        )
    row = table.get("real-asr")
    if row is not None:
        lines.append(
            f"assisted/greedy pipeline time per clip, Whisper base + {WHISPER_DRAFT_LAYERS}-decoder-layer "
            f"shared-encoder assistant: {_ratio(row['ratio'])}; median of {row['reps']} paired runs, {len(CLIPS)} "
            f"clips; {schedule_text(row['stats'])}"
        )
    return lines


def real_section(table, meta):
    """The section of benchmarks.md on the real checkpoints (empty when none ran)."""
    if not meta:
        return []
    lines = ["## Real checkpoints", ""]
    if meta.get("skipped"):
        return lines + [f"Not measured: {meta['skipped']}.", ""]
    lines += [
        "SmolLM2-135M-Instruct and Whisper base from `make real-models`; the cases and prompts are in "
        "[benchmarks-real.md](benchmarks-real.md). Paired medians (min-max); every side returned the fork's greedy "
        f"tokens. Prompt lookup drafts {LOOKUP_TOKENS} tokens from n-grams of 2 at most, on every side.",
        "",
        "| case | reps | new tokens at most | greedy ms/tok (real-asr: ms/clip) | other sides, the same unit | ratio "
        "| noise floor | target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case, row in table.items():
        unit = 1e3
        other = {"lookup-batch": "lookup", "real-assisted": "assisted", "real-asr": "assisted"}.get(case, "lookup")
        labels = row["labels"]
        others = "; ".join(
            f"{labels[label]['time'] * unit:.2f} ({label})"
            for label in ("lookup", "peer-lookup", "assisted")
            if label in labels
        )
        limit = {"lookup-grounded": TARGETS["grounded"], "lookup-open": TARGETS["open"], "lookup-batch": 1.0}.get(case)
        target = _verdict(row["ratio"], limit, strict=case == "lookup-batch") if limit else "-"
        lines.append(
            f"| `{case}` | {row['reps']} | {meta['plan'][case]['tokens']} | {labels['greedy']['time'] * unit:.2f} "
            f"| {others} | {other}/greedy {_ratio(row['ratio'])} | {_ratio(row['noise'])} | {target} |"
        )
    lines.append("")
    # The judged lines are the table's last column (and the page's verdicts); the others say what the fork did.
    shown = [line for line in real_lines(table, meta) if "target <" not in line and "where the time goes" not in line]
    lines += [f"- {line.split(', the first because: ')[0].split('; schedule `prompt_lookup`')[0]}" for line in shown]
    lines.append("")
    return lines
