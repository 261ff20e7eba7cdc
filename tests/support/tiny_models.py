"""Tiny random models, and generation inputs for them, for every class that can generate.

Nothing is downloaded: every model is built from its configuration class with tiny random weights.

Public API (other test modules import it; the names are stable):

- `discover_generation_classes()` -> {class name: class}: every PyTorch model class of the installed transformers
  whose `prepare_inputs_for_generation` is its own or comes from a model base class (not the `GenerationMixin`
  stub). Found by importing every `transformers.models.*.modeling_*` module (TF and Flax excluded) and cross-checked
  against the generation auto-mappings, so that no class can be forgotten.
- `tiny_config(model_class, **overrides)` -> config: the configuration shrunk generically (hidden size 32, 2 layers,
  4 heads, vocabulary 99, >= 64 positions, ...), with per-model fixes from `CONFIG_OVERRIDES` where generic shrinking
  cannot work (each entry says why). `overrides` are applied last (`layers=1` asks for the one-layer variant).
- `tiny_model(model_class, seed=0, assistant=False, device=DEVICE, **config_overrides)` -> model in eval mode,
  with a *sensitive* initialisation (wide random weights, untied output embeddings where the config allows it),
  so that greedy output depends on the inputs, and EOS stopping disabled (config and generation config), so that
  two runs always produce the same number of tokens. `assistant=True` builds the one-layer variant (where the
  architecture allows it) and should be combined with another seed.
- `draft_model(target, seed=1, device=DEVICE, **config_overrides)` -> a one-layer assistant that shares the
  target's weights where names and shapes match (the target without its last layers), so that it agrees with the
  target part of the time: some candidates accepted, some rejected.
- `generation_inputs(model, scenario, device=DEVICE, variant=0)` -> kwargs for `model.generate()`: the model inputs
  for the scenario (see `SCENARIOS`) plus `max_new_tokens` and `do_sample=False`. `variant=1` returns the same
  inputs with the scenario's extra input changed (other token types, padding attended, encoder mask all ones):
  greedy output must differ between the variants, otherwise a comparison in that scenario proves nothing.
- `applicable_scenarios(model_class)` -> the scenarios that apply to the class, in `SCENARIOS` order.
- `generate(model, **kwargs)`: `model.generate(**kwargs)` for every class (a few classes override `generate` with
  a signature that needs extra arguments; this helper provides them).

(`support.assistants.reset_assistant` starts an assistant's draft length from the same state before every run.)
"""

import functools
import importlib
import inspect
import pkgutil

import torch
from torch import nn

from support.device import DEVICE

SCENARIOS = ("plain", "self", "token_type_ids", "left_pad", "enc_mask")

PROMPT_LENGTH = 7
MAX_NEW_TOKENS = 16  # with the model as its own assistant: rounds of 6, 8 and 2 tokens
TINY_VOCAB = 99
FIRST_PLAIN_TOKEN = 5  # prompts avoid the low ids, where the special tokens of the tiny configs live

# ----------------------------------------------------------------------------------------------------------------
# Discovery
# ----------------------------------------------------------------------------------------------------------------


def _is_generation_class(cls):
    from transformers import PreTrainedModel
    from transformers.generation.utils import GenerationMixin

    if not (inspect.isclass(cls) and issubclass(cls, PreTrainedModel)):
        return False
    method = getattr(cls, "prepare_inputs_for_generation", None)
    return method is not None and method is not GenerationMixin.prepare_inputs_for_generation


@functools.lru_cache(maxsize=None)
def _discover():
    import transformers.models
    from transformers.models.auto import modeling_auto

    found = {}
    for package_info in pkgutil.iter_modules(transformers.models.__path__):
        package = importlib.import_module(f"transformers.models.{package_info.name}")
        if not hasattr(package, "__path__"):
            continue
        for module_info in pkgutil.iter_modules(package.__path__):
            name = module_info.name
            if not name.startswith("modeling_") or name.startswith(("modeling_tf_", "modeling_flax_")):
                continue
            module = importlib.import_module(f"{package.__name__}.{name}")
            for attribute, value in vars(module).items():
                if getattr(value, "__module__", None) == module.__name__ and _is_generation_class(value):
                    found[attribute] = value
    # Cross-check with the generation auto-mappings: a class they name must have been found above.
    import transformers

    for mapping_name in dir(modeling_auto):
        if not (mapping_name.startswith("MODEL_") and mapping_name.endswith("_MAPPING_NAMES")):
            continue
        for names in getattr(modeling_auto, mapping_name).values():
            for class_name in names if isinstance(names, (list, tuple)) else (names,):
                cls = getattr(transformers, class_name, None)
                if cls is not None and _is_generation_class(cls) and class_name not in found:
                    raise AssertionError(f"{class_name} is in {mapping_name} but was not discovered")
    return tuple(sorted(found.items()))


def discover_generation_classes():
    return dict(_discover())


# ----------------------------------------------------------------------------------------------------------------
# Configurations
# ----------------------------------------------------------------------------------------------------------------

HIDDEN = 32
HEADS = 4
FFN = 37
POSITIONS = 128

_GENERIC_SIZES = {
    # width
    "hidden_size": HIDDEN,
    "d_model": HIDDEN,
    "n_embd": HIDDEN,
    "n_embed": HIDDEN,
    "embed_dim": HIDDEN,
    "d_embed": HIDDEN,
    "word_embed_proj_dim": HIDDEN,
    "embedding_size": HIDDEN,
    "input_embedding_size": HIDDEN,
    "output_embedding_size": HIDDEN,
    "projection_dim": HIDDEN,
    # heads
    "num_attention_heads": HEADS,
    "n_head": HEADS,
    "n_heads": HEADS,
    "num_heads": HEADS,
    "encoder_attention_heads": HEADS,
    "decoder_attention_heads": HEADS,
    "d_kv": HIDDEN // HEADS,
    "dim_head": HIDDEN // HEADS,
    "attention_head_size": HIDDEN // HEADS,
    "rotary_dim": 4,
    # feed-forward
    "intermediate_size": FFN,
    "ffn_dim": FFN,
    "encoder_ffn_dim": FFN,
    "decoder_ffn_dim": FFN,
    "d_ff": FFN,
    "n_inner": FFN,
    "dim_feedforward": FFN,
    "dim_ff": FFN,
    "d_inner": FFN,
    "dff": FFN,
    "feed_forward_size": FFN,
    "ffn_size": FFN,
    # positions
    "max_position_embeddings": POSITIONS,
    "n_positions": POSITIONS,
    "n_ctx": POSITIONS,
    "max_target_positions": POSITIONS,
    "max_source_positions": POSITIONS,
    "max_encoder_position_embeddings": POSITIONS,
    "max_decoder_position_embeddings": POSITIONS,
    "block_size_positions": POSITIONS,
    # vocabularies
    "vocab_size": TINY_VOCAB,
    "input_vocab_size": TINY_VOCAB,
    "output_vocab_size": TINY_VOCAB,
}

_LAYER_KEYS = (
    "num_hidden_layers",
    "n_layer",
    "n_layers",
    "num_layers",
    "encoder_layers",
    "decoder_layers",
    "num_decoder_layers",
)

_SPECIAL_TOKEN_KEYS = (
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    "cls_token_id",
    "decoder_start_token_id",
    "mask_token_id",
    "unk_token_id",
    "separator_token_id",
    "forced_bos_token_id",
    "forced_eos_token_id",
)

# Keys that are lists of token ids in some configs (Whisper); they would index outside the tiny vocabulary.
_TOKEN_LIST_KEYS = ("suppress_tokens", "begin_suppress_tokens", "forced_decoder_ids", "bad_words_ids")


def _remap_token(token, old_vocab, new_vocab):
    """Maps a special token id of the full-size vocabulary into the tiny one, keeping ids at the end at the end."""
    if token is None or isinstance(token, (list, tuple)) or token < new_vocab:
        return token
    distance = old_vocab - token
    if distance <= 20:  # last ids of the vocabulary, or just past it (Musicgen's pad/bos = vocab_size)
        return new_vocab - distance
    return 1 + token % 3


def _init_parameters(config_class):
    return inspect.signature(config_class.__init__).parameters


def shrink_kwargs(config_class, layers=2, base=None):
    """Constructor kwargs that shrink `config_class` generically (only keys its constructor names)."""
    params = _init_parameters(config_class)
    default = base if base is not None else config_class()
    kwargs = {}
    for key, value in _GENERIC_SIZES.items():
        if key in params and isinstance(getattr(default, key, None), int):
            kwargs[key] = value
    for key in _LAYER_KEYS:
        if key in params and (isinstance(getattr(default, key, None), int) or key == "num_decoder_layers"):
            kwargs[key] = layers
    old_vocab = getattr(default, "vocab_size", None)
    new_vocab = kwargs.get("vocab_size", old_vocab)
    if isinstance(old_vocab, int):
        for key in _SPECIAL_TOKEN_KEYS:
            value = getattr(default, key, None)
            if isinstance(value, int):
                remapped = _remap_token(value, old_vocab, new_vocab)
                if remapped != value:
                    kwargs[key] = remapped
    for key in _TOKEN_LIST_KEYS:
        if getattr(default, key, None) is not None:
            kwargs[key] = None
    if "initializer_range" in params:
        kwargs["initializer_range"] = 0.02
    if "tie_word_embeddings" in params or hasattr(default, "tie_word_embeddings"):
        kwargs["tie_word_embeddings"] = False
    for key in ("dropout", "attention_dropout", "activation_dropout", "hidden_dropout_prob"):
        if key in params and isinstance(getattr(default, key, None), float):
            kwargs[key] = 0.0
    return kwargs


def _sub_config(config_class, layers, **extra):
    kwargs = shrink_kwargs(config_class, layers)
    kwargs.update(extra)
    return config_class(**kwargs)


# ---- per-model overrides -----------------------------------------------------------------------------------------
# Each entry: config class name -> function(layers) returning constructor kwargs merged over the generic ones,
# or a complete config.  Only where generic shrinking cannot work; the docstring of each says why.


def _gpt_neo(layers):
    """GPT-Neo: `attention_types` must describe exactly `num_layers` layers."""
    types = [[["global", "local"], 1]] if layers == 2 else [[["global"], layers]]
    return {"attention_types": types, "window_size": 8}


def _big_bird(layers):
    """BigBird: block-sparse attention needs long inputs; full attention is what short prompts use anyway."""
    return {"attention_type": "original_full"}


def _led(layers):
    """LED: the encoder's local attention window must be even and is padded to; keep it small."""
    return {"attention_window": [4] * layers}


def _reformer(layers):
    """Reformer: axial position shapes must multiply to the positions, their dims sum to the hidden size; the
    layer kinds are a list."""
    return {
        "attn_layers": ["local", "lsh"][:layers],
        "axial_pos_shape": [8, 16],
        "axial_pos_embds_dim": [16, 16],
        "max_position_embeddings": 128,
        "local_attn_chunk_length": 4,
        "lsh_attn_chunk_length": 4,
        "num_buckets": 4,
        "is_decoder": True,
    }


def _xlnet(layers):
    """XLNet: no memories, as in the released checkpoints' configs (`mem_len` null)."""
    return {"mem_len": None}


def _transfo_xl(layers):
    """Transfo-XL: adaptive softmax cutoffs must lie inside the tiny vocabulary; d_head follows d_model."""
    return {"cutoffs": [20, 60], "d_head": 8, "div_val": 1, "mem_len": 16}


def _mega(layers):
    """Mega: the EMA and chunking sizes are separate knobs; it needs is_decoder to be a causal LM."""
    return {
        "ema_projection_size": 4,
        "shared_representation_size": 16,
        "intermediate_size": 64,
        "is_decoder": True,
        "bidirectional": False,
    }


def _gptsan(layers):
    """GPTSan: the layer count is switch + extension layers; few experts, with a capacity no token overflows (with
    overflow, which tokens an expert drops depends on how many are processed together)."""
    return {
        "num_switch_layers": layers,
        "num_ext_layers": 0,
        "num_experts": 2,
        "expert_capacity": 64,
        "d_ext": 32,
        "d_spout": 8,
    }


def _switch(layers):
    """Switch Transformers: few experts, with a capacity no token overflows (as GPTSan); no router jitter (4.31
    applies it in eval mode too, which makes every forward pass random)."""
    return {
        "router_jitter_noise": 0.0,
        "num_experts": 2,
        "expert_capacity": 64,
        "num_sparse_encoder_layers": 1,
        "num_sparse_decoder_layers": 1,
    }


def _nllb_moe(layers):
    """NLLB-MoE: few experts, with a capacity no token overflows (as GPTSan)."""
    return {"num_experts": 2, "expert_capacity": 64, "encoder_sparse_step": 2, "decoder_sparse_step": 2}


def _cpmant(layers):
    """CpmAnt: prompt and segment tables shrink too (the model uses prompt type 3 and segment 2)."""
    return {
        "prompt_types": 4,
        "prompt_length": 4,
        "segment_types": 4,
        "position_bias_num_buckets": 32,
        "position_bias_max_distance": 64,
        "init_std": 0.02,
    }


def _whisper(layers):
    """Whisper: the encoder's positions fix the feature length (2 frames each); few mel bins."""
    return {"num_mel_bins": 16, "max_source_positions": 16, "encoder_layers": layers, "decoder_layers": layers}


def _speech2text(layers):
    """Speech2Text: the convolutional subsampler has its own channel count and feature size."""
    return {"conv_channels": 16, "input_feat_per_channel": 16, "input_channels": 1}


def _fsmt(layers):
    """FSMT: source and target vocabularies are separate keys."""
    return {"src_vocab_size": TINY_VOCAB, "tgt_vocab_size": TINY_VOCAB, "langs": ["en", "de"]}


def _open_llama(layers):
    """OpenLlama: the memory-efficient attention switch needs xformers; turn it off."""
    return {"use_memory_efficient_attention": False}


def _prophetnet(layers):
    """ProphetNet: n-gram stream count and its own layer keys."""
    return {
        "ngram": 2,
        "num_encoder_layers": layers,
        "num_decoder_layers": layers,
        "num_encoder_attention_heads": 4,
        "num_decoder_attention_heads": 4,
        "encoder_ffn_dim": FFN,
        "decoder_ffn_dim": FFN,
        "num_buckets": 8,
        "relative_max_distance": 16,
    }


def _longt5(layers):
    """LongT5: local attention radius and global blocks shrink with the prompt."""
    return {"local_radius": 4, "global_block_size": 4}


def _markup(layers):
    """MarkupLM: the xpath embedding tables are huge by default."""
    return {
        "max_depth": 8,
        "max_xpath_tag_unit_embeddings": 16,
        "max_xpath_subs_unit_embeddings": 16,
        "xpath_unit_hidden_size": 8,
        "is_decoder": True,
    }


def _musicgen_decoder(layers):
    """Musicgen: codebooks must be a power of two; pad/bos are the id just past the codebook."""
    return {"vocab_size": 64, "pad_token_id": 64, "bos_token_id": 64, "decoder_start_token_id": 64, "num_codebooks": 2}


def _speech_conv(layers):
    """Wav2Vec2-style speech encoders (SpeechT5): the default 7-layer convolutional feature encoder turns 400 samples
    into one frame; two small layers keep ~23 frames, so that padding the last samples masks whole frames."""
    return {
        "conv_dim": (16, 16),
        "conv_stride": (4, 4),
        "conv_kernel": (8, 8),
        "num_conv_pos_embeddings": 8,
        "num_conv_pos_embedding_groups": 4,
        "feat_extract_norm": "layer",
        "mask_time_prob": 0.0,
    }


CONFIG_OVERRIDES = {
    "SpeechT5Config": _speech_conv,
    "MusicgenDecoderConfig": _musicgen_decoder,
    "GPTNeoConfig": _gpt_neo,
    "BigBirdConfig": _big_bird,
    "BigBirdPegasusConfig": _big_bird,
    "LEDConfig": _led,
    "ReformerConfig": _reformer,
    "XLNetConfig": _xlnet,
    "TransfoXLConfig": _transfo_xl,
    "MegaConfig": _mega,
    "GPTSanJapaneseConfig": _gptsan,
    "SwitchTransformersConfig": _switch,
    "NllbMoeConfig": _nllb_moe,
    "CpmAntConfig": _cpmant,
    "WhisperConfig": _whisper,
    "Speech2TextConfig": _speech2text,
    "FSMTConfig": _fsmt,
    "OpenLlamaConfig": _open_llama,
    "ProphetNetConfig": _prophetnet,
    "XLMProphetNetConfig": _prophetnet,
    "LongT5Config": _longt5,
    "MarkupLMConfig": _markup,
}

# Classes that are causal LM heads of encoder architectures: their config must say `is_decoder=True`.
_DECODER_SUFFIXES = ("ForCausalLM", "LMHeadModel", "Decoder")


# ---- composite configurations --------------------------------------------------------------------------------------


def _composite_config(model_class, layers):
    """Configs made of sub-model configs that have no usable default: built from tiny sub-configs."""
    import transformers as tf

    name = model_class.__name__
    if name == "EncoderDecoderModel":
        encoder = _sub_config(tf.BertConfig, layers)
        decoder = _sub_config(tf.BertConfig, layers, is_decoder=True, add_cross_attention=True)
        config = tf.EncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
        config.decoder_start_token_id = 1
        config.pad_token_id = 0
        return config
    if name == "VisionEncoderDecoderModel":
        encoder = _sub_config(tf.ViTConfig, layers, image_size=16, patch_size=8, num_channels=3)
        decoder = _sub_config(tf.GPT2Config, layers, add_cross_attention=True)
        config = tf.VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
        config.decoder_start_token_id = decoder.bos_token_id
        config.pad_token_id = 0
        return config
    if name == "SpeechEncoderDecoderModel":
        encoder = _sub_config(tf.Wav2Vec2Config, layers, do_stable_layer_norm=True, **_speech_conv(layers))
        decoder = _sub_config(tf.BertConfig, layers, is_decoder=True, add_cross_attention=True)
        config = tf.SpeechEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
        config.decoder_start_token_id = 1
        config.pad_token_id = 0
        return config
    if name == "RagTokenForGeneration":
        question_encoder = _sub_config(tf.DPRConfig, layers)
        generator = _sub_config(tf.BartConfig, layers)
        config = tf.RagConfig.from_question_encoder_generator_configs(question_encoder, generator, n_docs=2)
        return config
    if name in ("MusicgenForConditionalGeneration",):
        text_encoder = _sub_config(tf.T5Config, layers)
        audio_encoder = _sub_config(
            tf.EncodecConfig,
            layers,
            hidden_size=8,
            num_filters=4,
            codebook_size=64,
            codebook_dim=8,
            upsampling_ratios=[2, 2],
            num_residual_layers=1,
            num_lstm_layers=1,
            # two quantizers (one per codebook): 1000 * bandwidth // (10 * ceil(sampling_rate / prod(ratios)))
            sampling_rate=100,
            target_bandwidths=[0.5],
        )
        decoder = _sub_config(tf.MusicgenDecoderConfig, layers, **_musicgen_decoder(layers))
        return tf.MusicgenConfig.from_sub_models_config(text_encoder, audio_encoder, decoder)
    return None


def _nested_config(config_class, layers):
    """Configs holding sub-configs as attributes (Pix2Struct, Git, Blip, Bark...): shrink each sub-config."""
    default = config_class()
    from transformers import PretrainedConfig

    kwargs = shrink_kwargs(config_class, layers, base=default)
    for attribute, value in vars(default).items():
        if isinstance(value, PretrainedConfig) and attribute in _init_parameters(config_class):
            sub_class = type(value)
            sub_kwargs = shrink_kwargs(sub_class, layers)
            sub_kwargs.update(_override_kwargs(sub_class, layers))
            kwargs[attribute] = sub_kwargs
    return kwargs


def _override_kwargs(config_class, layers):
    override = CONFIG_OVERRIDES.get(config_class.__name__)
    return override(layers) if override else {}


# Architectures that cannot be built with a single layer, and why.
MIN_LAYERS = {
    "RwkvForCausalLM": 2,  # the time-mixing init divides by (num_hidden_layers - 1)
}


def tiny_config(model_class, **overrides):
    """Tiny configuration for `model_class`; `layers=N` (default 2) sets the depth, other keys are set last."""
    layers = max(overrides.pop("layers", 2), MIN_LAYERS.get(model_class.__name__, 1))
    config = _composite_config(model_class, layers)
    if config is None:
        config_class = model_class.config_class
        kwargs = _nested_config(config_class, layers)
        kwargs.update(_override_kwargs(config_class, layers))
        if model_class.__name__.endswith(_DECODER_SUFFIXES) and "is_decoder" not in kwargs:
            kwargs["is_decoder"] = True
        config = config_class(**kwargs)
    if getattr(config, "is_encoder_decoder", False) and getattr(config, "decoder_start_token_id", 0) is None:
        # T5-style configs leave it to the hub checkpoints; their convention is the pad token.
        config.decoder_start_token_id = config.pad_token_id or 0
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


# ----------------------------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------------------------


EMBED_STD = 1.0
LINEAR_GAIN = 0.9
QK_GAIN = 3.0
BIAS_STD = 0.0
# Attention query/key projections (fused ones included) get a larger gain: sharp attention makes the next token
# depend on which earlier tokens are attended to, i.e. on the context, the padding and the token types.
_QK_NAMES = {
    "q",
    "k",
    "query",
    "key",
    "q_proj",
    "k_proj",
    "q_lin",
    "k_lin",
    "wq",
    "wk",
    "c_attn",
    "query_key_value",
    "qkv_proj",
    "qkv",
    "Wqkv",
    "in_proj",
    "q_attn",
    "query_proj",
    "key_proj",
    "to_q",
    "to_k",
}


def _sensitive_init(model, seed):
    """Re-initialise linear and embedding weights widely: with the default 0.02 init a tiny model repeats one token
    whatever its input, and every comparison would pass."""
    from transformers.pytorch_utils import Conv1D

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module_name, module in model.named_modules():
            if isinstance(module, nn.Embedding):
                weight = torch.randn(module.weight.shape, generator=generator) * EMBED_STD
                if module.padding_idx is not None:
                    weight[module.padding_idx] = 0
                module.weight.copy_(weight)
            elif isinstance(module, (nn.Linear, Conv1D)):
                fan_in = module.weight.shape[1] if isinstance(module, nn.Linear) else module.weight.shape[0]
                gain = QK_GAIN if module_name.rsplit(".", 1)[-1] in _QK_NAMES else LINEAR_GAIN
                std = gain / fan_in**0.5
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * std)
                if module.bias is not None:
                    module.bias.copy_(torch.randn(module.bias.shape, generator=generator) * BIAS_STD)


def _disable_eos(model):
    """No EOS stopping, and plain greedy-with-cache decoding defaults.

    Set on the model config (and its decoder/text sub-configs), from which the generation config is derived:
    `generate()` rebuilds a generation config that differs from its model config's. Some configs carry checkpoint
    style decoding defaults that would change the mode under test (FSMT: 5 beams; Pix2Struct: no cache).
    """
    from transformers import GenerationConfig

    configs = [model.config] + [
        getattr(model.config, key) for key in ("decoder", "generator", "text_config") if hasattr(model.config, key)
    ]
    for config in configs:
        config.eos_token_id = None
        config.forced_eos_token_id = None
        config.num_beams = 1
        config.use_cache = True
    if not model.config.is_encoder_decoder and getattr(model.config, "encoder_no_repeat_ngram_size", 0):
        model.config.encoder_no_repeat_ngram_size = 0  # Blenderbot's default; an encoder-decoder-only option
    model.generation_config = GenerationConfig.from_model_config(model.config)


def _never_generate_pad(model):
    """Zero the pad token's row of the output projection, so that its logit stays near 0, below the best of the
    random ones: the model never generates padding, as trained models do not. Models that derive position ids from
    pad tokens in `input_ids` (the RoBERTa family, Speech2Text2...) would otherwise number the tokens after a
    generated pad token differently depending on how many tokens one forward pass processes. (A logits processor
    would do too, but would change what the scores of stock 4.31.0 show.)"""
    pad = _pad_token(model.config)
    output_embeddings = model.get_output_embeddings()
    if isinstance(output_embeddings, nn.Linear) and pad < output_embeddings.out_features:
        with torch.no_grad():
            output_embeddings.weight[pad] = 0
            if output_embeddings.bias is not None:
                output_embeddings.bias[pad] = 0


def tiny_model(model_class, seed=0, assistant=False, device=DEVICE, **config_overrides):
    """A tiny, input-sensitive, EOS-free `model_class` in eval mode on `device`."""
    if assistant:
        config_overrides.setdefault("layers", 1)
    config = tiny_config(model_class, **config_overrides)
    torch.manual_seed(seed)
    model = model_class(config)
    _sensitive_init(model, seed)
    _disable_eos(model)
    _never_generate_pad(model)
    if model_class.__name__ in POST_BUILD:
        POST_BUILD[model_class.__name__](model)
    return model.to(device).eval()


def draft_model(target, seed=1, device=DEVICE, **config_overrides):
    """A one-layer assistant that agrees with `target` part of the time, as a real draft model does.

    Built like `tiny_model(type(target), seed, assistant=True)`, then every weight whose name and shape it shares
    with `target` (embeddings, first layer, head) is copied from it: it is the target without its last layers. With an
    independently seeded assistant, candidates are nearly always rejected at the first token, so only the first
    position of each verification would count; a draft has some of its candidates accepted, so the verification of
    several tokens, and the cropping of both caches mid-way, are exercised.
    """
    draft = tiny_model(type(target), seed=seed, assistant=True, device=device, **config_overrides)
    target_state = target.state_dict()
    shared = {
        key: value
        for key, value in draft.state_dict().items()
        if key in target_state and target_state[key].shape == value.shape
    }
    draft.load_state_dict({key: target_state[key] for key in shared}, strict=False)
    return draft


POST_BUILD = {
    # X-MOD routes every input through a language adapter and refuses to guess which one.
    "XmodForCausalLM": lambda model: model.set_default_language(model.config.languages[0]),
}


# ----------------------------------------------------------------------------------------------------------------
# Inputs
# ----------------------------------------------------------------------------------------------------------------


def _forward_parameters(model_class):
    return inspect.signature(model_class.forward).parameters


def _vocab_size(config):
    for key in ("vocab_size", "input_vocab_size", "tgt_vocab_size"):
        if isinstance(getattr(config, key, None), int):
            return getattr(config, key)
    for key in ("decoder", "generator", "text_config"):
        sub = getattr(config, key, None)
        if sub is not None:
            return _vocab_size(sub)
    return TINY_VOCAB


def _tokens(generator, length, vocab, batch=1):
    return torch.randint(FIRST_PLAIN_TOKEN, vocab, (batch, length), generator=generator)


def _pad_token(config):
    pad = getattr(config, "pad_token_id", None)
    if pad is None and hasattr(config, "decoder"):
        pad = getattr(config.decoder, "pad_token_id", None)
    return 0 if pad is None else pad


def _is_encoder_decoder(model_class, config):
    # The causal-LM halves of encoder-decoder architectures (BartForCausalLM...) share the config class but turn
    # `is_encoder_decoder` off when they are built; they have no encoder to return.
    return bool(getattr(config, "is_encoder_decoder", False)) and hasattr(model_class, "get_encoder")


def _main_input(model_class):
    return getattr(model_class, "main_input_name", "input_ids")


# Where greedy generation itself ignores an input, a scenario exercising it cannot tell anything: not applicable.
_NO_LEFT_PAD = {
    "CpmAntForCausalLM": "replaces the mask by a dummy; padding is derived from token id 0 instead",
    "RagTokenForGeneration": "the prompt is the retrieved context, given with its own mask",
}
_NO_ENC_MASK = {
    "RagTokenForGeneration": "its encoder input is the retrieved context, given with its own mask",
}
# Encoder-decoder classes whose encoder input is not text but takes a padding mask all the same.
_FEATURE_MASK_LENGTH = {
    "Pix2StructForConditionalGeneration": 4,  # patches
    "Speech2TextForConditionalGeneration": 12,  # frames
    "SpeechT5ForSpeechToText": 120,  # samples
    "SpeechEncoderDecoderModel": 120,  # samples
}


def applicable_scenarios(model_class):
    """The scenarios of `SCENARIOS` that exercise something `model_class` takes, in that order."""
    name = model_class.__name__
    config = tiny_config(model_class)
    forward = _forward_parameters(model_class)
    pifg_source = inspect.getsource(model_class.prepare_inputs_for_generation)
    scenarios = ["plain", "self"]
    if "token_type_ids" in forward and "token_type_ids" in pifg_source:
        scenarios.append("token_type_ids")
    if not _is_encoder_decoder(model_class, config):
        # only where generation passes the mask on: some prepare_inputs_for_generation drop it
        if "attention_mask" in forward and "attention_mask" in pifg_source and name not in _NO_LEFT_PAD:
            scenarios.append("left_pad")
    elif "attention_mask" in forward and name not in _NO_ENC_MASK:
        if _main_input(model_class) == "input_ids" or name in _FEATURE_MASK_LENGTH:
            scenarios.append("enc_mask")
    return scenarios


def _extra_inputs(model, generator, device):
    """The non-text inputs some classes need (speech features, images, patches, encoder states)."""
    config = model.config
    name = type(model).__name__
    extra = {}
    if name == "WhisperForConditionalGeneration":
        extra["input_features"] = torch.randn(
            1, config.num_mel_bins, 2 * config.max_source_positions, generator=generator
        )
    elif name == "Speech2TextForConditionalGeneration":
        extra["input_features"] = torch.randn(
            1, 40, config.input_feat_per_channel * config.input_channels, generator=generator
        )
    elif name in ("SpeechEncoderDecoderModel", "SpeechT5ForSpeechToText"):
        extra["input_values"] = torch.randn(1, 400, generator=generator)
    elif name == "VisionEncoderDecoderModel":
        enc = config.encoder
        extra["pixel_values"] = torch.randn(1, enc.num_channels, enc.image_size, enc.image_size, generator=generator)
    elif name == "GitForCausalLM":
        vision = config.vision_config
        extra["pixel_values"] = torch.randn(
            1, vision.num_channels, vision.image_size, vision.image_size, generator=generator
        )
    elif name == "Pix2StructForConditionalGeneration":
        vision = config.vision_config
        patches = 16
        rows = torch.arange(patches) // 4 + 1
        cols = torch.arange(patches) % 4 + 1
        values = torch.randn(patches, vision.patch_embed_hidden_size, generator=generator)
        extra["flattened_patches"] = torch.cat([rows[:, None].float(), cols[:, None].float(), values], dim=-1)[None]
        extra["attention_mask"] = torch.ones(1, patches, dtype=torch.long)
    elif name == "RagTokenForGeneration":
        n_docs = config.n_docs
        vocab = config.generator.vocab_size
        extra["context_input_ids"] = torch.randint(
            FIRST_PLAIN_TOKEN, vocab, (n_docs, PROMPT_LENGTH), generator=generator
        )
        extra["context_attention_mask"] = torch.ones(n_docs, PROMPT_LENGTH, dtype=torch.long)
        extra["doc_scores"] = torch.randn(1, n_docs, generator=generator)
    elif name == "BlipTextLMHeadModel":
        extra["encoder_hidden_states"] = torch.randn(1, 5, config.encoder_hidden_size, generator=generator)
    return {k: v.to(device) for k, v in extra.items()}


def generation_inputs(model, scenario, device=DEVICE, variant=0):
    """kwargs for `model.generate()` in `scenario`; `variant=1` changes the scenario's extra input."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}")
    model_class = type(model)
    config = model.config
    vocab = _vocab_size(config)
    generator = torch.Generator().manual_seed(1234 + SCENARIOS.index(scenario))
    kwargs = _extra_inputs(model, generator, device)
    main = _main_input(model_class)
    text = main == "input_ids" or "input_ids" in _forward_parameters(model_class) and main not in kwargs
    if main in kwargs:
        text = False
    if model_class.__name__ in ("GitForCausalLM", "BlipTextLMHeadModel"):
        text = True
    if text:
        rows = config.num_codebooks if model_class.__name__ == "MusicgenForCausalLM" else 1
        input_ids = _tokens(generator, PROMPT_LENGTH, vocab, batch=rows)
        attention_mask = torch.ones_like(input_ids[:1])  # Musicgen: one mask row for all codebook rows
        if scenario == "left_pad":
            input_ids[:, :3] = _pad_token(config)
            if variant == 0:
                attention_mask[:, :3] = 0
        elif scenario == "enc_mask":
            input_ids[:, -3:] = _pad_token(config)
            if variant == 0:
                attention_mask[:, -3:] = 0
        kwargs["input_ids"] = input_ids.to(device)
        if "attention_mask" not in kwargs and "attention_mask" in _forward_parameters(model_class):
            kwargs["attention_mask"] = attention_mask.to(device)
        if scenario == "token_type_ids":
            types = torch.tensor([[0, 0, 0, 1, 1, 1, 1]]) if variant == 0 else torch.tensor([[1, 1, 0, 0, 0, 1, 0]])
            kwargs["token_type_ids"] = types.to(device)
    elif scenario == "enc_mask" and model_class.__name__ in _FEATURE_MASK_LENGTH:
        # the last patches / frames / samples are padding
        features = next(value for key, value in kwargs.items() if key != "attention_mask")
        mask = torch.ones(1, features.shape[1], dtype=torch.long)
        if variant == 0:
            mask[:, -_FEATURE_MASK_LENGTH[model_class.__name__] :] = 0
        kwargs["attention_mask"] = mask.to(device)
    kwargs["max_new_tokens"] = MAX_NEW_TOKENS
    kwargs["do_sample"] = False
    return kwargs


def generate(model, **kwargs):
    """`model.generate(**kwargs)`; Bark's sub-models wrap it in a `generate` that needs the whole Bark pipeline's
    generation configs, so their inputs go to the generation mixin's `generate` they delegate to.

    The global RNG is seeded first: some forward passes draw random numbers (Reformer's LSH rotations), and the
    output must not depend on which tests ran before in the same process."""
    torch.manual_seed(0)
    if type(model).__name__ in ("BarkSemanticModel", "BarkCoarseModel"):
        from transformers.generation.utils import GenerationMixin

        return GenerationMixin.generate(model, **kwargs)
    return model.generate(**kwargs)
