"""Assisted generation of models prompted with `inputs_embeds`.

Decoder-only models whose `prepare_inputs_for_generation` takes `inputs_embeds` (the others refuse them in greedy
search already) are prompted with:

- `ids+token-embeds`: `input_ids` and the token embeddings of the same ids;
- `ids+soft-prompt`: `input_ids` and a soft prompt (random embeddings that are no token's) in front of the token
  embeddings of the ids, so the embeddings are longer than the ids;
- `soft-alone`: a soft prompt alone (`generate()` then starts the sequence from a BOS token);
- `soft-alone-batched`: a batch of soft prompts, left-padded by the attention mask;
- `ids-longer`: `input_ids` longer than the (soft) embeddings.

Contract: equal to greedy generation, with the model as its own assistant and with a draft. The model reads the
embeddings in its uncached forward pass; the assistant reads what it can (the ids, or the tokens generated so far).
Stock 4.31.0 ignores the embeddings (other tokens than greedy search for soft prompts) and refuses batches; the series
before the fix refused every prompt given as embeddings, and its plain greedy search failed with ids longer than the
embeddings, which stock ran: `test_greedy_ids_longer_than_embeddings` holds plain generation to stock's behaviour
(the ids are a prefix of the output, the tokens come from the embeddings).

Encoder-decoder models prompted with encoder `inputs_embeds` take a decoder-only assistant (as on stock); an
encoder-decoder assistant has nothing to encode and is refused, saying so (stock failed with "pick one").
"""

import pytest
import torch
import transformers
from transformers import BartForConditionalGeneration, GPT2LMHeadModel, T5ForConditionalGeneration

from integration._common import assert_same_tokens, run
from support.tiny_models import FIRST_PLAIN_TOKEN, PROMPT_LENGTH, TINY_VOCAB, draft_model, tiny_model

CLASSES = [
    "BioGptForCausalLM",
    "BloomForCausalLM",
    "GPT2LMHeadModel",
    "GPTBigCodeForCausalLM",
    "GPTJForCausalLM",
    "GPTNeoXForCausalLM",
    "LlamaForCausalLM",
    "OPTForCausalLM",
    "OpenLlamaForCausalLM",
]
CASES = ["ids+token-embeds", "ids+soft-prompt", "soft-alone", "soft-alone-batched", "ids-longer"]
SOFT_TOKENS = 4


def _ids(rows=1, length=PROMPT_LENGTH, seed=3):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(FIRST_PLAIN_TOKEN, TINY_VOCAB, (rows, length), generator=generator)


def _soft(model, rows, length, seed=5):
    """Embeddings that are no token's, of the scale of the model's token embeddings."""
    weight = model.get_input_embeddings().weight
    generator = torch.Generator().manual_seed(seed)
    soft = torch.randn(rows, length, weight.shape[1], generator=generator) * weight.detach().std().item()
    return soft.to(weight.device, weight.dtype)


def _inputs(model, case):
    device = model.device
    embed = model.get_input_embeddings()
    ids = _ids().to(device)
    with torch.no_grad():
        if case == "ids+token-embeds":
            return {"input_ids": ids, "inputs_embeds": embed(ids)}
        if case == "ids+soft-prompt":
            embeds = torch.cat([_soft(model, 1, SOFT_TOKENS), embed(ids)], dim=1)
            return {"input_ids": ids, "inputs_embeds": embeds}
        if case == "soft-alone":
            return {"inputs_embeds": _soft(model, 1, PROMPT_LENGTH)}
        if case == "soft-alone-batched":
            mask = torch.ones(3, PROMPT_LENGTH, dtype=torch.long, device=device)
            mask[1, :2] = 0
            mask[2, :3] = 0
            return {"inputs_embeds": _soft(model, 3, PROMPT_LENGTH), "attention_mask": mask}
        if case == "ids-longer":
            return {"input_ids": ids, "inputs_embeds": _soft(model, 1, 3)}
    raise ValueError(case)


@pytest.mark.parametrize("assistant", ["draft", "self"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", CLASSES)
def test_decoder_only_inputs_embeds(name, case, assistant):
    model = tiny_model(getattr(transformers, name), seed=0)
    inputs = dict(_inputs(model, case), max_new_tokens=12, do_sample=False)
    greedy = run(model, **inputs)
    if name == "GPT2LMHeadModel" and case in ("ids+soft-prompt", "soft-alone"):
        ids_only = {"input_ids": inputs.get("input_ids", greedy[:, :1]), "max_new_tokens": 12, "do_sample": False}
        assert not torch.equal(
            run(model, **ids_only), greedy
        ), "the embeddings change nothing: the test proves nothing"
    helper = model if assistant == "self" else draft_model(model)
    assert_same_tokens(greedy, run(model, helper, **inputs), f"({case}, {assistant} as the assistant)")


@pytest.mark.parametrize("name", ["GPT2LMHeadModel", "LlamaForCausalLM", "OPTForCausalLM"])
def test_greedy_ids_longer_than_embeddings(name):
    """Plain greedy search as on stock: the embeddings are read, the ids are the output's prefix."""
    model = tiny_model(getattr(transformers, name), seed=0)
    inputs = _inputs(model, "ids-longer")
    with_ids = run(model, **inputs, max_new_tokens=8, do_sample=False)
    alone = run(model, inputs_embeds=inputs["inputs_embeds"], max_new_tokens=8, do_sample=False)
    assert torch.equal(with_ids[:, :PROMPT_LENGTH], inputs["input_ids"])
    assert_same_tokens(alone[:, 1:], with_ids[:, PROMPT_LENGTH:], "(the tokens generated from the embeddings)")


ENCODER_DECODER = {
    "T5ForConditionalGeneration": T5ForConditionalGeneration,
    "BartForConditionalGeneration": BartForConditionalGeneration,
}


@pytest.mark.parametrize("embeddings", ["token", "soft"])
@pytest.mark.parametrize("name", sorted(ENCODER_DECODER))
def test_encoder_decoder_inputs_embeds(name, embeddings):
    model = tiny_model(ENCODER_DECODER[name], seed=0)
    ids = _ids().to(model.device)
    with torch.no_grad():
        embeds = model.get_encoder().embed_tokens(ids) if embeddings == "token" else _soft(model, 1, PROMPT_LENGTH)
    inputs = {"inputs_embeds": embeds, "max_new_tokens": 12, "do_sample": False}
    greedy = run(model, **inputs)
    decoder_only = tiny_model(GPT2LMHeadModel, seed=3, assistant=True)
    assert_same_tokens(greedy, run(model, decoder_only, **inputs), "(a decoder-only assistant)")
    with pytest.raises(ValueError, match="nothing it can read"):
        run(model, draft_model(model), **inputs)
