"""A faster-whisper (CTranslate2) Whisper checkpoint -> a `WhisperForConditionalGeneration` directory for 4.31.

Inputs: the CTranslate2 `model.bin` (float16 weights, read by `ct2.py`), the `config.json` beside it (alignment heads,
suppressed tokens) and the `tokenizer.json` beside it (the byte-level BPE vocabulary, merges and added tokens). Every
weight is widened from float16 to float32 as stored, nothing else is computed from it; the variables map one to one
onto transformers' names, except the fused projections, which are split:

    {encoder,decoder}/layer_N/self_attention/linear_0   [3d, d]  -> self_attn.q_proj, k_proj, v_proj (rows in order)
    decoder/layer_N/attention/linear_0                  [d, d]   -> encoder_attn.q_proj
    decoder/layer_N/attention/linear_1                  [2d, d]  -> encoder_attn.k_proj, v_proj
    ...linear_1 (self attention), linear_2 (cross attention)    -> out_proj
    .../layer_norm/{gamma,beta}                                 -> the layer norm in front of that block
    ffn/linear_0, ffn/linear_1                                  -> fc1, fc2

Whisper's key projections have no bias: the stored bias rows of the keys must be zero (checked). The output
projection is an alias of the token embeddings (tied, `tie_word_embeddings`), checked too.

The tokenizer is written as the slow tokenizer's files (`vocab.json`, `merges.txt`, `added_tokens.json`,
`special_tokens_map.json`, `tokenizer_config.json`), which 4.31's `WhisperProcessor` loads. `vocab.json` holds the
byte-level vocabulary and `<|endoftext|>` (also the unknown token, which 4.31 never takes as an added token); the
added tokens are the other special tokens up to `<|notimestamps|>`, with consecutive ids after the vocabulary, as the
checkpoints of 4.31's time had them (no timestamp tokens: 4.31 computes those from ids). 4.31's tokenizer finds the
first timestamp token as `all_special_ids[-1] + 1` and the start-of-transcript token as `all_special_ids[-106]`, so
`additional_special_tokens` lists `<|endoftext|>`, `<|startoftranscript|>`, the 99 languages, `<|translate|>`,
`<|transcribe|>`, `<|startoflm|>`, `<|startofprev|>`, `<|nocaptions|>`, `<|notimestamps|>`, in id order.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from .checkpoint import write_json, write_safetensors
from .ct2 import Ct2FormatError, Ct2Model

# CTranslate2's settings that this conversion supports (anything else is refused).
GELU = 3
EXPECTED_FLAGS = {
    "decoder/activation": GELU,
    "decoder/pre_norm": 1,
    "decoder/scale_embeddings": 0,
    "decoder/start_from_zero_embedding": 0,
    "decoder/alibi": 0,
}
SCALAR_NAMES = set(EXPECTED_FLAGS) | {
    "encoder/num_heads",
    "decoder/num_heads",
    "decoder/alignment_heads",
    "decoder/alignment_layer",
    "decoder/alibi_use_positive_positions",
    "decoder/scale_alibi",
}
# After the 99 language tokens: the tokens 4.31's tokenizer finds by their place in `all_special_ids`. The no-speech
# token is `<|nocaptions|>` in older tokenizer files and `<|nospeech|>` in newer ones (4.31 does not use its name).
TAIL_TOKENS = [
    ("<|translate|>",),
    ("<|transcribe|>",),
    ("<|startoflm|>",),
    ("<|startofprev|>",),
    ("<|nocaptions|>", "<|nospeech|>"),
    ("<|notimestamps|>",),
]
N_LANGUAGES = 99
N_TIMESTAMPS = 1501  # <|0.00|> ... <|30.00|>
LANGUAGE_TOKEN = re.compile(r"^<\|[a-z]{2,3}\|>$|^<\|haw\|>$")


class _Consumer:
    """Hands out the model's variables as float32 and records which ones were used."""

    def __init__(self, model: Ct2Model):
        self.model = model
        self.used: set[str] = set()

    def __call__(self, name: str) -> np.ndarray:
        target = self.model.aliases.get(name, name)
        if target not in self.model.variables:
            raise Ct2FormatError(f"the model has no variable {name}")
        self.used.add(target)
        return self.model.variables[target].astype(np.float32)

    def check_all_used(self) -> None:
        left = sorted(set(self.model.variables) - self.used - SCALAR_NAMES)
        if left:
            raise Ct2FormatError(f"variables this conversion does not map: {left}")


def _count_layers(model: Ct2Model, stack: str) -> int:
    indices = {int(m.group(1)) for name in model.variables if (m := re.match(rf"{stack}/layer_(\d+)/", name))}
    if indices != set(range(len(indices))):
        raise Ct2FormatError(f"{stack}: layers {sorted(indices)} are not numbered 0..N-1")
    return len(indices)


def _split(array: np.ndarray, parts: int, what: str) -> list[np.ndarray]:
    if array.shape[0] % parts:
        raise Ct2FormatError(f"{what}: {array.shape[0]} rows cannot be split into {parts} projections")
    return np.split(array, parts, axis=0)


def _no_key_bias(bias: np.ndarray, what: str) -> None:
    if np.any(bias != 0):
        raise Ct2FormatError(f"{what}: the key projection has a non-zero bias, which Whisper's k_proj does not take")


def _attention(get: _Consumer, source: str, target: str, fused: str, tensors: dict[str, np.ndarray]) -> None:
    """Maps one attention block: `fused` is "qkv" (self attention) or "q+kv" (cross attention)."""
    if fused == "qkv":
        weights = _split(get(f"{source}/linear_0/weight"), 3, source)
        biases = _split(get(f"{source}/linear_0/bias"), 3, source)
        out = "linear_1"
    else:
        weights = [get(f"{source}/linear_0/weight"), *_split(get(f"{source}/linear_1/weight"), 2, source)]
        biases = [get(f"{source}/linear_0/bias"), *_split(get(f"{source}/linear_1/bias"), 2, source)]
        out = "linear_2"
    _no_key_bias(biases[1], source)
    for projection, weight, bias in zip(("q_proj", "k_proj", "v_proj"), weights, biases, strict=True):
        tensors[f"{target}.{projection}.weight"] = weight
        if projection != "k_proj":
            tensors[f"{target}.{projection}.bias"] = bias
    tensors[f"{target}.out_proj.weight"] = get(f"{source}/{out}/weight")
    tensors[f"{target}.out_proj.bias"] = get(f"{source}/{out}/bias")


def _feed_forward(get: _Consumer, source: str, target: str, tensors: dict[str, np.ndarray]) -> None:
    """A layer's two linear layers and the layer norm before them (`fc1`, `fc2`, `final_layer_norm`)."""
    for index, name in enumerate(("fc1", "fc2")):
        tensors[f"{target}.{name}.weight"] = get(f"{source}/linear_{index}/weight")
        tensors[f"{target}.{name}.bias"] = get(f"{source}/linear_{index}/bias")
    _layer_norm(get, f"{source}/layer_norm", f"{target}.final_layer_norm", tensors)


def _layer_norm(get: _Consumer, source: str, target: str, tensors: dict[str, np.ndarray]) -> None:
    tensors[f"{target}.weight"] = get(f"{source}/gamma")
    tensors[f"{target}.bias"] = get(f"{source}/beta")


def convert_weights(model: Ct2Model) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The transformers state dict (float32) and the architecture read from the variables."""
    if model.spec != "WhisperSpec":
        raise Ct2FormatError(f"the model is a {model.spec}, not a WhisperSpec")
    for name, expected in EXPECTED_FLAGS.items():
        if name in model.variables and model.scalar(name) != expected:
            raise Ct2FormatError(f"{name} is {model.scalar(name)}, this conversion supports {expected} only")
    if model.aliases.get("decoder/projection/weight") != "decoder/embeddings/weight":
        raise Ct2FormatError("the output projection is not tied to the token embeddings")
    get = _Consumer(model)
    tensors: dict[str, np.ndarray] = {}
    for conv in ("conv1", "conv2"):
        tensors[f"model.encoder.{conv}.weight"] = get(f"encoder/{conv}/weight")
        tensors[f"model.encoder.{conv}.bias"] = get(f"encoder/{conv}/bias")
    tensors["model.encoder.embed_positions.weight"] = get("encoder/position_encodings/encodings")
    encoder_layers = _count_layers(model, "encoder")
    for i in range(encoder_layers):
        source, target = f"encoder/layer_{i}", f"model.encoder.layers.{i}"
        _attention(get, f"{source}/self_attention", f"{target}.self_attn", "qkv", tensors)
        _layer_norm(get, f"{source}/self_attention/layer_norm", f"{target}.self_attn_layer_norm", tensors)
        _feed_forward(get, f"{source}/ffn", target, tensors)
    _layer_norm(get, "encoder/layer_norm", "model.encoder.layer_norm", tensors)

    tensors["model.decoder.embed_tokens.weight"] = get("decoder/embeddings/weight")
    tensors["model.decoder.embed_positions.weight"] = get("decoder/position_encodings/encodings")
    get("decoder/projection/weight")  # the alias: tied, nothing to write
    decoder_layers = _count_layers(model, "decoder")
    for i in range(decoder_layers):
        source, target = f"decoder/layer_{i}", f"model.decoder.layers.{i}"
        _attention(get, f"{source}/self_attention", f"{target}.self_attn", "qkv", tensors)
        _layer_norm(get, f"{source}/self_attention/layer_norm", f"{target}.self_attn_layer_norm", tensors)
        _attention(get, f"{source}/attention", f"{target}.encoder_attn", "q+kv", tensors)
        _layer_norm(get, f"{source}/attention/layer_norm", f"{target}.encoder_attn_layer_norm", tensors)
        _feed_forward(get, f"{source}/ffn", target, tensors)
    _layer_norm(get, "decoder/layer_norm", "model.decoder.layer_norm", tensors)
    get.check_all_used()

    d_model = tensors["model.decoder.embed_tokens.weight"].shape[1]
    architecture = {
        "vocab_size": tensors["model.decoder.embed_tokens.weight"].shape[0],
        "d_model": d_model,
        "num_mel_bins": tensors["model.encoder.conv1.weight"].shape[1],
        "encoder_layers": encoder_layers,
        "decoder_layers": decoder_layers,
        "encoder_attention_heads": model.scalar("encoder/num_heads"),
        "decoder_attention_heads": model.scalar("decoder/num_heads"),
        "encoder_ffn_dim": tensors["model.encoder.layers.0.fc1.weight"].shape[0],
        "decoder_ffn_dim": tensors["model.decoder.layers.0.fc1.weight"].shape[0],
        "max_source_positions": tensors["model.encoder.embed_positions.weight"].shape[0],
        "max_target_positions": tensors["model.decoder.embed_positions.weight"].shape[0],
    }
    return tensors, architecture


def _special_tokens(tokenizer: dict, vocabulary: list[str], vocab_size: int) -> tuple[dict[str, int], list[str]]:
    """The special tokens (name -> id), checked against the layout 4.31's tokenizer relies on."""
    vocab = tokenizer["model"]["vocab"]
    added = sorted(tokenizer["added_tokens"], key=lambda token: token["id"])
    ids = {token["content"]: token["id"] for token in added}
    for names in (("<|endoftext|>",), ("<|startoftranscript|>",), *TAIL_TOKENS):
        if not any(name in ids for name in names):
            raise Ct2FormatError(f"the tokenizer has no {' or '.join(names)}")
    start, last = ids["<|startoftranscript|>"], ids["<|notimestamps|>"]
    specials = [token["content"] for token in added if token["id"] <= last]
    languages = [name for name in specials if start < ids[name] < ids["<|translate|>"]]
    if len(languages) != N_LANGUAGES or not all(LANGUAGE_TOKEN.match(name) for name in languages):
        raise Ct2FormatError(f"expected {N_LANGUAGES} language tokens after <|startoftranscript|>, got {languages}")
    tail = specials[-len(TAIL_TOKENS) :]
    in_order = len(tail) == len(TAIL_TOKENS) and all(
        name in names for name, names in zip(tail, TAIL_TOKENS, strict=True)
    )
    if not in_order or ids["<|endoftext|>"] + 1 != start:
        raise Ct2FormatError(f"the special tokens are not in Whisper's order: {specials[:3]}...{specials[-6:]}")
    if [ids[name] for name in specials] != list(range(ids[specials[0]], last + 1)):
        raise Ct2FormatError("the special tokens' ids are not consecutive")
    if vocab_size != last + 1 + N_TIMESTAMPS:
        raise Ct2FormatError(f"{vocab_size} embeddings, expected <|notimestamps|> + 1 + {N_TIMESTAMPS} timestamps")
    # The CTranslate2 vocabulary file names every id: it must agree with the tokenizer.
    if len(vocabulary) < last + 1:
        raise Ct2FormatError(f"the vocabulary file lists {len(vocabulary)} tokens, fewer than the special tokens")
    for token, index in list(vocab.items()) + list(ids.items()):
        if index < len(vocabulary) and vocabulary[index] != token:
            raise Ct2FormatError(
                f"id {index}: the vocabulary file says {vocabulary[index]!r}, the tokenizer {token!r}"
            )
    return ids, specials


def _merges(tokenizer: dict) -> list[str]:
    merges = []
    for merge in tokenizer["model"]["merges"]:
        pair = merge.split(" ") if isinstance(merge, str) else list(merge)
        if len(pair) != 2 or any(" " in part or not part for part in pair):
            raise Ct2FormatError(f"merge {merge!r} is not a pair of tokens")
        merges.append(" ".join(pair))
    return merges


def write_tokenizer(directory: Path, tokenizer: dict, ids: dict[str, int], specials: list[str]) -> None:
    end = "<|endoftext|>"
    vocab = dict(tokenizer["model"]["vocab"])
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise Ct2FormatError("the vocabulary's ids are not 0..N-1")
    # <|endoftext|> is the unknown token too, and 4.31's slow tokenizer never adds the unknown token as an added
    # token (the ids of all later ones would slip by one): it must be in vocab.json. The multilingual tokenizer has
    # it as the first added token, right after the byte-level vocabulary.
    if end not in vocab:
        if ids[end] != len(vocab):
            raise Ct2FormatError(f"{end} has id {ids[end]}, not the one after the vocabulary ({len(vocab)})")
        vocab[end] = ids[end]
    write_json(directory / "vocab.json", vocab)
    (directory / "merges.txt").write_text(
        "#version: 0.2\n" + "".join(merge + "\n" for merge in _merges(tokenizer)), encoding="utf-8"
    )
    # Added tokens continue the vocabulary (4.31 requires consecutive ids); a token in the vocabulary stays there.
    added = {name: ids[name] for name in specials if name not in vocab}
    if sorted(added.values()) != list(range(len(vocab), len(vocab) + len(added))):
        raise Ct2FormatError("the added tokens do not continue the vocabulary")
    write_json(directory / "added_tokens.json", added)
    write_json(
        directory / "special_tokens_map.json",
        {
            "additional_special_tokens": specials,
            "bos_token": end,
            "eos_token": end,
            "pad_token": end,
            "unk_token": end,
        },
    )
    write_json(
        directory / "tokenizer_config.json",
        {
            "tokenizer_class": "WhisperTokenizer",
            "processor_class": "WhisperProcessor",
            "add_prefix_space": False,
            "errors": "replace",
            "model_max_length": 1024,
            "bos_token": end,
            "eos_token": end,
            "pad_token": end,
            "unk_token": end,
        },
    )


def convert(
    model: Ct2Model, ct2_config: dict, tokenizer: dict, vocabulary: list[str], directory: Path, source: str
) -> dict:
    """Writes the checkpoint into `directory` (which must exist) and returns a summary."""
    tensors, architecture = convert_weights(model)
    ids, specials = _special_tokens(tokenizer, vocabulary, architecture["vocab_size"])
    end, start = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    multilingual = architecture["vocab_size"] >= 51865  # Whisper's own rule
    if multilingual != (len(tokenizer["model"]["vocab"]) == end):
        raise Ct2FormatError("the vocabulary size and the place of <|endoftext|> disagree on the model's languages")
    suppress = sorted(int(i) for i in ct2_config["suppress_ids"])
    begin_suppress = [int(i) for i in ct2_config["suppress_ids_begin"]]
    alignment_heads = [[int(layer), int(head)] for layer, head in ct2_config["alignment_heads"]]

    parameters = write_safetensors(directory / "model.safetensors", tensors)
    write_json(
        directory / "config.json",
        {
            "architectures": ["WhisperForConditionalGeneration"],
            "model_type": "whisper",
            **architecture,
            "activation_function": "gelu",
            "scale_embedding": False,
            "tie_word_embeddings": True,
            "is_encoder_decoder": True,
            "use_cache": True,
            "dropout": 0.0,
            "attention_dropout": 0.0,
            "activation_dropout": 0.0,
            "init_std": 0.02,
            "bos_token_id": end,
            "eos_token_id": end,
            "pad_token_id": end,
            "decoder_start_token_id": start,
            "begin_suppress_tokens": begin_suppress,
            "suppress_tokens": suppress,
            "max_length": architecture["max_target_positions"],
            "torch_dtype": "float32",
            "converted_from": source,
        },
    )
    generation = {
        "alignment_heads": alignment_heads,
        "begin_suppress_tokens": begin_suppress,
        "bos_token_id": end,
        "decoder_start_token_id": start,
        "eos_token_id": end,
        "pad_token_id": end,
        "is_multilingual": multilingual,
        "max_initial_timestamp_index": 1,
        "max_length": architecture["max_target_positions"],
        "no_timestamps_token_id": ids["<|notimestamps|>"],
        "return_timestamps": False,
        "suppress_tokens": suppress,
    }
    if multilingual:
        # Plain generate(): detect the language, transcribe, no timestamps; language=/task= rebuild these.
        generation["forced_decoder_ids"] = [[1, None], [2, ids["<|transcribe|>"]], [3, ids["<|notimestamps|>"]]]
        generation["lang_to_id"] = {name: ids[name] for name in specials if start < ids[name] < ids["<|translate|>"]}
        generation["task_to_id"] = {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]}
    else:
        generation["forced_decoder_ids"] = [[1, ids["<|notimestamps|>"]]]
    write_json(directory / "generation_config.json", generation)
    write_json(
        directory / "preprocessor_config.json",
        {
            "feature_extractor_type": "WhisperFeatureExtractor",
            "processor_class": "WhisperProcessor",
            "feature_size": architecture["num_mel_bins"],
            "sampling_rate": 16000,
            "hop_length": 160,
            "chunk_length": 30,
            "n_fft": 400,
            "n_samples": 480000,
            "nb_max_frames": 3000,
            "padding_side": "right",
            "padding_value": 0.0,
            "return_attention_mask": False,
        },
    )
    write_tokenizer(directory, tokenizer, ids, specials)
    return {"parameters": parameters, "multilingual": multilingual, **architecture}


def parse_vocabulary(text: str, is_json: bool) -> list[str]:
    """CTranslate2's vocabulary file: a JSON list (vocabulary.json), or one token a line (vocabulary.txt)."""
    if is_json:
        return json.loads(text)
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
