"""Models whose forward pass had to learn to take several new tokens on top of a cache: BertGenerationDecoder (no
causal mask with a cache), CpmAntForCausalLM (the tokens of one pass attend to each other both ways) and
FSMTForConditionalGeneration (the cached decoder kept the last token only).

- `test_several_new_tokens_score_as_one_at_a_time`: one forward pass over several new tokens on top of the cache
  gives, at every position, the logits that feeding the tokens one at a time gives (what greedy search sees), and a
  cache as long. Fails on the series without the model changes: BertGeneration's and CpmAnt's new tokens see the
  ones after them, FSMT returns the logits of the last token only. The `padding` case of CpmAnt puts its padding
  token (id 0) at the start of the prompt and among the new tokens: CpmAnt counts the padding per query token.
- `test_fsmt_decoder_prompt`: a decoder prompt of several tokens is read whole with the cache: greedy search equals
  recomputing the whole sequence at every step, and assisted generation equals greedy. Fails on stock 4.31.0 (the
  decoder read the last prompt token only) and on the series without the FSMT change.
- `test_prefix_cache`: `generate(input_ids, past_key_values=prefix)` with a prompt that goes on after the prefix
  equals feeding the rest of the prompt one token at a time, and assisted generation equals greedy. Fails on stock
  (BertGeneration dropped the prompt tokens between the prefix and the last one, FSMT's cached decoder too, and
  assisted generation of CpmAnt raises) and on the series without the model changes (they refuse).
- `test_fsmt_cache_crop`: the crop of assisted decoding keeps FSMT's cross-attention cache and crops the
  self-attention one, into new dictionaries of views. Fails on the series without the crop branch (a KeyError).
"""

import copy
import warnings

import pytest
import torch

from models import harness
from support.assistants import reset_assistant
from support.tiny_models import FIRST_PLAIN_TOKEN, generate, generation_inputs

PROMPT = 6
NEW = 5
LOGITS_ATOL = 1e-4

CASES = [
    ("BertGenerationDecoder", "plain"),
    ("CpmAntForCausalLM", "plain"),
    ("CpmAntForCausalLM", "padding"),
    ("FSMTForConditionalGeneration", "plain"),
]


def _cache_length(name, cache):
    if name == "FSMTForConditionalGeneration":
        return cache[0]["self"]["prev_key"].shape[2]
    return cache[0][0].shape[2]


def _sequence(model, name, case, length):
    """`length` decoder-side tokens (FSMT: from its start token; `padding`: with CpmAnt's padding id 0)."""
    vocab = model.get_output_embeddings().weight.shape[0] if name != "CpmAntForCausalLM" else model.config.vocab_size
    generator = torch.Generator().manual_seed(11)
    ids = torch.randint(FIRST_PLAIN_TOKEN, vocab, (1, length), generator=generator)
    if name == "FSMTForConditionalGeneration":
        ids[:, 0] = model.config.decoder_start_token_id
    if case == "padding":
        ids[:, :2] = 0  # CpmAnt's left padding
        ids[:, PROMPT + 2] = 0  # and a padding token among the new ones
    return ids.to(model.device)


def _step(model, ids, cache, extra):
    """One forward pass on `ids`, built by the model's own `prepare_inputs_for_generation` as generation builds it."""
    mask = {} if model.config.is_encoder_decoder else {"attention_mask": torch.ones_like(ids)}
    inputs = model.prepare_inputs_for_generation(ids, past_key_values=cache, use_cache=True, **mask, **extra)
    with torch.no_grad():
        return model(**inputs, return_dict=True)


def _extra(model):
    if not model.config.is_encoder_decoder:
        return {}
    source = generation_inputs(model, "plain")
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(input_ids=source["input_ids"], attention_mask=source["attention_mask"])
    return {"encoder_outputs": encoder_outputs, "attention_mask": source["attention_mask"]}


@pytest.mark.parametrize("name, case", CASES, ids=[f"{n}-{c}" for n, c in CASES])
def test_several_new_tokens_score_as_one_at_a_time(name, case):
    model = harness.cached_model(name)
    ids = _sequence(model, name, case, PROMPT + NEW)
    extra = _extra(model)
    # FSMT's attention writes its new state into the cache dictionaries it is given: every use gets its own copy
    prompt_cache = _step(model, ids[:, :PROMPT], None, extra).past_key_values

    cache, one_at_a_time = copy.deepcopy(prompt_cache), []
    for end in range(PROMPT + 1, PROMPT + NEW + 1):
        output = _step(model, ids[:, :end], cache, extra)
        one_at_a_time.append(output.logits[:, -1])
        cache = output.past_key_values
    one_at_a_time = torch.stack(one_at_a_time, dim=1)

    several = _step(model, ids, copy.deepcopy(prompt_cache), extra)
    assert several.logits.shape[1] == NEW, f"logits for {several.logits.shape[1]} of the {NEW} new tokens"
    assert _cache_length(name, several.past_key_values) == _cache_length(name, cache)
    max_diff = (several.logits - one_at_a_time).abs().max().item()
    assert max_diff <= LOGITS_ATOL, f"the new tokens are scored differently at once (max logit difference {max_diff})"
    assert torch.equal(several.logits.argmax(-1), one_at_a_time.argmax(-1))


def _quiet_generate(model, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if "assistant_model" in kwargs:
            reset_assistant(kwargs["assistant_model"])
        return generate(model, **kwargs)


def test_fsmt_decoder_prompt():
    name = "FSMTForConditionalGeneration"
    model = harness.cached_model(name)
    source = generation_inputs(model, "plain")
    source.pop("max_new_tokens")
    decoder_prompt = _sequence(model, name, "plain", 4)
    greedy = _quiet_generate(model, decoder_input_ids=decoder_prompt, max_new_tokens=8, **source)

    # the reference: the whole sequence recomputed, with the causal mask, at every step
    sequence = decoder_prompt
    with torch.no_grad():
        for _ in range(8):
            logits = model(source["input_ids"], attention_mask=source["attention_mask"], decoder_input_ids=sequence)
            sequence = torch.cat([sequence, logits.logits[:, -1:].argmax(-1)], dim=-1)
    assert torch.equal(greedy, sequence), f"greedy: {greedy.tolist()}\nrecomputed: {sequence.tolist()}"

    for assistant in (model, harness.cached_draft(name)):
        assisted = _quiet_generate(
            model, decoder_input_ids=decoder_prompt, max_new_tokens=8, assistant_model=assistant, **source
        )
        assert torch.equal(assisted, greedy), f"greedy: {greedy.tolist()}\nassisted: {assisted.tolist()}"


PREFIX_CASES = ["BertGenerationDecoder", "CpmAntForCausalLM", "FSMTForConditionalGeneration"]


@pytest.mark.parametrize("name", PREFIX_CASES)
def test_prefix_cache(name):
    model = harness.cached_model(name)
    ids = _sequence(model, name, "plain", PROMPT + 3)
    extra = _extra(model)
    kwargs = generation_inputs(model, "plain") if model.config.is_encoder_decoder else {}
    kwargs.update(max_new_tokens=8)
    key = "decoder_input_ids" if model.config.is_encoder_decoder else "input_ids"
    if key == "input_ids":
        kwargs["attention_mask"] = torch.ones_like(ids)
    kwargs[key] = ids

    prefix = _step(model, ids[:, :PROMPT], None, extra).past_key_values
    cache = copy.deepcopy(prefix)
    for end in range(PROMPT + 1, ids.shape[1]):  # the rest of the prompt but its last token, one at a time
        cache = _step(model, ids[:, :end], cache, extra).past_key_values
    reference = _quiet_generate(model, past_key_values=cache, **kwargs)

    with_prefix = _quiet_generate(model, past_key_values=copy.deepcopy(prefix), **kwargs)
    assert torch.equal(with_prefix, reference), f"prefix: {with_prefix.tolist()}\nreference: {reference.tolist()}"
    assisted = _quiet_generate(model, past_key_values=copy.deepcopy(prefix), assistant_model=model, **kwargs)
    assert torch.equal(assisted, with_prefix), f"greedy: {with_prefix.tolist()}\nassisted: {assisted.tolist()}"


def test_fsmt_cache_crop():
    name = "FSMTForConditionalGeneration"
    model = harness.cached_model(name)
    ids = _sequence(model, name, "plain", PROMPT)
    cache = _step(model, ids, None, _extra(model)).past_key_values
    cropped = model._crop_cache(cache, -2)
    assert isinstance(cropped, list) and len(cropped) == len(cache)
    for layer, cropped_layer in zip(cache, cropped, strict=True):
        assert cropped_layer is not layer and cropped_layer["self"] is not layer["self"]
        for key in ("prev_key", "prev_value"):
            original, kept = layer["self"][key], cropped_layer["self"][key]
            assert original.shape[2] == PROMPT and kept.shape[2] == PROMPT - 2
            assert torch.equal(kept, original[:, :, :-2]) and kept.data_ptr() == original.data_ptr()  # a view
        assert cropped_layer["encoder_decoder"] is layer["encoder_decoder"]
