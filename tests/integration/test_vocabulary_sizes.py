"""An assistant that shares the model's tokenizer but not its embedding size.

Real pairs differ in the size of their embedding matrices while sharing a tokenizer: Pythia's small models have
50304 rows, the large ones 50432; `resize_token_embeddings` pads to a multiple of 64 or adds rows nobody predicts.
Stock 4.31.0 assists them as long as no id out of range comes up, and crashes deep in an embedding when one does.

Contract: such pairs work and equal greedy, whatever the assistant proposes. The assistant only proposes ids that
both models' decoders can embed (the model would reject any other), and reads an id it cannot embed as its last
one (what it reads only changes its proposals). The sizes are read once per call, from the decoders' input
embeddings; nothing is checked per round.

What each test fails on:
- `test_model_with_more_rows`, `test_assistant_with_more_rows`: a series that refuses such pairs up front; pass on
  stock.
- `test_candidate_the_model_cannot_embed`: stock (an IndexError deep in the model's embedding, or a device-side
  assert on CUDA) and a series that refuses the pair when the id comes up.
- `test_assistant_head_wider_than_its_embeddings`: stock (an IndexError in the assistant's embedding) and a loop that
  restricts the candidates to the model's vocabulary only.
- `test_model_tokens_the_assistant_cannot_embed`: stock (an IndexError in the assistant's embedding).
- `test_fsmt_target_vocabulary_larger_than_source`: a series that reads FSMT's encoder (source) embeddings and refuses
  valid target ids.
"""

import pytest
import torch
from transformers import BartForConditionalGeneration, GPT2LMHeadModel

from integration._common import ForwardCounter, assert_same_tokens, run
from support.tiny_models import TINY_VOCAB, draft_model, generation_inputs, tiny_model

PADDED_VOCAB = 128  # rows after resizing: what the tokenizer never produces
CLASSES = [GPT2LMHeadModel, BartForConditionalGeneration]


def _pad_rows(model, rows=PADDED_VOCAB):
    """`resize_token_embeddings` as users do, with the new output rows predicting nothing (zero logits, below the
    best of the random ones), as untrained padding rows of a real checkpoint."""
    model.resize_token_embeddings(rows)
    with torch.no_grad():
        model.get_output_embeddings().weight[TINY_VOCAB:] = 0
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias[:, TINY_VOCAB:] = 0
    return model


def _assert_within_tokenizer(output):
    assert int(output.max()) < TINY_VOCAB, "greedy output uses a padding row: the comparison would be meaningless"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_model_with_more_rows(cls):
    """The Pythia case: the model has more embedding rows than the assistant."""
    target = tiny_model(cls, seed=0)
    assistant = draft_model(target)  # shares its weights, before the resizing: some candidates accepted
    inputs = generation_inputs(target, "plain")  # prompt ids from the tokenizer's range
    _pad_rows(target)
    greedy = run(target, **inputs)
    _assert_within_tokenizer(greedy)
    assert_same_tokens(greedy, run(target, assistant, **inputs))


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_assistant_with_more_rows(cls):
    target = tiny_model(cls, seed=0)
    assistant = _pad_rows(draft_model(target))
    inputs = generation_inputs(target, "plain")
    greedy = run(target, **inputs)
    _assert_within_tokenizer(greedy)
    assert_same_tokens(greedy, run(target, assistant, **inputs))


class _Propose:
    """Makes the assistant's best candidate `token_id` at every step."""

    def __init__(self, model, token_id):
        self.token_id = token_id
        self._handle = model.register_forward_hook(self)

    def __call__(self, module, args, output):
        output.logits[..., self.token_id] += 1e4

    def remove(self):
        self._handle.remove()


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_candidate_the_model_cannot_embed(cls):
    """The assistant's best candidate is, at every step, an id only its own (padded) embeddings hold."""
    target = tiny_model(cls, seed=0)
    assistant = _pad_rows(draft_model(target))
    inputs = generation_inputs(target, "plain")
    greedy = run(target, **inputs)
    proposing = _Propose(assistant, PADDED_VOCAB - 8)
    counter = ForwardCounter(assistant)
    try:
        assisted = run(target, assistant, **inputs)
    finally:
        proposing.remove()
        counter.remove()
    assert counter.count > 0, "the assistant never drafted"
    assert_same_tokens(greedy, assisted)


def _with_wide_head(assistant, rows=PADDED_VOCAB):
    """An (untied) head that predicts over more ids than the assistant's input embeddings hold."""
    with torch.no_grad():
        head = torch.nn.Linear(assistant.config.n_embd, rows, bias=False)
        head.weight.zero_()
        head.weight[:TINY_VOCAB] = assistant.lm_head.weight
    assistant.lm_head = head.to(assistant.device)
    return assistant


def test_assistant_head_wider_than_its_embeddings():
    """Both models embed TINY_VOCAB ids; the assistant's head proposes one beyond them at every step."""
    target = tiny_model(GPT2LMHeadModel, seed=0)
    assistant = _with_wide_head(draft_model(target))
    inputs = generation_inputs(target, "plain")
    greedy = run(target, **inputs)
    proposing = _Propose(assistant, PADDED_VOCAB - 8)
    try:
        assisted = run(target, assistant, **inputs)
    finally:
        proposing.remove()
    assert_same_tokens(greedy, assisted)


def test_model_tokens_the_assistant_cannot_embed():
    """The model picks ids the assistant has no embedding for (the model's padded rows made its best tokens): the
    assistant reads them as its last id, and the output is greedy's."""
    target = _pad_rows(tiny_model(GPT2LMHeadModel, seed=0))
    assistant = draft_model(tiny_model(GPT2LMHeadModel, seed=0))
    with torch.no_grad():
        target.get_output_embeddings().weight[PADDED_VOCAB - 8] = target.get_output_embeddings().weight[7] * 3
    inputs = generation_inputs(target, "plain")
    greedy = run(target, **inputs)
    assert int(greedy.max()) >= TINY_VOCAB, "the model never picks an id the assistant cannot embed"
    assert_same_tokens(greedy, run(target, assistant, **inputs))


def test_fsmt_target_vocabulary_larger_than_source():
    """FSMT's decoder reads target ids, from embeddings of its own: a target vocabulary larger than the source one
    is valid, and the pair's output is greedy's."""
    from transformers import FSMTForConditionalGeneration

    target = tiny_model(FSMTForConditionalGeneration, seed=0, tgt_vocab_size=TINY_VOCAB + 20)
    with torch.no_grad():  # a target id beyond the source vocabulary becomes one of the model's best tokens
        head = target.get_output_embeddings().weight
        head[TINY_VOCAB + 10] = head[85] * 3
    assistant = draft_model(target, tgt_vocab_size=TINY_VOCAB + 20)
    assert target.get_input_embeddings().num_embeddings < target.get_output_embeddings().num_embeddings
    inputs = generation_inputs(target, "plain")
    inputs["input_ids"] = inputs["input_ids"] % TINY_VOCAB  # source ids
    greedy = run(target, **inputs)
    assert int(greedy.max()) >= TINY_VOCAB, "greedy output holds no target id beyond the source vocabulary"
    assert_same_tokens(greedy, run(target, assistant, **inputs))


# Logits processors that index the vocabulary by id: with an id only the model holds where it is the wider
def _id_processors(wide_id):
    return {
        "bad_words_ids": {"bad_words_ids": [[wide_id], [7, 8]]},
        "sequence_bias": {"sequence_bias": {(wide_id,): 2.0, (9,): -1.0}},
        "suppress_tokens": {"suppress_tokens": [wide_id, 10]},
        "begin_suppress_tokens": {"begin_suppress_tokens": [wide_id, 11]},
        "repetition_penalty": {"repetition_penalty": 1.5},
        "no_repeat_ngram_size": {"no_repeat_ngram_size": 2},
    }


@pytest.mark.parametrize("processor", sorted(_id_processors(0)))
@pytest.mark.parametrize("wider", ["model", "assistant"])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_processors_that_index_the_vocabulary(cls, wider, processor):
    """Every logits processor greedy search runs, assisted generation runs, with greedy's tokens, whichever model has
    more rows: the assistant's logits are processed at the model's width (they crashed on ids the assistant lacks, or
    on a bias built at the assistant's width first)."""
    target = tiny_model(cls, seed=0)
    assistant = draft_model(target)
    inputs = generation_inputs(target, "plain")
    _pad_rows(target if wider == "model" else assistant)
    kwargs = _id_processors(PADDED_VOCAB - 8 if wider == "model" else TINY_VOCAB - 3)[processor]
    greedy = run(target, **inputs, **kwargs)
    assert_same_tokens(greedy, run(target, assistant, **inputs, **kwargs), f"with {processor}")


def test_encoder_ids_the_assistant_cannot_embed():
    """An encoder-decoder assistant with fewer rows than the model reads the model's encoder input: ids it cannot
    embed are read as its last one, as its decoder reads them (its encoder failed on an index out of range)."""
    target = _pad_rows(tiny_model(BartForConditionalGeneration, seed=0))
    assistant = draft_model(tiny_model(BartForConditionalGeneration, seed=0))
    inputs = generation_inputs(target, "plain")
    inputs["input_ids"] = inputs["input_ids"].clone()
    inputs["input_ids"][:, 1] = PADDED_VOCAB - 8  # an id only the model's embeddings hold
    greedy = run(target, **inputs)
    assert_same_tokens(greedy, run(target, assistant, **inputs))
