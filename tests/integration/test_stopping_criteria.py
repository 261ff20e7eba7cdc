"""User stopping criteria: assisted generation stops exactly where greedy search stops.

Greedy search checks the criteria after every token. Assisted generation accepts several tokens per round and
checks them once per round, so it returns tokens past the point where greedy stopped. Beyond stock: stock 4.31.0
and the current series both fail the `itself` ids (every candidate accepted, several tokens per round) and the
Llama `draft` ids; the GPT-2 and BART drafts are rejected nearly every round, so their rounds add one token at a
time and those ids pass on both (they guard the case where the stop falls on a round's end). Criteria on time
(`max_time`) are exempt.
"""

import pytest
from transformers import (
    BartForConditionalGeneration,
    GPT2LMHeadModel,
    LlamaForCausalLM,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.generation.stopping_criteria import MaxNewTokensCriteria

from integration._common import assert_same_tokens, run
from support.tiny_models import draft_model, generation_inputs, tiny_model

CLASSES = {"gpt2": GPT2LMHeadModel, "llama": LlamaForCausalLM, "bart": BartForConditionalGeneration}
_MODELS = {}


class StopOnToken(StoppingCriteria):
    """Stops once `token_id` appears among the tokens after the first `start` ones."""

    def __init__(self, token_id, start):
        self.token_id = token_id
        self.start = start

    def __call__(self, input_ids, scores, **kwargs):
        return bool((input_ids[0, self.start :] == self.token_id).any())


class StopAfter(StoppingCriteria):
    """Stops once the sequence holds `length` tokens (a length criterion of the user's own)."""

    def __init__(self, length):
        self.length = length

    def __call__(self, input_ids, scores, **kwargs):
        return input_ids.shape[-1] >= self.length


def _models(name):
    if name not in _MODELS:
        target = tiny_model(CLASSES[name], seed=0)
        _MODELS[name] = (target, draft_model(target))
    return _MODELS[name]


def _criterion(kind, target, inputs):
    """A criterion that stops greedy search after the 5th new token or so, well before `max_new_tokens`."""
    full = run(target, **inputs)
    start = inputs["input_ids"].shape[1] if not target.config.is_encoder_decoder else 1
    new_tokens = full[0, start:].tolist()
    if kind == "length":
        return StopAfter(start + 5)
    # the first token, from the 5th new one on, that does not occur before it
    for index in range(4, len(new_tokens)):
        if new_tokens[index] not in new_tokens[:index]:
            return StopOnToken(new_tokens[index], start)
    pytest.fail(f"no token to stop on in {new_tokens}")


@pytest.mark.parametrize("assistant_kind", ["draft", "itself"])
@pytest.mark.parametrize("kind", ["token", "length"])
@pytest.mark.parametrize("name", sorted(CLASSES))
def test_assisted_stops_where_greedy_stops(name, kind, assistant_kind):
    target, draft = _models(name)
    assistant = target if assistant_kind == "itself" else draft
    inputs = generation_inputs(target, "plain")
    criteria = StoppingCriteriaList([_criterion(kind, target, inputs)])
    greedy = run(target, stopping_criteria=criteria, **inputs)
    assert greedy.shape[1] < run(target, **inputs).shape[1], "the criterion does not stop greedy search early"
    assisted = run(target, assistant, stopping_criteria=criteria, **inputs)
    assert_same_tokens(greedy, assisted, f"with a {kind} stopping criterion ({assistant_kind} assistant)")


@pytest.mark.parametrize("source", ["draft", "itself", "lookup"])
@pytest.mark.parametrize("name", ["gpt2", "bart"])
def test_no_candidate_past_a_callers_own_length_limit(name, source):
    """A caller's own `MaxNewTokensCriteria`, shorter than the call's `max_new_tokens`, bounds the candidates as the
    call's own limit does: the output has greedy search's length, not a round's more (stock overshoots it, and so did
    the series while it bounded the candidates by the call's limit only)."""
    target, draft = _models(name)
    inputs = generation_inputs(target, "plain")
    start = inputs["input_ids"].shape[1] if not target.config.is_encoder_decoder else 1
    criteria = StoppingCriteriaList([MaxNewTokensCriteria(start, 3)])
    greedy = run(target, stopping_criteria=criteria, **inputs)
    assert greedy.shape[1] == start + 3
    if source == "lookup":
        assisted = run(target, stopping_criteria=criteria, prompt_lookup_num_tokens=5, **inputs)
    else:
        assisted = run(target, target if source == "itself" else draft, stopping_criteria=criteria, **inputs)
    assert_same_tokens(greedy, assisted, f"with a caller's own length criterion ({source})")
