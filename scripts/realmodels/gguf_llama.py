"""A llama-architecture GGUF file -> a `LlamaForCausalLM` directory for transformers 4.31 (float32).

The `gguf` package reads the file and dequantizes each tensor (Q4_1, Q8_0 and F32 here) to float32: the values are
the quantized model's exactly (scale * q + min per block), nothing is requantized. GGUF stores a matrix with shape
[columns, rows] (ggml's order); `gguf` hands it out as the numpy array [rows, columns], which is transformers'
[out_features, in_features].

The query and key projections need one more step. The converters that write llama GGUF files permute the rows of
each head of q_proj and k_proj so that ggml's rotary embedding, which rotates adjacent pairs (x[2i], x[2i+1]), gives
what transformers' `rotate_half` gives on the pairs (x[i], x[i + head_dim/2]): a head's rows [first half; second
half] are interleaved as first[0], second[0], first[1], second[1], ... Here that is undone per head
(`unpermute_rows`): rows 0, 2, 4, ... become the first half, rows 1, 3, 5, ... the second. The key projection has
`head_count_kv` heads (grouped-query attention), the query projection `head_count`.

Names: token_embd -> model.embed_tokens, blk.N.attn_{q,k,v,output} -> model.layers.N.self_attn.{q,k,v,o}_proj,
blk.N.ffn_{gate,up,down} -> mlp.{gate,up,down}_proj, blk.N.attn_norm -> input_layernorm, blk.N.ffn_norm ->
post_attention_layernorm, output_norm -> model.norm, output -> lm_head (absent: tied to the embeddings).

The tokenizer: GGUF's `tokenizer.ggml.*` metadata holds the byte-level BPE vocabulary (`tokens`, the id being the
index), the `merges` in rank order and a type per token (3: control, the special tokens). `tokenizers` builds
`tokenizer.json` from them; the pre-tokenizer is the one GGUF's `tokenizer.ggml.pre` names ("smollm": every digit
alone, then GPT-2's byte-level split), so that text round-trips exactly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .checkpoint import write_json, write_safetensors

CONTROL = 3
NORMAL = 1
# GGUF pre-tokenizer names this conversion knows -> whether digits are split one by one before the byte-level split.
PRE_TOKENIZERS = {"smollm": True, "gpt2": False}


class GgufError(ValueError):
    pass


def unpermute_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undoes the per-head interleaving of q_proj/k_proj rows (see the module's docstring)."""
    rows, columns = weight.shape
    if rows % (2 * heads):
        raise GgufError(f"{rows} rows cannot be split into {heads} heads of an even size")
    half = rows // heads // 2
    return weight.reshape(heads, half, 2, columns).swapaxes(1, 2).reshape(rows, columns)


def permute_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """The interleaving itself (the inverse of `unpermute_rows`), for checks."""
    rows, columns = weight.shape
    half = rows // heads // 2
    return weight.reshape(heads, 2, half, columns).swapaxes(1, 2).reshape(rows, columns)


def _field(reader, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise GgufError(f"the GGUF file has no {key}")
        return default
    return field.contents()


def _as_float32_decimal(value: float) -> float:
    """A float32 metadata value as the shortest decimal that reads back as the same float32 (1e-05, not
    9.999999747378752e-06)."""
    return float(str(np.float32(value)))


def read_tensors(reader) -> dict[str, np.ndarray]:
    from gguf.quants import dequantize

    tensors = {}
    for tensor in reader.tensors:
        array = dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False)
        expected = tuple(int(dim) for dim in reversed(tensor.shape))
        if array.shape != expected:
            array = array.reshape(expected)
        tensors[tensor.name] = array
    return tensors


def convert_weights(reader) -> tuple[dict[str, np.ndarray], dict]:
    if _field(reader, "general.architecture") != "llama":
        raise GgufError(f"the GGUF file holds a {_field(reader, 'general.architecture')}, not a llama model")
    layers = int(_field(reader, "llama.block_count"))
    heads = int(_field(reader, "llama.attention.head_count"))
    kv_heads = int(_field(reader, "llama.attention.head_count_kv", heads))
    hidden = int(_field(reader, "llama.embedding_length"))
    head_dim = hidden // heads
    rope_dims = int(_field(reader, "llama.rope.dimension_count", head_dim))
    if rope_dims != head_dim:
        raise GgufError(f"rotary dimensions {rope_dims} != head size {head_dim}: 4.31's Llama rotates whole heads")
    source = read_tensors(reader)
    used = set()

    def take(name: str) -> np.ndarray:
        used.add(name)
        return source[name]

    tensors = {"model.embed_tokens.weight": take("token_embd.weight"), "model.norm.weight": take("output_norm.weight")}
    tied = "output.weight" not in source
    if not tied:
        tensors["lm_head.weight"] = take("output.weight")
    for i in range(layers):
        block, layer = f"blk.{i}", f"model.layers.{i}"
        tensors[f"{layer}.input_layernorm.weight"] = take(f"{block}.attn_norm.weight")
        tensors[f"{layer}.post_attention_layernorm.weight"] = take(f"{block}.ffn_norm.weight")
        tensors[f"{layer}.self_attn.q_proj.weight"] = unpermute_rows(take(f"{block}.attn_q.weight"), heads)
        tensors[f"{layer}.self_attn.k_proj.weight"] = unpermute_rows(take(f"{block}.attn_k.weight"), kv_heads)
        tensors[f"{layer}.self_attn.v_proj.weight"] = take(f"{block}.attn_v.weight")
        tensors[f"{layer}.self_attn.o_proj.weight"] = take(f"{block}.attn_output.weight")
        tensors[f"{layer}.mlp.gate_proj.weight"] = take(f"{block}.ffn_gate.weight")
        tensors[f"{layer}.mlp.up_proj.weight"] = take(f"{block}.ffn_up.weight")
        tensors[f"{layer}.mlp.down_proj.weight"] = take(f"{block}.ffn_down.weight")
    left = sorted(set(source) - used)
    if left:
        raise GgufError(f"tensors this conversion does not map: {left}")
    vocab_size, embedding = tensors["model.embed_tokens.weight"].shape
    if embedding != hidden:
        raise GgufError(f"token embeddings of size {embedding}, the model's is {hidden}")
    config = {
        "vocab_size": int(vocab_size),
        "hidden_size": hidden,
        "intermediate_size": int(_field(reader, "llama.feed_forward_length")),
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "max_position_embeddings": int(_field(reader, "llama.context_length")),
        "rms_norm_eps": _as_float32_decimal(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": _as_float32_decimal(_field(reader, "llama.rope.freq_base", 10000.0)),
        "tie_word_embeddings": tied,
    }
    return tensors, config


def build_tokenizer(reader):
    """A `tokenizers.Tokenizer` from the GGUF vocabulary, and the special tokens (id -> text)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    if _field(reader, "tokenizer.ggml.model") != "gpt2":
        raise GgufError(f"tokenizer model {_field(reader, 'tokenizer.ggml.model')!r}: only byte-level BPE is known")
    pre = _field(reader, "tokenizer.ggml.pre", "gpt2")
    if pre not in PRE_TOKENIZERS:
        raise GgufError(f"pre-tokenizer {pre!r} is unknown here (known: {sorted(PRE_TOKENIZERS)})")
    tokens = list(_field(reader, "tokenizer.ggml.tokens"))
    types = list(_field(reader, "tokenizer.ggml.token_type"))
    merges = [tuple(merge.split(" ")) for merge in _field(reader, "tokenizer.ggml.merges")]
    if any(len(merge) != 2 for merge in merges):
        raise GgufError("a merge is not a pair of tokens")
    if len(set(tokens)) != len(tokens):
        raise GgufError("the vocabulary holds a token twice")
    unexpected = sorted({kind for kind in types} - {NORMAL, CONTROL})
    if unexpected:
        raise GgufError(f"token types {unexpected} are not handled (only normal and control tokens)")
    specials = {index: token for index, (token, kind) in enumerate(zip(tokens, types, strict=True)) if kind == CONTROL}
    unk = _field(reader, "tokenizer.ggml.unknown_token_id", -1)
    model = models.BPE(
        vocab={token: index for index, token in enumerate(tokens)},
        merges=merges,
        unk_token=tokens[unk] if 0 <= unk < len(tokens) else None,
        fuse_unk=False,
    )
    tokenizer = Tokenizer(model)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if PRE_TOKENIZERS[pre]:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tokenizer.pre_tokenizer = byte_level
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.add_special_tokens([AddedToken(token, normalized=False) for _, token in sorted(specials.items())])
    for index, token in specials.items():
        if tokenizer.token_to_id(token) != index:
            raise GgufError(f"special token {token!r} did not keep its id {index}")
    return tokenizer, specials


ROUND_TRIP_SAMPLES = [
    "The capital of France is",
    "  two spaces, a\ttab and a newline\n\nthen digits 12345 and 3.14159",
    "Unicode: naïve café, Grüße, 東京, emoji 🙂, and a zero-width\u200bspace.",
    "<|im_start|>user\nHi there<|im_end|>\n",
    "def f(x):\n    return x ** 2  # comment",
]


def check_round_trip(tokenizer) -> None:
    for text in ROUND_TRIP_SAMPLES:
        ids = tokenizer.encode(text).ids
        back = tokenizer.decode(ids, skip_special_tokens=False)
        if back != text:
            raise GgufError(f"the tokenizer does not round-trip {text!r}: {back!r}")


def convert(path: Path, directory: Path, source: str) -> dict:
    from gguf import GGUFReader  # imported here: the layout helpers above need numpy only

    reader = GGUFReader(path)
    tensors, architecture = convert_weights(reader)
    tokenizer, specials = build_tokenizer(reader)
    check_round_trip(tokenizer)
    if tokenizer.get_vocab_size() != architecture["vocab_size"]:
        raise GgufError(f"{tokenizer.get_vocab_size()} tokens, {architecture['vocab_size']} embeddings")

    def token(key: str):
        index = _field(reader, key, -1)
        return (int(index), tokenizer.id_to_token(int(index))) if index >= 0 else (None, None)

    bos_id, bos = token("tokenizer.ggml.bos_token_id")
    eos_id, eos = token("tokenizer.ggml.eos_token_id")
    pad_id, pad = token("tokenizer.ggml.padding_token_id")
    unk_id, unk = token("tokenizer.ggml.unknown_token_id")

    parameters = write_safetensors(directory / "model.safetensors", tensors)
    write_json(
        directory / "config.json",
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            **architecture,
            "hidden_act": "silu",
            "initializer_range": 0.02,
            "pretraining_tp": 1,
            "rope_scaling": None,
            "use_cache": True,
            "bos_token_id": bos_id,
            "eos_token_id": eos_id,
            "pad_token_id": pad_id,
            "torch_dtype": "float32",
            "converted_from": source,
        },
    )
    write_json(
        directory / "generation_config.json",
        {"bos_token_id": bos_id, "eos_token_id": eos_id, "pad_token_id": pad_id},
    )
    tokenizer.save(str(directory / "tokenizer.json"))
    # Every control token is special: those that are not bos/eos/unk/pad are the additional special tokens.
    extra = [text for index, text in sorted(specials.items()) if index not in (bos_id, eos_id, unk_id, pad_id)]
    special_map = {"bos_token": bos, "eos_token": eos, "unk_token": unk, "pad_token": pad}
    special_map = {key: value for key, value in special_map.items() if value is not None}
    write_json(directory / "special_tokens_map.json", {**special_map, "additional_special_tokens": extra})
    tokenizer_config = {
        "tokenizer_class": "GPT2Tokenizer",
        "add_prefix_space": False,
        "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        "clean_up_tokenization_spaces": False,
        "model_max_length": architecture["max_position_embeddings"],
        **special_map,
        "additional_special_tokens": extra,
    }
    template = reader.fields.get("tokenizer.chat_template")
    if template is not None:
        tokenizer_config["chat_template"] = template.contents()
    write_json(directory / "tokenizer_config.json", tokenizer_config)
    return {"parameters": parameters, "special_tokens": len(specials), **architecture}
