"""Real checkpoints (`make real-models`) in the fork: they load, Whisper transcribes speech, SmolLM2 continues text.

The checkpoints are converted from registry packages (docs/real-models.md): SmolLM2-135M-Instruct from a GGUF file,
Whisper base and tiny.en from faster-whisper files, speech from Debian's pocketsphinx-testdata. Every test skips,
with the reason in capitals, when build/real-models/ holds no complete build (`support.real_models`).

Contract: each checkpoint loads with transformers' own classes and files (Whisper with the slow tokenizer that
`WhisperProcessor` takes, SmolLM2 with a fast tokenizer that round-trips text). Plain greedy `generate()` of both
Whisper models gives the pinned transcripts of two clips, which agree word for word with the package's transcripts
once case, punctuation and digits are normalised. SmolLM2's greedy continuation of "The capital of France is" is the
pinned, sensible one: that needs the rotary base of the config (`rope_theta`, 100000), so the test skips while
`LlamaConfig` has no `rope_theta`.
"""

from __future__ import annotations

import re
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import (
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    WhisperForConditionalGeneration,
    WhisperProcessor,
    WhisperTokenizer,
)

from support.device import DEVICE
from support.real_models import RealModels, real_models_or_skip

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

from realmodels.checkpoint import write_safetensors  # noqa: E402
from realmodels.ct2 import Ct2FormatError, read_ct2, read_ct2_parts  # noqa: E402
from realmodels.gguf_llama import permute_rows, unpermute_rows  # noqa: E402

real_models = pytest.mark.real_models

GOFORWARD = "goforward.raw"
AMIABLE = "sense_and_sensibility_01_austen_64kb-0930.wav"
# What plain greedy generate() gives (decoded with skip_special_tokens=True).
TRANSCRIPTS = {
    ("whisper-tiny.en", GOFORWARD): " Go forward 10 meters.",
    ("whisper-tiny.en", AMIABLE): " He might even have been made amiable himself.",
    ("whisper-base", GOFORWARD): " Go forward 10 meters.",
    ("whisper-base", AMIABLE): " He might even have been made amiable himself.",
}
WHISPER = {
    # name: (vocabulary size, layers, d_model, decoder start, the prompt plain generate() forces)
    "whisper-tiny.en": (51864, 4, 384, 50257, [50257, 50362]),
    "whisper-base": (51865, 6, 512, 50258, [50258, 50259, 50359, 50363]),
}
SMOLLM2_PROMPT = "The capital of France is"
SMOLLM2_CONTINUATION = " Paris.\n\nThe answer is:"
# The chat template's form (ChatML), without the default system prompt: the answer ends with <|im_end|>, the eos.
SMOLLM2_CHAT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
SMOLLM2_ANSWER = "The capital of France is Paris.<|im_end|>"
ROUND_TRIP = [
    "The capital of France is",
    "  two spaces, a\ttab and a newline\n\nthen digits 12345 and 3.14159",
    "Unicode: naïve café, Grüße, 東京, 🙂.",
    "<|im_start|>user\nHi there<|im_end|>\n",
]
NUMBERS = "zero one two three four five six seven eight nine ten eleven twelve".split()


@pytest.fixture(scope="module")
def real() -> RealModels:
    return real_models_or_skip()


def _folder(real: RealModels, name: str):
    return {"whisper-base": real.whisper_base, "whisper-tiny.en": real.whisper_tiny_en}[name]


_LOADED: dict[str, tuple] = {}


def whisper(real: RealModels, name: str):
    """(processor, model) of a Whisper checkpoint, loaded once per process."""
    if name not in _LOADED:
        folder = _folder(real, name)
        processor = WhisperProcessor.from_pretrained(folder)
        model = WhisperForConditionalGeneration.from_pretrained(folder).to(DEVICE).eval()
        _LOADED[name] = (processor, model)
    return _LOADED[name]


@pytest.fixture(scope="module")
def smollm2(real):
    tokenizer = AutoTokenizer.from_pretrained(real.smollm2)
    model = LlamaForCausalLM.from_pretrained(real.smollm2, low_cpu_mem_usage=True).to(DEVICE).eval()
    return tokenizer, model


def normalise(text: str) -> list[str]:
    """Lower case, no punctuation, hyphens as spaces, 0-12 as words: how the package writes its transcripts."""
    words = re.sub(r"[^a-z0-9' ]", " ", text.lower().replace("-", " ")).split()
    return [NUMBERS[int(word)] if word.isdigit() and int(word) < len(NUMBERS) else word for word in words]


def word_error_rate(reference: list[str], hypothesis: list[str]) -> float:
    row = list(range(len(hypothesis) + 1))
    for i, expected in enumerate(reference, 1):
        previous, row[0] = row[0], i
        for j, got in enumerate(hypothesis, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (expected != got))
    return row[-1] / max(len(reference), 1)


@real_models
@pytest.mark.parametrize("name", sorted(WHISPER))
def test_whisper_checkpoint_loads(real, name):
    vocab_size, layers, d_model, start, prompt = WHISPER[name]
    processor, model = whisper(real, name)
    assert type(processor.tokenizer) is WhisperTokenizer
    config = model.config
    assert (config.vocab_size, config.encoder_layers, config.decoder_layers, config.d_model) == (
        vocab_size,
        layers,
        layers,
        d_model,
    )
    assert model.generation_config.decoder_start_token_id == start
    assert model.proj_out.weight.data_ptr() == model.model.decoder.embed_tokens.weight.data_ptr()
    tokenizer = processor.tokenizer
    generation = model.generation_config
    assert len(tokenizer) == generation.no_timestamps_token_id + 1
    assert tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>"]) == [
        generation.eos_token_id,
        start,
        generation.no_timestamps_token_id,
    ]
    # 4.31's tokenizer finds its special tokens by their place among the special ids.
    assert tokenizer.convert_ids_to_tokens(tokenizer.all_special_ids[-106]) == "<|startoftranscript|>"
    assert tokenizer.convert_ids_to_tokens(tokenizer.all_special_ids[-1]) == "<|notimestamps|>"
    if generation.is_multilingual:
        tokenizer.set_prefix_tokens(language="english", task="transcribe", predict_timestamps=False)
    assert tokenizer.prefix_tokens == prompt
    assert tokenizer.decode(tokenizer(" Go forward 10 meters.", add_special_tokens=False).input_ids) == (
        " Go forward 10 meters."
    )


@real_models
@pytest.mark.parametrize("clip", [GOFORWARD, AMIABLE])
@pytest.mark.parametrize("name", sorted(WHISPER))
def test_whisper_transcribes_real_speech(real, name, clip):
    processor, model = whisper(real, name)
    features = processor(real.audio(clip), sampling_rate=16000, return_tensors="pt").input_features.to(DEVICE)
    with torch.no_grad():
        tokens = model.generate(features, max_new_tokens=40)
    assert tokens[0, : len(WHISPER[name][4])].tolist() == WHISPER[name][4]
    text = processor.batch_decode(tokens, skip_special_tokens=True)[0]
    assert text == TRANSCRIPTS[(name, clip)]
    reference = real.transcript(clip)
    error = word_error_rate(reference.split(), normalise(text))
    assert error <= 0.2, f"{name} heard {text!r}, the package says {reference!r} (word error rate {error:.2f})"


@real_models
def test_smollm2_checkpoint_loads(real, smollm2):
    tokenizer, model = smollm2
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    config = model.config
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads) == (30, 9, 3)
    assert (config.hidden_size, config.vocab_size, config.rms_norm_eps, config.rope_theta) == (576, 49152, 1e-5, 1e5)
    assert config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|im_start|>", "<|im_end|>")
    for text in ROUND_TRIP:
        ids = tokenizer(text).input_ids
        assert tokenizer.decode(ids) == text
    assert tokenizer("<|im_start|>user").input_ids == [1, 4093]
    assert tokenizer("12345").input_ids == [33, 34, 35, 36, 37]  # digits one by one


@real_models
def test_smollm2_greedy_continuation(smollm2):
    if not hasattr(LlamaConfig(), "rope_theta"):
        pytest.skip(
            "LLAMA ROPE_THETA NOT HONOURED: this transformers' LlamaConfig has no rope_theta, so Llama rotates with "
            "base 10000 and SmolLM2 (trained with 100000) would be tested with the wrong positions"
        )
    tokenizer, model = smollm2
    for prompt, new_tokens, expected in (
        (SMOLLM2_PROMPT, 8, SMOLLM2_CONTINUATION),
        (SMOLLM2_CHAT, 16, SMOLLM2_ANSWER),
    ):
        inputs = tokenizer(prompt, return_tensors="pt").to(DEVICE)
        with torch.no_grad():
            tokens = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False)
        assert tokenizer.decode(tokens[0, inputs.input_ids.shape[1] :]) == expected


# The conversion code itself, on small data made here (no checkpoint needed).


def _ct2_string(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def _ct2_file(variables: dict[str, np.ndarray], dtypes: dict[str, int], aliases: dict[str, str]) -> bytes:
    """A model.bin laid out as scripts/realmodels/ct2.py describes it."""
    data = struct.pack("<I", 6) + _ct2_string("WhisperSpec") + struct.pack("<I", 3) + struct.pack("<I", len(variables))
    for name, value in variables.items():
        data += _ct2_string(name) + struct.pack("<B", value.ndim) + struct.pack(f"<{value.ndim}I", *value.shape)
        data += struct.pack("<BI", dtypes[name], value.nbytes) + value.tobytes()
    data += struct.pack("<I", len(aliases))
    for alias, name in aliases.items():
        data += _ct2_string(alias) + _ct2_string(name)
    return data


def test_ct2_reader_follows_the_documented_layout(tmp_path):
    weights = np.arange(24, dtype="<f2").reshape(2, 3, 4) / 7
    heads = np.array(8, dtype="<i2")
    data = _ct2_file(
        {"decoder/embeddings/weight": weights, "decoder/num_heads": heads},
        {"decoder/embeddings/weight": 4, "decoder/num_heads": 2},
        {"decoder/projection/weight": "decoder/embeddings/weight"},
    )
    (tmp_path / "part1").write_bytes(data[:50])
    (tmp_path / "part2").write_bytes(data[50:])
    model = read_ct2_parts([tmp_path / "part1", tmp_path / "part2"])
    assert (model.spec, model.revision) == ("WhisperSpec", 3)
    assert model.get("decoder/projection/weight").dtype == np.float16
    assert np.array_equal(model.get("decoder/projection/weight"), weights)
    assert model.scalar("decoder/num_heads") == 8
    with pytest.raises(Ct2FormatError, match="truncated"):
        read_ct2(data[:-3])
    with pytest.raises(Ct2FormatError, match="bytes left"):
        read_ct2(data + b"\0")


def test_safetensors_writer_reads_back(tmp_path):
    from safetensors import safe_open

    tensors = {"b.weight": np.arange(6, dtype=np.float16).reshape(2, 3), "a.bias": np.ones(5, dtype=np.float32)}
    assert write_safetensors(tmp_path / "model.safetensors", tensors) == 11
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as handle:
        assert handle.metadata() == {"format": "pt"}
        for name, value in tensors.items():
            loaded = handle.get_tensor(name)
            assert loaded.dtype == torch.float32 and np.array_equal(loaded.numpy(), value.astype(np.float32))


def _rope_half(x: np.ndarray, position: int, base: float) -> np.ndarray:
    """transformers' rotary embedding of one head: pairs (x[i], x[i + d/2])."""
    half = x.shape[-1] // 2
    angle = position * base ** (-np.arange(half) * 2 / x.shape[-1])
    first, second = x[..., :half], x[..., half:]
    return np.concatenate(
        [first * np.cos(angle) - second * np.sin(angle), second * np.cos(angle) + first * np.sin(angle)], -1
    )


def _rope_pairs(x: np.ndarray, position: int, base: float) -> np.ndarray:
    """ggml's rotary embedding of one head (llama's "normal" mode): pairs (x[2i], x[2i + 1])."""
    half = x.shape[-1] // 2
    angle = position * base ** (-np.arange(half) * 2 / x.shape[-1])
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * np.cos(angle) - odd * np.sin(angle)
    out[..., 1::2] = even * np.sin(angle) + odd * np.cos(angle)
    return out


def _scores(q_weight, k_weight, heads, kv_heads, rope, inputs, base=100000.0) -> np.ndarray:
    """Every causal attention score q(t1)·k(t2), t2 <= t1, of every head, with `rope` applied per head at each
    position (grouped-query attention: `heads // kv_heads` query heads share a key head)."""
    head_dim = q_weight.shape[0] // heads
    q = [np.stack([rope(h, t, base) for h in (q_weight @ x).reshape(heads, head_dim)]) for t, x in enumerate(inputs)]
    k = [
        np.stack([rope(h, t, base) for h in (k_weight @ x).reshape(kv_heads, head_dim)]) for t, x in enumerate(inputs)
    ]
    group = heads // kv_heads
    return np.array(
        [q[i][h] @ k[j][h // group] for i in range(len(inputs)) for j in range(i + 1) for h in range(heads)]
    )


def test_unpermuted_projections_rotate_as_ggml_does():
    """Undoing GGUF's row interleaving gives, with transformers' rotary embedding, ggml's attention scores."""
    rng = np.random.default_rng(0)
    hidden, heads, kv_heads = 24, 3, 1
    head_dim = hidden // heads
    q_gguf = rng.standard_normal((hidden, hidden))
    k_gguf = rng.standard_normal((kv_heads * head_dim, hidden))
    inputs = list(rng.standard_normal((5, hidden)))
    ggml = _scores(q_gguf, k_gguf, heads, kv_heads, _rope_pairs, inputs)
    q_hf, k_hf = unpermute_rows(q_gguf, heads), unpermute_rows(k_gguf, kv_heads)
    assert np.array_equal(permute_rows(q_hf, heads), q_gguf) and np.array_equal(permute_rows(k_hf, kv_heads), k_gguf)
    converted = _scores(q_hf, k_hf, heads, kv_heads, _rope_half, inputs)
    np.testing.assert_allclose(converted, ggml, rtol=1e-9, atol=1e-9)
    # Without the un-interleaving, transformers' rotary embedding gives other scores.
    kept = _scores(q_gguf, k_gguf, heads, kv_heads, _rope_half, inputs)
    assert not np.allclose(kept, ggml)
