"""scripts/check_copies.py: `# Copied from` blocks are rebuilt from their source and compared."""

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "check_copies.py"
BUILD_TREE = REPO / "build" / "transformers"
PRISTINE_TAG = "upstream-v4.31.0"

spec = importlib.util.spec_from_file_location("check_copies", SCRIPT)
check_copies = importlib.util.module_from_spec(spec)
sys.modules["check_copies"] = check_copies
spec.loader.exec_module(check_copies)

SOURCE = '''\
import torch


def shift_tokens(input_ids, pad_token_id):
    """Shift the ALPHA tokens one position to the right."""
    shifted = input_ids.new_zeros(input_ids.shape)
    shifted[:, 1:] = input_ids[:, :-1]
    return shifted


class AlphaAttention(torch.nn.Module):
    """Attention of the Alpha model."""

    def __init__(self, config):
        super().__init__()
        self.alpha_dim = config.hidden_size
        self.proj = torch.nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states):
        # Alpha projects once.
        return self.proj(hidden_states)


class AlphaForCausalLM(torch.nn.Module):
    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, **kwargs):
        if past_key_values:
            input_ids = input_ids[:, -1:]
        return {"input_ids": input_ids, "past_key_values": past_key_values}
'''

COPIES = '''\
import torch


# Copied from transformers.models.alpha.modeling_alpha.AlphaAttention with Alpha->Beta all-casing
class BetaAttention(torch.nn.Module):
    """Attention of the Beta model."""

    def __init__(self, config):
        super().__init__()
        self.beta_dim = config.hidden_size
        self.proj = torch.nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states):
        # Beta projects once.
        return self.proj(hidden_states)


class BetaForCausalLM(torch.nn.Module):
    # Copied from transformers.models.alpha.modeling_alpha.AlphaForCausalLM.prepare_inputs_for_generation
    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, **kwargs):
        if past_key_values:
            input_ids = input_ids[:, -1:]
        return {"input_ids": input_ids, "past_key_values": past_key_values}

    # Copied from transformers.models.alpha.modeling_alpha.shift_tokens
    def shift_tokens(input_ids, pad_token_id):
        """Shift the ALPHA tokens one position to the right."""
        shifted = input_ids.new_zeros(input_ids.shape)
        shifted[:, 1:] = input_ids[:, :-1]
        return shifted


class BetaExtendedAttention(torch.nn.Module):
    # Copied from transformers.models.alpha.modeling_alpha.AlphaAttention.__init__ with Alpha->Beta all-casing
    def __init__(self, config):
        super().__init__()
        self.beta_dim = config.hidden_size
        self.proj = torch.nn.Linear(config.hidden_size, config.hidden_size)
        # End copy
        self.extra = torch.nn.Linear(config.hidden_size, 1)


# Copied from the original implementation
def not_checkable():
    return None
'''


def line_of(text: str, code: str) -> int:
    return text.splitlines().index(code) + 1


def make_tree(root: Path, copies: str = COPIES, extra: dict | None = None) -> Path:
    package = root / "src" / "transformers"
    files = {
        "__init__.py": "",
        "models/__init__.py": "",
        "models/alpha/__init__.py": "",
        "models/alpha/modeling_alpha.py": SOURCE,
        "models/beta/__init__.py": "",
        "models/beta/modeling_beta.py": copies,
        **(extra or {}),
    }
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    return root


def run(tree: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(tree), *args], capture_output=True, text=True)


def test_consistent_copies_pass(tmp_path):
    result = run(make_tree(tmp_path), "--verbose")
    assert result.returncode == 0, result.stdout
    assert "check_copies: OK: 4 copies checked" in result.stdout
    # The free-text marker is counted and listed, not silently dropped.
    assert "1 markers name no transformers object" in result.stdout
    line = line_of(COPIES, "# Copied from the original implementation")
    assert f"modeling_beta.py:{line}: # Copied from the original implementation" in result.stdout


def test_deliberately_broken_copy_is_caught(tmp_path):
    broken = COPIES.replace("            input_ids = input_ids[:, -1:]", "            input_ids = input_ids[:, -2:]")
    assert broken != COPIES
    result = run(make_tree(tmp_path, broken))
    assert result.returncode == 1
    line = line_of(
        COPIES,
        "    # Copied from transformers.models.alpha.modeling_alpha.AlphaForCausalLM.prepare_inputs_for_generation",
    )
    assert f"src/transformers/models/beta/modeling_beta.py:{line}: copy of " in result.stdout
    assert "transformers.models.alpha.modeling_alpha.AlphaForCausalLM.prepare_inputs_for_generation" in result.stdout
    assert "-            input_ids = input_ids[:, -1:]" in result.stdout
    assert "+            input_ids = input_ids[:, -2:]" in result.stdout
    assert "1 inconsistent" in result.stdout


def test_a_change_to_the_source_is_caught_in_every_copy(tmp_path):
    tree = make_tree(tmp_path)
    source = tree / "src/transformers/models/alpha/modeling_alpha.py"
    source.write_text(SOURCE.replace("# Alpha projects once.", "# Alpha projects twice."))
    result = run(tree)
    assert result.returncode == 1
    # BetaAttention copies the whole class; BetaExtendedAttention only __init__, which did not change.
    assert "modeling_beta.py:4: copy of transformers.models.alpha.modeling_alpha.AlphaAttention " in result.stdout
    assert "1 inconsistent" in result.stdout


def test_end_copy_closes_the_copy(tmp_path):
    tree = make_tree(tmp_path)
    source = tree / "src/transformers/models/alpha/modeling_alpha.py"
    # A source line added at the end of __init__ is missing before `# End copy` in the copy.
    source.write_text(
        SOURCE.replace(
            "config.hidden_size)\n\n    def forward", "config.hidden_size)\n        self.x = 1\n\n    def forward"
        )
    )
    result = run(tree)
    assert result.returncode == 1
    marker = (
        "# Copied from transformers.models.alpha.modeling_alpha.AlphaAttention.__init__ with Alpha->Beta all-casing"
    )
    line = line_of(COPIES, "    " + marker)
    assert (
        f"modeling_beta.py:{line}: copy of transformers.models.alpha.modeling_alpha.AlphaAttention.__init__"
        in result.stdout
    )
    assert "-        self.x = 1" in result.stdout


def test_replacements_that_change_line_lengths_are_reformatted_like_black(tmp_path):
    source = textwrap.dedent("""\
        def alpha_scores(query, key):
            return query.matmul(key) / query.new_tensor(query.shape[-1]).sqrt().clamp(min=1e-6, max=1e6).to(query)
        """)
    copy = textwrap.dedent("""\
        # Copied from transformers.models.gamma.modeling_gamma.alpha_scores with query->long_query_name
        def alpha_scores(long_query_name, key):
            return long_query_name.matmul(key) / long_query_name.new_tensor(long_query_name.shape[-1]).sqrt().clamp(
                min=1e-6, max=1e6
            ).to(long_query_name)
        """)
    tree = make_tree(
        tmp_path,
        extra={"models/gamma/__init__.py": "", "models/gamma/modeling_gamma.py": source, "models/delta/c.py": copy},
    )
    result = run(tree)
    assert result.returncode == 0, result.stdout


def test_unresolvable_marker_fails(tmp_path):
    copies = COPIES + "\n\n# Copied from transformers.models.alpha.modeling_alpha.AlphaMissing\nclass X:\n    pass\n"
    result = run(make_tree(tmp_path, copies))
    assert result.returncode == 1
    assert "AlphaMissing: AlphaMissing not found" in result.stdout
    assert "1 unresolvable" in result.stdout


def test_replacements_follow_upstream_rules():
    notes = []
    code = "Alpha alpha ALPHA self.alpha\n"
    assert check_copies.apply_replacements(code, "with Alpha->Beta", notes) == "Beta alpha ALPHA self.alpha\n"
    assert check_copies.apply_replacements(code, "Alpha->Beta all-casing", notes) == "Beta beta BETA self.beta\n"
    assert check_copies.apply_replacements(code, "with self.alpha->self.gamma, Alpha->Beta", notes) == (
        "Beta alpha ALPHA self.gamma\n"
    )
    assert notes == []
    # Forms upstream's tool cannot read replace nothing, and are reported.
    assert check_copies.apply_replacements(code, "with Alpha -> Beta", notes) == code
    assert len(notes) == 1 and "is not of the form A->B" in notes[0]


@pytest.fixture(scope="module")
def pristine_tree(tmp_path_factory):
    """The pristine v4.31.0 package, unpacked from the build tree's tag (the build tree itself is left alone)."""
    if not (BUILD_TREE / ".git").exists():
        pytest.skip("build/transformers is not built (make apply)")
    root = tmp_path_factory.mktemp("pristine")
    archive = subprocess.run(
        ["git", "-C", str(BUILD_TREE), "archive", PRISTINE_TAG, "src/transformers"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
    return root


def test_pristine_tree_passes(pristine_tree):
    result = check_copies.check_tree(pristine_tree)
    assert result.mismatches == [] and result.errors == []
    assert result.checked > 2000
    # What upstream's own markers get wrong is reported as warnings, never dropped: replacements its tool cannot
    # read, and methods that a named class does not define (resolved to a later class, as upstream does).
    assert any("'Deformable DETR->DETA' is not of the form A->B" in w for w in result.warnings)
    assert any("BertModel defines no prepare_inputs_for_generation" in w for w in result.warnings)


def test_deliberately_broken_copy_in_the_real_tree_is_caught(pristine_tree, tmp_path):
    roberta = pristine_tree / "src/transformers/models/roberta/modeling_roberta.py"
    original = roberta.read_text()
    marker = "# Copied from transformers.models.bert.modeling_bert.BertSelfOutput\n"
    assert marker in original
    start = original.index(marker)
    line = original[:start].count("\n") + 1
    body = original[start:]
    broken = body.replace("hidden_states = self.dropout(hidden_states)", "hidden_states = hidden_states", 1)
    try:
        roberta.write_text(original[:start] + broken)
        result = check_copies.check_tree(pristine_tree)
    finally:
        roberta.write_text(original)
    reported = [m.splitlines()[0] for m in result.mismatches]
    assert (
        f"src/transformers/models/roberta/modeling_roberta.py:{line}: copy of "
        "transformers.models.bert.modeling_bert.BertSelfOutput differs from its source"
    ) in reported
    # The copies of the broken copy (CamemBERT, XLM-R, ...) inherit the break and are reported too; nothing else.
    others = [r for r in reported if "models/roberta/modeling_roberta.py" not in r]
    assert others and all(
        "copy of transformers.models.roberta.modeling_roberta.RobertaSelfOutput " in r for r in others
    )
