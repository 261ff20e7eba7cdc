"""Per-token model inputs besides `token_type_ids`, and the list of every such input of the v4.31.0 models.

`RoCBertForCausalLM` takes `input_shape_ids` and `input_pronunciation_ids`, one per token like the ids. Greedy
search passes them through `prepare_inputs_for_generation` (the new tokens get the last prompt token's values, as
the tensors are not extended); stock 4.31.0 assisted generation drops them; the current series passes them unsliced
with several candidate tokens and crashes (`Sizes of tensors must match ... Expected size 12 but got size 11`).

`test_per_token_inputs_are_known` enumerates the forward inputs of every generation class by a rule and fails on an
input the rule finds that is not classified below, so that a per-token input cannot be forgotten by whatever
completes and extends them in assisted generation (the mechanism is not tested here, only the list).

The rule: a forward parameter whose name ends in `_ids` or `_mask` is a candidate; it is not per-token when it is
the token input itself (`input_ids`, `decoder_input_ids`), a head mask (`*head_mask`: per layer and head), or an
encoder-side input of an encoder-decoder class (anything but `decoder_*`: fixed while decoding). Every remaining
candidate is listed in `PER_TOKEN` (one value per position of the ids the model generates, so it must follow them)
or `NOT_PER_TOKEN` (another shape), each with its reason.

What each test fails on:
- `test_rocbert_shape_and_pronunciation_ids[*]`: the current series (the crash above); stock (it drops the inputs).
- `test_per_token_inputs_are_known[*]`: a class with an input the lists do not classify (a new model, or a broken
  variant of the rule: `test_the_rule_finds_a_new_input` checks it finds one).
"""

import inspect

import pytest
import torch
from transformers import PreTrainedModel, RoCBertForCausalLM

from integration._common import assert_same_tokens, run
from support.tiny_models import discover_generation_classes, draft_model, generation_inputs, tiny_model

PER_TOKEN = {
    "attention_mask": "decoder-only models: one flag per position of the ids (cache and new tokens)",
    "decoder_attention_mask": "encoder-decoder models: one flag per decoder position",
    "token_type_ids": "one segment per token (GPT-2, BERT family, GPTSAN-japanese's prefix)",
    "position_ids": "one position per token",
    "decoder_position_ids": "Whisper: one decoder position per token, derived from the decoder mask in generation",
    "input_shape_ids": "RoCBert: the glyph of each token",
    "input_pronunciation_ids": "RoCBert: the pinyin of each token",
    "task_type_ids": "ERNIE: one task id per token (its prepare_inputs_for_generation does not pass them on)",
    "input_mask": "XLNet: the inverse of attention_mask (XLNet is refused)",
}
NOT_PER_TOKEN = {
    "lang_ids": "X-MOD: one language per sequence, shape (batch_size,)",
    "mc_token_ids": "GPT-2 double heads: one classification token index per choice",
    "perm_mask": "XLNet: a (sequence, sequence) permutation mask (XLNet is refused)",
}
_ENCODER_SIDE_EXAMPLES = "attention_mask of encoder-decoder models, global_attention_mask (LED), padding_mask"


def per_token_candidates(cls):
    """The forward inputs of `cls` that the rule of this module's docstring leaves to classify."""
    from support.tiny_models import tiny_config

    try:
        is_encoder_decoder = bool(getattr(tiny_config(cls), "is_encoder_decoder", False)) and hasattr(
            cls, "get_encoder"
        )
    except Exception:  # noqa: BLE001 - a config that cannot be built: judged by the signature alone
        is_encoder_decoder = "decoder_input_ids" in inspect.signature(cls.forward).parameters
    found = set()
    for name in inspect.signature(cls.forward).parameters:
        if not name.endswith(("_ids", "_mask")) or name in ("input_ids", "decoder_input_ids"):
            continue
        if name.endswith("head_mask"):
            continue
        if name.startswith("encoder_") or (is_encoder_decoder and not name.startswith("decoder_")):
            continue
        if name.startswith("context_"):  # RAG: per retrieved document, encoder side
            continue
        found.add(name)
    return found


@pytest.mark.parametrize("name", sorted(discover_generation_classes()))
def test_per_token_inputs_are_known(name):
    cls = discover_generation_classes()[name]
    unknown = per_token_candidates(cls) - set(PER_TOKEN) - set(NOT_PER_TOKEN)
    assert not unknown, (
        f"{name} takes {sorted(unknown)}: classify them in PER_TOKEN (and make assisted generation complete and "
        "extend them) or NOT_PER_TOKEN, with the reason"
    )


def test_the_lists_are_not_stale():
    """Every listed input is still taken by some generation class."""
    taken = set()
    for cls in discover_generation_classes().values():
        taken |= per_token_candidates(cls)
    stale = (set(PER_TOKEN) | set(NOT_PER_TOKEN)) - taken
    assert not stale, f"no generation class takes {sorted(stale)} any more"


def test_the_rule_finds_a_new_input():
    """A broken variant: a model with a new per-token input must be reported."""

    class NewInputModel(PreTrainedModel):
        def forward(self, input_ids=None, attention_mask=None, head_mask=None, segment_ids=None, past_key_values=None):
            pass

    assert per_token_candidates(NewInputModel) == {"attention_mask", "segment_ids"}


# ---- RoCBert -------------------------------------------------------------------------------------------------------

_ROC_SIZES = {"shape_vocab_size": 16, "pronunciation_vocab_size": 16}


def _roc_inputs(model, variant=0):
    inputs = generation_inputs(model, "plain")
    length = inputs["input_ids"].shape[1]
    generator = torch.Generator().manual_seed(11 + variant)
    for key in ("input_shape_ids", "input_pronunciation_ids"):
        inputs[key] = torch.randint(1, 16, (1, length), generator=generator).to(model.device)
    return inputs


@pytest.mark.parametrize("assistant_kind", ["draft", "itself"])
def test_rocbert_shape_and_pronunciation_ids(assistant_kind):
    target = tiny_model(RoCBertForCausalLM, seed=0, **_ROC_SIZES)
    assistant = target if assistant_kind == "itself" else draft_model(target, **_ROC_SIZES)
    inputs = _roc_inputs(target)
    greedy = run(target, **inputs)
    assert not torch.equal(run(target, **_roc_inputs(target, variant=1)), greedy), "RoCBert ignores the inputs"
    assert_same_tokens(greedy, run(target, assistant, **inputs))
