"""Assisted generation through the real libraries of transformers 4.31.0's time.

- accelerate 0.21.0: a model dispatched with a `device_map` that really dispatches (a layer offloaded to disk, so
  accelerate's hooks move its weights in and out at every forward pass), as the model and as the assistant.
- the `text-generation` pipeline, with a tokenizer built here (a word-level tokenizer trained with the `tokenizers`
  library on a few sentences, wrapped in `PreTrainedTokenizerFast`), `assistant_model` given when the pipeline is
  built or when it is called, with GPT-2 and with an old-style remote-code class
  (`test_old_style_prepare_inputs.OldStyleGPT2LMHeadModel`).

(PEFT is in test_peft.py.) All pass on stock 4.31.0. On the current series: the accelerate and plain pipeline
tests pass (regression guards: the accelerate ones fail on a variant whose device check ignores `hf_device_map`,
as the offloaded weights sit on the meta device), the `old-style` pipeline tests fail (the crash of
test_old_style_prepare_inputs).
Skipped where accelerate is not installed (`requirements-integration.txt`).
"""

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast, pipeline

from integration._common import assert_same_tokens, run
from integration.test_old_style_prepare_inputs import OldStyleGPT2LMHeadModel
from support.assistants import reset_assistant
from support.device import DEVICE
from support.tiny_models import TINY_VOCAB, draft_model, generation_inputs, tiny_model

# ---- accelerate -----------------------------------------------------------------------------------------------------


def _dispatched(model, tmp_path):
    """`model` saved and loaded back with a `device_map`: its last layer offloaded to disk."""
    accelerate = pytest.importorskip("accelerate", reason="accelerate is not installed (requirements-integration.txt)")
    model.save_pretrained(tmp_path / "model")
    main = 0 if DEVICE == "cuda" else "cpu"
    last = len(model.transformer.h) - 1
    device_map = {"transformer.wte": main, "transformer.wpe": main, "transformer.drop": main}
    device_map.update({f"transformer.h.{index}": main for index in range(last)})
    device_map.update({f"transformer.h.{last}": "disk", "transformer.ln_f": main, "lm_head": main})
    loaded = GPT2LMHeadModel.from_pretrained(
        tmp_path / "model", device_map=device_map, offload_folder=str(tmp_path / "offload")
    ).eval()
    assert loaded.hf_device_map == device_map
    offloaded = loaded.transformer.h[last]
    assert hasattr(offloaded, "_hf_hook"), "accelerate attached no hook to the offloaded layer"
    assert isinstance(offloaded._hf_hook, accelerate.hooks.AlignDevicesHook)
    assert offloaded.attn.c_attn.weight.device == torch.device("meta"), "the layer is not offloaded"
    return loaded


@pytest.mark.parametrize("dispatched", ["model", "assistant", "both"])
def test_accelerate_device_map(dispatched, tmp_path):
    target = tiny_model(GPT2LMHeadModel, seed=0)
    assistant = draft_model(target)
    inputs = generation_inputs(target, "plain")
    greedy = run(target, **inputs)
    if dispatched in ("model", "both"):
        target = _dispatched(target, tmp_path / "target")
    if dispatched in ("assistant", "both"):
        assistant = _dispatched(assistant, tmp_path / "assistant")
    assert_same_tokens(greedy, run(target, **inputs), "(greedy of the dispatched model)")
    assert_same_tokens(greedy, run(target, assistant, **inputs), f"({dispatched} dispatched)")


# ---- pipeline -------------------------------------------------------------------------------------------------------

SENTENCES = [
    "the cat sat on the mat",
    "a dog ran in the park",
    "the bird sang a song in the morning",
    "my friend read a book on the train",
    "we walked to the river and back",
]


def _tokenizer():
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[EOS]"])
    tokenizer.train_from_iterator(SENTENCES, trainer=trainer)
    assert tokenizer.get_vocab_size() < TINY_VOCAB
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")


PIPELINE_CLASSES = {"gpt2": GPT2LMHeadModel, "old-style": OldStyleGPT2LMHeadModel}


@pytest.mark.parametrize("given", ["at-construction", "at-call"])
@pytest.mark.parametrize("kind", sorted(PIPELINE_CLASSES))
def test_text_generation_pipeline(kind, given):
    target = tiny_model(PIPELINE_CLASSES[kind], seed=0)
    assistant = draft_model(target)
    tokenizer = _tokenizer()
    call = dict(max_new_tokens=10, do_sample=False, return_tensors=True)
    prompt = "the dog sat in the park"

    greedy_pipe = pipeline("text-generation", model=target, tokenizer=tokenizer, device=target.device)
    greedy = greedy_pipe(prompt, **call)[0]["generated_token_ids"]
    reset_assistant(assistant)
    drafted = []
    handle = assistant.register_forward_pre_hook(lambda module, args: drafted.append(1))
    try:
        if given == "at-construction":
            assisted_pipe = pipeline(
                "text-generation", model=target, tokenizer=tokenizer, device=target.device, assistant_model=assistant
            )
            assisted = assisted_pipe(prompt, **call)[0]["generated_token_ids"]
        else:
            assisted = greedy_pipe(prompt, assistant_model=assistant, **call)[0]["generated_token_ids"]
    finally:
        handle.remove()
    assert drafted, "the pipeline did not run assisted generation"
    assert_same_tokens(torch.tensor([greedy]), torch.tensor([assisted]), f"through the pipeline ({given})")
