"""Assisted generation of BLIP, BLIP-2 and InstructBLIP, whose own `generate` hands the generation to an inner model.

`BlipForConditionalGeneration.generate` runs its vision model and hands the generation to its text decoder, which
cross-attends to the image embeddings; BLIP-2 and InstructBLIP prompt their language model (OPT, or T5) with
`inputs_embeds` (the projected query tokens, then the prompt). Tiny configs, the suite's sensitive initialisation,
one image and a batch of two (BLIP-2 and InstructBLIP with a padded text prompt).

Contract: equal to greedy generation with an assistant of the model's class (another instance, with fewer layers
and a smaller vision model where the class allows it, and a copy of the model), and with the inner model of another
instance, which v4.31.0 took too. Stock 4.31.0 crashes with an assistant of the model's class, returns other tokens
than greedy for BLIP-2/OPT with an inner language model, and refuses batches; the series before the fix refused the
embeddings and failed for a BLIP text decoder of another vision width. A T5 language model given as the assistant
of BLIP-2/T5 has nothing to encode (the model is prompted with embeddings): refused, with that reason.
(`tests/models/blip*/test_modeling_*.py` in the tree test the assistant of the model's class with upstream's
testers.)
"""

import copy

import pytest
import torch
from transformers import (
    Blip2Config,
    Blip2ForConditionalGeneration,
    BlipConfig,
    BlipForConditionalGeneration,
    GenerationConfig,
    InstructBlipConfig,
    InstructBlipForConditionalGeneration,
)

from integration._common import assert_same_tokens, run
from support.device import DEVICE
from support.tiny_models import _sensitive_init

VOCAB = 99
VISION = {
    "hidden_size": 32,
    "intermediate_size": 37,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "image_size": 16,
    "patch_size": 8,
}
QFORMER = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "intermediate_size": 37,
    "encoder_hidden_size": 32,
    "cross_attention_frequency": 1,
}
OPT = {
    "model_type": "opt",
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "ffn_dim": 37,
    "num_attention_heads": 4,
    "word_embed_proj_dim": 32,
    "max_position_embeddings": 64,
    "bos_token_id": 2,
    "eos_token_id": None,
    "pad_token_id": 1,
    "architectures": ["OPTForCausalLM"],  # InstructBLIP's `generate` reads it
}
T5 = {
    "model_type": "t5",
    "vocab_size": VOCAB,
    "d_model": 32,
    "d_kv": 8,
    "d_ff": 37,
    "num_heads": 4,
    "decoder_start_token_id": 0,
    "eos_token_id": None,
    "pad_token_id": 0,
}


def _build(model_class, config, seed):
    torch.manual_seed(seed)
    model = model_class(config)
    _sensitive_init(model, seed)
    for sub_config in (model.config, getattr(model.config, "text_config", None)):
        if sub_config is not None:
            sub_config.forced_eos_token_id = None
    model.generation_config = GenerationConfig.from_model_config(model.config)
    model.generation_config.eos_token_id = None
    return model.to(DEVICE).eval()


def _blip(seed, layers=2, vision_width=32):
    text = {
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "intermediate_size": 37,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "encoder_hidden_size": vision_width,
        "max_position_embeddings": 64,
        "bos_token_id": 97,
        "sep_token_id": 98,
        "eos_token_id": 2,  # BLIP's `generate` builds its default prompt from it; it stops at `sep_token_id`
        "pad_token_id": 0,
    }
    vision = dict(VISION, hidden_size=vision_width)
    model = _build(BlipForConditionalGeneration, BlipConfig(text_config=text, vision_config=vision), seed)
    model.config.text_config.sep_token_id = VOCAB + 1  # never generated: every caption has its full length
    return model


def _blip2(seed, language_model, layers=2):
    text = dict(OPT if language_model == "opt" else T5)
    text["num_hidden_layers" if language_model == "opt" else "num_layers"] = layers
    config = Blip2Config(vision_config=VISION, qformer_config=QFORMER, text_config=text, num_query_tokens=4)
    return _build(Blip2ForConditionalGeneration, config, seed)


def _instructblip(seed, layers=2):
    text = dict(OPT, num_hidden_layers=layers)
    config = InstructBlipConfig(vision_config=VISION, qformer_config=QFORMER, text_config=text, num_query_tokens=4)
    return _build(InstructBlipForConditionalGeneration, config, seed)


MODELS = {
    "blip": lambda seed, layers=2: _blip(seed, layers),
    "blip-2-opt": lambda seed, layers=2: _blip2(seed, "opt", layers),
    "blip-2-t5": lambda seed, layers=2: _blip2(seed, "t5", layers),
    "instructblip-opt": lambda seed, layers=2: _instructblip(seed, layers),
}


def _inner(model):
    return model.text_decoder if isinstance(model, BlipForConditionalGeneration) else model.language_model


def _inputs(name, batch_size):
    generator = torch.Generator().manual_seed(7)
    inputs = {"pixel_values": torch.randn(batch_size, 3, 16, 16, generator=generator), "max_new_tokens": 8}
    if name != "blip":
        ids = torch.randint(5, VOCAB, (batch_size, 5), generator=generator)
        mask = torch.ones_like(ids)
        if batch_size > 1:
            ids[1, :2], mask[1, :2] = 1, 0
        inputs.update(input_ids=ids, attention_mask=mask)
        if name.startswith("instructblip"):
            inputs.update(qformer_input_ids=ids, qformer_attention_mask=mask)
    return {key: value.to(DEVICE) if torch.is_tensor(value) else value for key, value in inputs.items()}


@pytest.mark.parametrize("batch_size", [1, 2])
@pytest.mark.parametrize("assistant", ["own-class", "own-copy", "inner-model"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_assistant(name, assistant, batch_size):
    model = MODELS[name](0)
    inputs = _inputs(name, batch_size)
    greedy = run(model, **copy.deepcopy(inputs))
    if assistant == "own-class":
        helper = MODELS[name](1, layers=1)
    elif assistant == "own-copy":
        helper = copy.deepcopy(model)
    else:
        helper = _inner(MODELS[name](1, layers=1))
    if name == "blip-2-t5" and assistant == "inner-model":
        with pytest.raises(ValueError, match="nothing it can read"):
            run(model, helper, **copy.deepcopy(inputs))
        return
    assert_same_tokens(greedy, run(model, helper, **copy.deepcopy(inputs)), f"({name}, {assistant})")


@pytest.mark.parametrize("assistant", ["own-class", "text-decoder"])
def test_blip_assistant_of_another_vision_width(assistant):
    """An assistant of the model's class attends to its own image embeddings; a bare text decoder of another
    width drafts without the model's (v4.31.0 drafted without them, the series before the fix crashed)."""
    model = _blip(0)
    other = _blip(1, layers=1, vision_width=16)
    inputs = _inputs("blip", 2)
    helper = other if assistant == "own-class" else other.text_decoder
    assert_same_tokens(run(model, **copy.deepcopy(inputs)), run(model, helper, **copy.deepcopy(inputs)))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_refused_as_the_assistant_of_another_class(name):
    model = MODELS[name](0)
    language_model = _inner(MODELS[name](1))
    ids = torch.randint(5, VOCAB, (1, 5)).to(DEVICE)
    kwargs = {"decoder_input_ids": ids[:, :1]} if language_model.config.is_encoder_decoder else {}
    with pytest.raises(ValueError, match="can only assist a model of its own class"):
        run(language_model, model, input_ids=ids, max_new_tokens=4, **kwargs)
