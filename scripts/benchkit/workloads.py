"""What the benchmark runs: model pairs (a target and its assistant, with a prompt) and cases (a pair and a number of
new tokens), and the batch table's prompts.

Adding a workload is one change here: a new pair is a builder decorated with `@pair` (the worker calls it in every
side's interpreter, so it builds from config classes under a fixed seed, or loads saved files; torch and transformers
are imported inside it), and a case is one `Case(...)` line in CASES. The driver imports this module without torch.
"""

import copy
import os
from dataclasses import dataclass
from typing import Callable

from . import train

PROMPT_LENGTH = 16
MAX_POSITIONS = 2048  # prompt + 1024 new tokens + the largest candidate block fit comfortably
PERTURBATION = float(os.environ.get("BENCH_PERTURBATION", "0.15"))  # noise scale of the partial-acceptance assistant
TRAINED_PROMPT_LENGTH = 64


class Builder:
    """What a pair's builder gets: the worker's device and dtype, the trained pair (its directory and prompt), and the
    side's attention implementation (None: the version's default), which every model it builds runs."""

    def __init__(self, device, dtype, trained=None, attention=None):
        self.device = device
        self.dtype = dtype
        self.trained = trained
        self.attention = attention
        self.cache = {}  # models shared by several pairs (the GPT-2 small target)

    def finish(self, model):
        return model.to(device=self.device, dtype=self.dtype).eval()

    def model(self, model_class, config):
        """`model_class(config)` with the side's attention, on the device, in eval mode."""
        if self.attention is not None:
            if not hasattr(config, "_attn_implementation"):
                import transformers

                raise ValueError(
                    f"transformers {transformers.__version__} has no attention implementations to choose from "
                    f"(asked for {self.attention!r})"
                )
            config._attn_implementation = self.attention
        return self.finish(model_class(config))

    def pretrained(self, path):
        from transformers import AutoModelForCausalLM

        kwargs = {"attn_implementation": self.attention} if self.attention is not None else {}
        return self.finish(AutoModelForCausalLM.from_pretrained(path, **kwargs))

    def prompt(self, vocab_size):
        """A random prompt of PROMPT_LENGTH tokens, all-ones attention mask."""
        import torch

        generator = torch.Generator().manual_seed(2)
        input_ids = torch.randint(0, vocab_size, (1, PROMPT_LENGTH), generator=generator).to(self.device)
        return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}


@dataclass(frozen=True)
class Pair:
    name: str
    build: Callable  # Builder -> (target, assistant, prompt kwargs)
    greedy: str  # the pair whose target's greedy run is this pair's baseline (pairs sharing a target share it)


PAIRS = {}


def pair(name, greedy=None):
    def register(build):
        PAIRS[name] = Pair(name, build, greedy or name)
        return build

    return register


def _gpt2_small(b):
    # GPT-2 small: 12 layers, 768 wide, 12 heads, 50257-token vocabulary (~124M parameters with 1024 positions).
    if "gpt2" not in b.cache:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        b.cache["gpt2"] = b.model(GPT2LMHeadModel, GPT2Config(n_positions=MAX_POSITIONS))
    return b.cache["gpt2"]


def _perturbed(model, scale, seed):
    # A copy of the target with Gaussian noise on every weight: it agrees with the target on part of the tokens.
    import torch

    copied = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in copied.parameters():
            noise = torch.randn(parameter.shape, generator=generator, dtype=torch.float32)
            noise = noise.to(device=parameter.device, dtype=parameter.dtype)
            parameter.add_(noise * (parameter.float().std() * scale).to(parameter.dtype))
    return copied


@pair("draft")
def _draft(b):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    target = _gpt2_small(b)
    # A small draft with the same vocabulary: 2 layers, 256 wide (~14M parameters, most of them the embedding).
    torch.manual_seed(1)
    draft = b.model(GPT2LMHeadModel, GPT2Config(n_positions=MAX_POSITIONS, n_layer=2, n_embd=256, n_head=4))
    return target, draft, b.prompt(target.config.vocab_size)


@pair("self", greedy="draft")
def _self(b):
    target = _gpt2_small(b)
    return target, target, b.prompt(target.config.vocab_size)


@pair("partial", greedy="draft")
def _partial(b):
    target = _gpt2_small(b)
    return target, _perturbed(target, PERTURBATION, seed=3), b.prompt(target.config.vocab_size)


@pair("encdec")
def _encdec(b):
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    # T5-small-like target (6+6 layers, 512 wide, ~60M parameters) and a 2+2-layer, 256-wide draft.
    torch.manual_seed(4)
    target = b.model(T5ForConditionalGeneration, T5Config(decoder_start_token_id=0))
    torch.manual_seed(5)
    small = T5Config(d_model=256, d_ff=1024, d_kv=32, num_layers=2, num_heads=8, decoder_start_token_id=0)
    return target, b.model(T5ForConditionalGeneration, small), b.prompt(target.config.vocab_size)


@pair("loop")
def _loop(b):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    # Models so small that the forwards cost about as much as the Python around them: the loop's own cost per round
    # shows here as it would next to the fast forwards of an accelerator.
    torch.manual_seed(6)
    config = GPT2Config(n_positions=MAX_POSITIONS, n_layer=2, n_embd=64, n_head=2, vocab_size=1000)
    target = b.model(GPT2LMHeadModel, config)
    torch.manual_seed(7)
    small = GPT2Config(n_positions=MAX_POSITIONS, n_layer=1, n_embd=32, n_head=2, vocab_size=1000)
    return target, b.model(GPT2LMHeadModel, small), b.prompt(target.config.vocab_size)


def _trained_target(b):
    if not b.trained:
        raise ValueError("the trained workloads need the directory of the trained models")
    if "trained" not in b.cache:
        b.cache["trained"] = b.pretrained(os.path.join(b.trained["dir"], "target"))
    return b.cache["trained"]


def _trained_prompt(b):
    import torch

    input_ids = torch.tensor([b.trained["prompt"]], dtype=torch.long, device=b.device)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}


@pair("trained")
def _trained(b):
    # The byte-level pair of `benchkit.train`: a target and a draft distilled from its greedy outputs.
    target = _trained_target(b)
    return target, b.pretrained(os.path.join(b.trained["dir"], "draft")), _trained_prompt(b)


@pair("trained-sampling", greedy="trained")
def _trained_sampling(b):
    # The same target with the draft distilled on its distributions (`benchkit.train.ensure_sampling`).
    target = _trained_target(b)
    if not b.trained.get("sampling_dir"):
        raise ValueError("the trained-sampling workload needs the directory of the sampling draft")
    return target, b.pretrained(os.path.join(b.trained["sampling_dir"], "draft")), _trained_prompt(b)


# The batched speech recognition case (`asr-batch`): random Whisper pairs built from configs (`ASR_WORKLOADS`), a
# tokenizer built here from a byte-level vocabulary (nothing downloaded), the default feature extractor, synthetic
# audio (`asr_parts`). Every batch size transcribes the same ASR_RECORDINGS recordings (as many as the largest batch
# holds).
ASR_BATCH_SIZES = (1, 4, 8)
ASR_RECORDINGS = 8
ASR_SECONDS = [2.0, 3.0, 2.5, 3.5]  # row r: ASR_SECONDS[r % 4] seconds of a sine at 220 + 110 r Hz plus noise
# Its targets, assisted over greedy time per row (the median of the ratios paired per repetition): with any pair (the
# whisper pair, ASR_ANY_PAIR), at most ASR_EACH_TARGET at every batch size: the pipeline with an assistant never
# loses; with a pair that agrees (ASR_AGREEING_PAIR), below the limit of ASR_LARGEST_TARGET, as (batch_size, limit),
# there: faster.
ASR_EACH_TARGET = 1.05
ASR_LARGEST_TARGET = (8, 1.0)
ASR_ANY_PAIR = "whisper"
ASR_AGREEING_PAIR = "whisper-shared"
ASR_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|startoftranscript|>",
    "<|en|>",
    "<|transcribe|>",
    "<|translate|>",
    "<|notimestamps|>",
]
# Narrow, with one encoder layer: the encoder runs on 30 s of features (1500 positions) whatever the recording's
# length, once per batch and model, and would otherwise outweigh the decoding that assisted generation speeds up.
ASR_TARGET = {"d_model": 128, "encoder_layers": 1, "decoder_layers": 4}
ASR_ASSISTANT = {"d_model": 128, "encoder_layers": 1, "decoder_layers": 1}
# The whisper pair in words (`_whisper`): random weights but for the assistant's token embeddings, the target's.
ASR_PAIR = (
    f"random Whisper ({ASR_TARGET['encoder_layers']}+{ASR_TARGET['decoder_layers']} layers, "
    f"{ASR_TARGET['d_model']} wide) + random "
    f"{ASR_ASSISTANT['encoder_layers']}+{ASR_ASSISTANT['decoder_layers']}-layer assistant with a copy of its token "
    "embeddings"
)


def _byte_unicode():
    """GPT-2's byte-to-character table (the byte-level BPE vocabularies' alphabet), rebuilt here."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def asr_tokenizer():
    """A WhisperTokenizer over the 256 bytes and Whisper's special tokens, from files written to a temporary
    directory (no merges: one token per byte)."""
    import json
    import tempfile

    from transformers import WhisperTokenizer

    vocab = {char: byte for byte, char in _byte_unicode().items()}
    vocab.update({token: 256 + index for index, token in enumerate(ASR_SPECIAL_TOKENS)})
    with tempfile.TemporaryDirectory() as directory:
        vocab_file = os.path.join(directory, "vocab.json")
        merges_file = os.path.join(directory, "merges.txt")
        with open(vocab_file, "w", encoding="utf-8") as handle:
            json.dump(vocab, handle)
        with open(merges_file, "w", encoding="utf-8") as handle:
            handle.write("#version: 0.2\n")
        return WhisperTokenizer(
            vocab_file, merges_file, additional_special_tokens=ASR_SPECIAL_TOKENS[1:], pad_token="<|endoftext|>"
        )


def asr_audio(rows):
    """`rows` seconds-long synthetic recordings at 16 kHz (float32 numpy arrays), seeded."""
    import numpy

    generator = numpy.random.default_rng(8)
    audio = []
    for row in range(rows):
        time = numpy.arange(int(ASR_SECONDS[row % len(ASR_SECONDS)] * 16000)) / 16000
        tone = 0.5 * numpy.sin(2 * numpy.pi * (220 + 110 * row) * time)
        audio.append((tone + 0.05 * generator.standard_normal(time.shape)).astype(numpy.float32))
    return audio


def _whisper_config(shape, heads=2):
    """A WhisperConfig of `shape` (d_model, encoder_layers, decoder_layers) over the byte-level vocabulary of
    `asr_tokenizer`, with 30 s of features (1500 encoder positions) and nothing suppressed."""
    from transformers import WhisperConfig

    special = {token: 256 + index for index, token in enumerate(ASR_SPECIAL_TOKENS)}
    return WhisperConfig(
        vocab_size=256 + len(ASR_SPECIAL_TOKENS),
        num_mel_bins=80,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=4 * shape["d_model"],
        decoder_ffn_dim=4 * shape["d_model"],
        max_source_positions=1500,
        max_target_positions=448,
        pad_token_id=special["<|endoftext|>"],
        bos_token_id=special["<|endoftext|>"],
        eos_token_id=special["<|endoftext|>"],
        decoder_start_token_id=special["<|startoftranscript|>"],
        begin_suppress_tokens=None,
        suppress_tokens=None,
        **shape,
    )


def _whisper_features(b, audio):
    """The input features of `audio` (a list of recordings) as the default feature extractor makes them."""
    from transformers import WhisperFeatureExtractor

    features = WhisperFeatureExtractor()(audio, sampling_rate=16000, return_tensors="pt").input_features
    return {"input_features": features.to(device=b.device, dtype=b.dtype)}


def asr_parts(b):
    """The speech recognition pipeline's parts other than the model, built once per builder (b.cache["whisper-parts"]):
    the tokenizer (`asr_tokenizer`), the default feature extractor and the ASR_RECORDINGS recordings. Every Whisper
    pair here has the vocabulary of `_whisper_config` (the tokenizer's 262 tokens) and its 80 mel bins, so they serve
    all of them. Nothing in them draws from torch's generator: building them first or last leaves the weights alone."""
    if "whisper-parts" not in b.cache:
        from transformers import WhisperFeatureExtractor

        b.cache["whisper-parts"] = {
            "tokenizer": asr_tokenizer(),
            "feature_extractor": WhisperFeatureExtractor(),
            "audio": asr_audio(ASR_RECORDINGS),
        }
    return b.cache["whisper-parts"]


@pair("whisper")
def _whisper(b):
    # A Whisper target (1+4 layers, 128 wide) and a 1+1-layer assistant of the same width and vocabulary; the
    # assistant shares the target's token embeddings (tied to the output layer), so that it agrees with it on part of
    # the tokens.
    import torch
    from transformers import WhisperForConditionalGeneration

    torch.manual_seed(10)
    target = b.model(WhisperForConditionalGeneration, _whisper_config(ASR_TARGET))
    torch.manual_seed(11)
    assistant = b.model(WhisperForConditionalGeneration, _whisper_config(ASR_ASSISTANT))
    with torch.no_grad():
        assistant.get_decoder().embed_tokens.weight.copy_(target.get_decoder().embed_tokens.weight)
    for model in (target, assistant):
        model.generation_config.forced_decoder_ids = None
    return target, assistant, _whisper_features(b, asr_parts(b)["audio"][:1])


# The distil-whisper-shaped pairs (`whisper-shared`, `whisper-own`, `whisper-own-poor`): a Whisper target whose
# decoder layers cost more per token than its output projection (384 wide, 6 heads, 4 decoder layers over the
# 262-token byte-level vocabulary), and an assistant made as distil-whisper is, from the target's encoder and the first
# of its decoder layers. In the target, decoder layers 2-4 add nothing to the residual stream (their output
# projections are zero): the target and the assistant compute the same function, so that the assistant's every
# candidate is accepted, while the target still runs all four layers. Nothing in them is tied to a release: built from
# configs under fixed seeds, prompted with the features of the first `asr_audio` recording.
DISTIL_TARGET = {"d_model": 384, "encoder_layers": 1, "decoder_layers": 4}
DISTIL_ASSISTANT = {"d_model": 384, "encoder_layers": 1, "decoder_layers": 1}
DISTIL_HEADS = 6


def _distil_target(b):
    if "distil-whisper" not in b.cache:
        import torch
        from transformers import WhisperForConditionalGeneration

        torch.manual_seed(12)
        target = b.model(WhisperForConditionalGeneration, _whisper_config(DISTIL_TARGET, DISTIL_HEADS))
        with torch.no_grad():
            for layer in target.get_decoder().layers[1:]:
                for projection in (layer.self_attn.out_proj, layer.encoder_attn.out_proj, layer.fc2):
                    projection.weight.zero_()
                    if projection.bias is not None:
                        projection.bias.zero_()
        target.generation_config.forced_decoder_ids = None
        b.cache["distil-whisper"] = (target, _whisper_features(b, asr_audio(1)))
    return b.cache["distil-whisper"]


def _distil_assistant(b, seed, copy_of=None):
    """A 1+1-layer assistant of the distil target's width, seeded; with `copy_of` (the target), its encoder and its
    decoder's embeddings, positions, first layer and final layer norm are copies of the target's (modules of its own,
    the weights copied)."""
    import torch
    from transformers import WhisperForConditionalGeneration

    torch.manual_seed(seed)
    assistant = b.model(WhisperForConditionalGeneration, _whisper_config(DISTIL_ASSISTANT, DISTIL_HEADS))
    if copy_of is not None:
        with torch.no_grad():
            assistant.get_encoder().load_state_dict(copy_of.get_encoder().state_dict())
            decoder, source = assistant.get_decoder(), copy_of.get_decoder()
            for name in ("embed_tokens", "embed_positions", "layer_norm"):
                getattr(decoder, name).load_state_dict(getattr(source, name).state_dict())
            decoder.layers[0].load_state_dict(source.layers[0].state_dict())
    assistant.generation_config.forced_decoder_ids = None
    return assistant


@pair("whisper-shared")
def _whisper_shared(b):
    # The assistant runs the target's encoder module: the fork reuses the target's encoder outputs.
    target, prompt = _distil_target(b)
    assistant = _distil_assistant(b, 13, copy_of=target)
    assistant.model.encoder = target.model.encoder
    return target, assistant, prompt


@pair("whisper-own", greedy="whisper-shared")
def _whisper_own(b):
    # The same assistant with an encoder of its own (a copy): the fork runs it at the first draft, if ever.
    target, prompt = _distil_target(b)
    return target, _distil_assistant(b, 13, copy_of=target), prompt


@pair("whisper-own-poor", greedy="whisper-shared")
def _whisper_own_poor(b):
    # An assistant of the same shape with random weights of its own (encoder included): it agrees with the target
    # by chance only.
    target, prompt = _distil_target(b)
    return target, _distil_assistant(b, 14), prompt


TRAINED_PAIRS = ("trained", "trained-sampling")  # what needs `scripts/bench_train.py` (the second: --sampling)
TRAINED_PAIR = (
    "trained byte-level GPT-2 ({0[n_layer]}x{0[n_embd]}) + distilled draft ({1[n_layer]}x{1[n_embd]})".format(
        train.SETTINGS["target"], train.SETTINGS["draft"]
    )
)


@dataclass(frozen=True)
class Case:
    """A pair and a number of new tokens (`quick_tokens` in a QUICK run). `group`: how many repetitions it gets
    (`benchkit.measure.FULL`); `count_ops`: its operations outside the forwards are counted; `poor_draft`: a draft that
    does not pay (it disagrees, half agrees, or costs what the target costs), where assisted decoding must lose little
    against greedy search; `best_constant`: a draft that pays, where the patched fork also runs with constant draft
    lengths (`--constant-draft`, sides patched-kN) to find the best one in hindsight; `temperature`: a sampling case
    (top_k 0: the whole distribution), seeded per repetition, whose reference is plain sampling on the patched fork;
    `peers`: the only upstream sides that run it (None: all of them); `kind` "asr": batched speech recognition
    through the pipeline, measured apart from the repetitions of the generate cases; "real": a case on the real
    checkpoints (`benchkit.real`), measured apart too."""

    name: str
    pair: str
    tokens: int
    quick_tokens: int
    description: str
    group: str  # "headline", "short", "sampling", "cheap", "whisper" or "costly"
    count_ops: bool = False
    poor_draft: bool = False
    best_constant: bool = False
    temperature: float | None = None
    peers: tuple | None = None
    kind: str = "generate"  # "asr": `benchkit.measure.Bench.asr_table`; "real": `benchkit.real`

    @property
    def sampling(self):
        return self.temperature is not None

    def new_tokens(self, quick):
        return self.quick_tokens if quick else self.tokens

    def greedy_key(self, quick):
        """(pair, tokens) of the greedy run this case is measured against; (pair, tokens, temperature) of the plain
        sampling run for a sampling case."""
        if self.sampling:
            return PAIRS[self.pair].greedy, self.new_tokens(quick), self.temperature
        return PAIRS[self.pair].greedy, self.new_tokens(quick)

    @property
    def reference_method(self):
        """The method of the reference runs: greedy search, or plain sampling for a sampling case."""
        return "sample" if self.sampling else "greedy"


CASES = {
    case.name: case
    for case in [
        Case("trained", "trained", 128, 128, TRAINED_PAIR, "headline", count_ops=True, best_constant=True),
        Case("trained-16", "trained", 16, 16, "the same pair, 16 new tokens", "headline", count_ops=True),
        Case("draft", "draft", 128, 32, "random GPT-2 small (124M) + 2-layer draft (14M)", "costly", poor_draft=True),
        Case("draft-16", "draft", 16, 16, "the same pair, 16 new tokens", "short", poor_draft=True),
        Case("self", "self", 128, 32, "GPT-2 small as its own assistant", "costly", poor_draft=True),
        Case("partial", "partial", 128, 32, "GPT-2 small + noisy copy of itself", "costly", poor_draft=True),
        Case(
            "encdec",
            "encdec",
            128,
            32,
            "random T5-small-like (60M) + 2+2-layer T5 draft",
            "cheap",
            count_ops=True,
            best_constant=True,
        ),
        Case(
            "loop",
            "loop",
            1024,
            256,
            "tiny GPT-2 (2x64) + 1-layer draft: the loop's own cost dominates",
            "cheap",
            count_ops=True,
        ),
    ]
}
SAMPLING_PEERS = ("5.23.0",)  # the newest release, as shipped: its own speculative sampling
SAMPLING_DRAFT = "draft distilled on the target's distributions (KL, 1x64)"
for _temperature in (1.0, 0.7):
    CASES[f"sampling-t{_temperature}"] = Case(
        f"sampling-t{_temperature}",
        "trained-sampling",
        128,
        128,
        f"the trained target sampling at temperature {_temperature} (top_k 0) + {SAMPLING_DRAFT}",
        "sampling",
        temperature=_temperature,
        peers=SAMPLING_PEERS,
    )
CASES["sampling-t0.7-greedy-draft"] = Case(
    "sampling-t0.7-greedy-draft",
    "trained",
    128,
    128,
    "the trained target sampling at temperature 0.7 (top_k 0) + the trained case's draft (distilled on greedy "
    "outputs): why the sampling cases have a draft of their own",
    "cheap",
    temperature=0.7,
    peers=SAMPLING_PEERS,
)
CASES["asr-batch"] = Case(
    "asr-batch",
    ASR_ANY_PAIR,
    128,
    32,
    "the whisper pair and the distil-whisper-shaped pair sharing the encoder, through the speech recognition "
    f"pipeline, batch_size {'/'.join(map(str, ASR_BATCH_SIZES))}: batched assisted against batched greedy "
    "transcription at each",
    "asr",
    kind="asr",
)
# The distil-whisper-shaped cases. Upstream 4.35.2 and 4.36.2 run the same heuristic on them (the same rounds and
# candidates): 4.36.2, the newer, stands for both. 5.23.0 is left out: its Whisper `generate` returns the sequences
# without the decoder start token, so that its tokens cannot be checked against the other sides' greedy search.
DISTIL_PEERS = ("4.36.2",)
CASES["whisper-shared"] = Case(
    "whisper-shared",
    "whisper-shared",
    96,
    32,
    "distil-whisper-shaped Whisper (1+4 layers, 384 wide) + its 1+1-layer copy (the encoder and the first decoder "
    "layer; the target's other layers add nothing, so every candidate is accepted), the assistant sharing the "
    "target's encoder module",
    "whisper",
    peers=DISTIL_PEERS,
)
CASES["whisper-own"] = Case(
    "whisper-own",
    "whisper-own",
    96,
    32,
    "the same pair, the assistant with an encoder of its own (a copy of the target's)",
    "whisper",
    peers=DISTIL_PEERS,
)
CASES["whisper-own-poor"] = Case(
    "whisper-own-poor",
    "whisper-own-poor",
    96,
    32,
    "the same target + a random 1+1-layer assistant of the same shape with an encoder of its own",
    "whisper",
    count_ops=True,
    poor_draft=True,
    peers=DISTIL_PEERS,
)


@dataclass(frozen=True)
class AsrWorkload:
    """A pair the asr-batch case runs through the pipeline: `label`, its name in the closing lines; `description`;
    `tokens` and `quick_tokens`, its new tokens per row (in a QUICK run), None for the case's own; `reps`, the key of
    its number of repetitions in the plan (`benchkit.measure.FULL`, `QUICK`)."""

    label: str
    description: str
    tokens: int | None = None
    quick_tokens: int | None = None
    reps: str = "asr_reps"

    def new_tokens(self, quick):
        """Its new tokens per row, or the asr-batch case's."""
        own = self.quick_tokens if quick else self.tokens
        return own if own is not None else CASES["asr-batch"].new_tokens(quick)


# The pairs of the asr-batch case, in the order measured. The distil-whisper-shaped target's encoder (384 wide, on
# 1500 positions) costs about 0.3 s of CPU per recording whatever the tokens, 2.4 s of each call of eight: that pair
# gets fewer tokens and repetitions (`benchkit.measure.FULL`), so that the case stays within about 80 s on two cores;
# 64 tokens still leave decoding enough of a call's time for the assistant to show (about 0.9 times greedy's time
# at batch 8, 0.67 at batch 1).
ASR_WORKLOADS = {
    ASR_ANY_PAIR: AsrWorkload(
        "whisper pair",
        f"{ASR_PAIR}: not a pair that agrees throughout, its assistant agrees with the target on part of the tokens",
    ),
    ASR_AGREEING_PAIR: AsrWorkload(
        "distil-whisper-shaped pair sharing the encoder",
        f"{CASES[ASR_AGREEING_PAIR].description}: a pair that agrees",
        tokens=64,
        quick_tokens=32,
        reps="asr_agreeing_reps",
    ),
}
# The cases on the real checkpoints of `make real-models` (`benchkit.real`): measured apart, on the patched side and
# 5.23.0 with eager attention.
REAL_PEERS = ("5.23.0-eager",)
for _name, _description in (
    ("lookup-grounded", "prompt lookup decoding, SmolLM2-135M-Instruct, input-grounded requests (ChatML)"),
    ("lookup-open", "prompt lookup decoding, SmolLM2-135M-Instruct, open-ended questions (ChatML)"),
    (
        "lookup-batch",
        "prompt lookup decoding, SmolLM2-135M-Instruct, 8 input-grounded requests as one left-padded batch",
    ),
    ("real-assisted", "SmolLM2-135M-Instruct assisted by a draft of its first 8 layers"),
    ("real-asr", "the speech recognition pipeline, Whisper base + its first 2 decoder layers sharing its encoder"),
):
    CASES[_name] = Case(_name, "real", 64, 48, _description, "real", peers=REAL_PEERS, kind="real")
# The patched side's assisted decoding (its default schedule) against greedy search on these cases: the most time per
# token it may take, the median of the ratios paired per repetition, each next to its greedy run. (The poor draft's,
# 1.05, is judged with the other poor drafts.)
TARGETS = {
    "whisper-shared": ("distil-whisper shape, shared encoder", 0.893),  # 1.12 times greedy search's speed at least
    "whisper-own": ("distil-whisper shape, own encoder", 1.10),
}
POOR_DRAFT_LIMIT = 1.05
# A target is judged where the run's noise floor (greedy patched/stock, the same loop on both sides) is within this
# much of 1.
NOISE_TOLERANCE = 0.03
HEADLINE = "trained"
# Groups in the order their first repetitions run: the headline cases are the cheapest and get the most repetitions
# (their ratios are the run's verdict; a shared machine's noise spreads single ratios by 15% or more); the short
# poor-draft case many (a run of 16 tokens is short enough for the machine's noise to move its ratio by 10%, and a
# probe's cost is a few percent of it); the other cheap cases many; the distil-whisper-shaped cases, judged against
# targets of their own, a few more than the cheap ones (a call takes about a second); the GPT-2 small ones cost most
# of the run.
GROUPS = ["headline", "short", "sampling", "cheap", "whisper", "costly"]
SAMPLING_SEED = 1000  # the seed of repetition r is SAMPLING_SEED + r, the same on every side


def greedy_name(key):
    """The name of a reference run's measurements: greedy:PAIR:TOKENS, or sample:PAIR:TOKENS:tTEMPERATURE."""
    if len(key) == 3:
        return f"sample:{key[0]}:{key[1]}:t{key[2]}"
    return f"greedy:{key[0]}:{key[1]}"


def sampling_seed(rep):
    """The seed of a sampling run of repetition `rep` (None: the warm-up)."""
    return SAMPLING_SEED + (rep if rep is not None else -1)


# The batch table: the trained pair, B held-out prompts of different lengths, left padded.
BATCH_SIZES = [1, 4, 8]
# Row r of a batch: the first BATCH_PROMPT_LENGTHS[r % 8] bytes of the r-th held-out prompt (left padded).
BATCH_PROMPT_LENGTHS = [64, 40, 56, 32, 48, 60, 36, 52]


@dataclass(frozen=True)
class BatchMethod:
    """A way of the batch table: greedy or assisted, one batched call or one call per prompt (`separate`), and, for
    batched assisted decoding, the rows kept aligned (`aligned`: every row accepts as many candidates as the row
    that matches fewest, the fork's behaviour before rows kept their own; a switch private to the bench)."""

    method: str
    separate: bool = False
    aligned: bool = False


BATCH_METHODS = {
    "batched-assisted": BatchMethod("assisted"),  # rows of their own, where the model declares them (GPT-2 does)
    "aligned-assisted": BatchMethod("assisted", aligned=True),
    "batched-greedy": BatchMethod("greedy"),
    "separate-assisted": BatchMethod("assisted", separate=True),
    "separate-greedy": BatchMethod("greedy", separate=True),
}
# The batch table's targets, as (B, limit): batched assisted decoding faster than batched greedy search at B=8 (time
# per token, assisted over greedy, below 1); rows of their own at least 1.2 times as fast as aligned rows at B=4
# (aligned over own, time per token); the target forwards of a batch whose rows keep their own at most 1.10 times
# those of its slowest row alone, at B=4 and B=8.
BATCH_GREEDY_TARGET = (8, 1.0)
BATCH_ALIGNED_TARGET = (4, 1.2)
BATCH_FORWARDS_TARGET = ((4, 8), 1.10)

# The batch table's second variant, rows ending on an EOS: the same pair and prompts with an EOS token, so that the
# rows finish at different steps, as real batches do (without one every row runs to the length limit, and a batch
# that drops its finished rows gains nothing). The space byte: batched greedy rows of the 8 prompts end at new-token
# steps 66, 39, 118, 1, 1, 2, 43, 122 of 128 with the cached pair (key 1f911b528be0). The batched ways only, at the
# table's sizes among BATCH_EOS_SIZES (a batch of one row has no other rows to wait for), judged against the same
# targets as above.
BATCH_EOS_TOKEN = 32
BATCH_EOS_SIZES = [4, 8]
BATCH_EOS_METHODS = ["batched-assisted", "aligned-assisted", "batched-greedy"]


# The cache bound: the peak cache of batched assisted calls whose rows keep their own candidates, over batched greedy
# search's, at these batch sizes and constant draft lengths, over CACHE_BOUND_TOKENS new tokens per row, with drafts
# that agree rarely (the draft's architecture, untrained) and unevenly (the trained draft, noised); at most the limit.
CACHE_BOUND_SIZES = [4, 8]
CACHE_BOUND_DRAFT_LENGTHS = [4, 10]
CACHE_BOUND_TOKENS = 200
CACHE_BOUND_TARGET = 1.10


def trained_prompt():
    return train.prompts(1, TRAINED_PROMPT_LENGTH)[0]


def batch_prompts(count):
    """`count` held-out prompts of the trained pair, as the trained case takes its own, cut to different lengths."""
    chosen = train.prompts(count, TRAINED_PROMPT_LENGTH)
    return [prompt[: BATCH_PROMPT_LENGTHS[row % len(BATCH_PROMPT_LENGTHS)]] for row, prompt in enumerate(chosen)]
