"""The suite covers every class that can generate, and the expectation table covers the suite.

Classes are discovered by importing every PyTorch modeling module (`support.tiny_models`); this module cross-checks
the discovery against a plain text scan of the modeling files, so that a class cannot be forgotten, and checks that
the expectation table (`support/expectations.py`) has exactly one entry per discovered class.
"""

import ast
import importlib
from pathlib import Path

import pytest
import transformers

from models import harness
from support.expectations import EXPECTATIONS, REFUSED, SUPPORTED
from support.tiny_models import SCENARIOS, applicable_scenarios

MODELS_DIR = Path(transformers.__file__).resolve().parent / "models"


def _defining_classes_by_text():
    """(module, class) pairs whose class body defines `prepare_inputs_for_generation`, from the source text."""
    pairs = []
    for path in sorted(MODELS_DIR.glob("*/modeling_*.py")):
        if path.name.startswith(("modeling_tf_", "modeling_flax_")):
            continue
        source = path.read_text()
        if "def prepare_inputs_for_generation" not in source:
            continue
        for node in ast.parse(source).body:
            if isinstance(node, ast.ClassDef) and any(
                isinstance(item, ast.FunctionDef) and item.name == "prepare_inputs_for_generation"
                for item in node.body
            ):
                pairs.append((f"transformers.models.{path.parent.name}.{path.stem}", node.name))
    return pairs


def test_discovery_finds_every_definition():
    discovered = harness.classes()
    pairs = _defining_classes_by_text()
    assert pairs, "no prepare_inputs_for_generation found in the modeling files"
    for module_name, class_name in pairs:
        cls = getattr(importlib.import_module(module_name), class_name)
        subclasses_found = [c for c in discovered.values() if issubclass(c, cls)]
        assert class_name in discovered or subclasses_found, f"{module_name}.{class_name} was not discovered"
    print(f"{len(pairs)} definitions in {len({m for m, _ in pairs})} modeling files, {len(discovered)} classes")


@pytest.mark.parametrize("name", sorted(harness.classes()))
def test_class_has_an_expectation(name):
    assert name in EXPECTATIONS, f"{name} can generate but has no entry in tests/support/expectations.py"
    entry = EXPECTATIONS[name]
    assert entry.status in (SUPPORTED, REFUSED)
    if entry.status == REFUSED:
        assert entry.reason and entry.why, f"{name} is refused without a reason"


def test_no_stale_expectations():
    stale = sorted(set(EXPECTATIONS) - set(harness.classes()))
    assert not stale, f"expectations for classes that were not discovered: {stale}"


@pytest.mark.parametrize("name", sorted(harness.classes()))
def test_scenarios_are_known(name):
    scenarios = applicable_scenarios(harness.classes()[name])
    assert scenarios[:2] == ["plain", "self"]
    assert set(scenarios) <= set(SCENARIOS)
