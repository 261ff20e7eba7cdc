"""Assisted generation with models that accelerate 0.21.0 moves with hooks, without a `device_map`.

accelerate's offloading helpers leave the weights on the `meta` device and attach hooks that move them in at every
forward pass: `cpu_offload` and `disk_offload` (a hook on the model and on its submodules), `cpu_offload_with_hook`
(weights kept on the CPU, one hook on the model), and hooks on submodules only (`attach_align_device_hook` with
offloaded weights, `cpu_offload` of the model's body alone), which leave no hook on the model itself. Each is
applied to the model, to the assistant and to both, for one prompt and a left-padded batch
(`support.batches`).

Contract: equal to greedy generation of the models without hooks. Stock 4.31.0 runs batch size 1 and refuses
batches; the series before the fix refused the variants with hooks on submodules only (its device check read
`model.device`, `meta`, and looked for a hook on the model alone). Skipped where accelerate is not installed
(`requirements-integration.txt`).
"""

import pytest
import torch
from transformers import GPT2LMHeadModel

from integration._common import assert_same_tokens, run
from support.batches import ROWS, batched_inputs
from support.device import DEVICE
from support.tiny_models import draft_model, generation_inputs, tiny_model

accelerate = pytest.importorskip("accelerate", reason="accelerate is not installed (requirements-integration.txt)")


def _execution_device():
    return torch.device(DEVICE if DEVICE != "cuda" else "cuda:0")


def _cpu_offload(model, tmp_path):
    return accelerate.cpu_offload(model, execution_device=_execution_device())


def _disk_offload(model, tmp_path):
    return accelerate.disk_offload(model, str(tmp_path), execution_device=_execution_device())


def _cpu_offload_with_hook(model, tmp_path):
    model, _ = accelerate.cpu_offload_with_hook(model.cpu(), execution_device=_execution_device())
    return model


def _submodule_hooks(model, tmp_path):
    """Offloaded weights moved in by hooks on the submodules only (none on the model)."""
    weights = {name: tensor.cpu() for name, tensor in model.state_dict().items()}
    accelerate.hooks.attach_align_device_hook(
        model, execution_device=_execution_device(), offload=True, weights_map=weights
    )
    return model


def _body_offload(model, tmp_path):
    """The transformer body offloaded, the head left in place: a hook on a submodule only."""
    accelerate.cpu_offload(model.transformer, execution_device=_execution_device())
    return model


VARIANTS = {
    "cpu_offload": _cpu_offload,
    "disk_offload": _disk_offload,
    "cpu_offload_with_hook": _cpu_offload_with_hook,
    "submodule_hooks": _submodule_hooks,
    "body_offload": _body_offload,
}


def _inputs(model, batch_size):
    inputs = generation_inputs(model, "plain")
    return inputs if batch_size == 1 else batched_inputs(model, inputs)


@pytest.mark.parametrize("batch_size", [1, ROWS])
@pytest.mark.parametrize("hooked", ["model", "assistant", "both"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_hooked_models_equal_greedy(variant, hooked, batch_size, tmp_path):
    target = tiny_model(GPT2LMHeadModel, seed=0)
    assistant = draft_model(target)
    inputs = _inputs(target, batch_size)
    greedy = run(target, **inputs)
    if hooked in ("model", "both"):
        target = VARIANTS[variant](target, tmp_path / "model")
    if hooked in ("assistant", "both"):
        assistant = VARIANTS[variant](assistant, tmp_path / "assistant")
    assert_same_tokens(greedy, run(target, **inputs), "(greedy of the hooked model)")
    assert_same_tokens(greedy, run(target, assistant, **inputs), f"({variant} on the {hooked})")
