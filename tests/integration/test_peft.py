"""Assisted generation with PEFT LoRA models (`peft==0.4.0`, the release of transformers 4.31.0's time).

A `PeftModel` wraps the model: its `forward` takes `**kwargs` and passes `past_key_values` on, and its `generate`
calls the wrapped model's with the adapter active. Stock 4.31.0 assists with LoRA models (as the model, as the
assistant, or both). The current series judges the forward signature and refuses the wrapper:

    ValueError: Assisted generation is not supported by PeftModelForCausalLM: its forward pass takes no
    `past_key_values` ...

Contract: equal to greedy. The tests with a LoRA assistant fail on the current series and pass on stock; the
`lora-model` ones (a LoRA model, a plain assistant) pass on both: `PeftModel.generate` calls the wrapped model's,
which the series accepts; they guard that path. Skipped where peft is not installed
(`requirements-integration.txt`).
"""

import pytest
import torch
from transformers import BartForConditionalGeneration, GPT2LMHeadModel, LlamaForCausalLM

from integration._common import assert_same_tokens, run
from support.tiny_models import draft_model, generation_inputs, tiny_model

peft = pytest.importorskip(
    "peft", reason="peft is not installed (pip install --no-deps -r requirements-integration.txt)"
)

# class -> (task type, modules the adapters go on)
MODELS = {
    "GPT2LMHeadModel": (GPT2LMHeadModel, "CAUSAL_LM", ["c_attn"]),
    "LlamaForCausalLM": (LlamaForCausalLM, "CAUSAL_LM", ["q_proj", "v_proj"]),
    "BartForConditionalGeneration": (BartForConditionalGeneration, "SEQ_2_SEQ_LM", ["q_proj", "v_proj"]),
}
PAIRS = ["lora-model-lora-assistant", "lora-model", "lora-assistant"]


def _lora(model, task_type, modules, seed):
    """The model with random (not identity) LoRA adapters, so that they change what it generates."""
    config = peft.LoraConfig(
        task_type=task_type, r=4, lora_alpha=8, lora_dropout=0.0, target_modules=modules, init_lora_weights=False
    )
    torch.manual_seed(seed)
    return peft.get_peft_model(model, config).eval()


@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_lora_assisted_equals_greedy(name, pair):
    cls, task_type, modules = MODELS[name]
    target = tiny_model(cls, seed=0)
    assistant = draft_model(target)
    plain_output = run(target, **generation_inputs(target, "plain"))
    if pair != "lora-assistant":
        target = _lora(target, task_type, modules, seed=10)
    if pair != "lora-model":
        assistant = _lora(assistant, task_type, modules, seed=11)
    inputs = generation_inputs(target, "plain")
    greedy = run(target, **inputs)
    if pair != "lora-assistant":
        assert not torch.equal(greedy, plain_output), "the adapters change nothing: the test would prove nothing"
    assert_same_tokens(greedy, run(target, assistant, **inputs), f"({pair})")
