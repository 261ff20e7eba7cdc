"""scripts/check_series.py: every prefix of the series applies, imports and passes the regression tests."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "check_series.py"
BUILD_TREE = REPO / "build" / "transformers"
PRISTINE_TAG = "upstream-v4.31.0"
IDENTITY = ["-c", "user.name=Test", "-c", "user.email=test@localhost"]

pytestmark = pytest.mark.skipif(not (BUILD_TREE / ".git").exists(), reason="build/transformers is not built")

# Stands in for the regression part of the suite: one test per model class, named after it, failing when the
# tree's module says so; it also checks the environment check_series promises.
FAKE_REGRESSION_TEST = """\
import importlib
import os
from pathlib import Path

import pytest
import transformers


@pytest.mark.parametrize(
    "class_name, module", [("GPT2LMHeadModel", "gpt2"), ("BloomForCausalLM", "bloom"), ("OPTForCausalLM", "opt")]
)
def test_plain_generation_unchanged(class_name, module):
    assert os.environ["SERIES_PARTIAL"] == "1"
    tree = Path(os.environ["TRANSFORMERS_TREE"])
    assert tree / "src" in Path(transformers.__file__).parents
    modeling = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    assert getattr(modeling, class_name)
    assert not getattr(modeling, "BREAKS_REGRESSION", False)
"""


def edit(tree: Path, path: str, old: str, new: str) -> None:
    file = tree / path
    text = file.read_text()
    assert old in text, (path, old)
    file.write_text(text.replace(old, new, 1))


def commit(tree: Path, subject: str) -> None:
    subprocess.run(["git", "-C", str(tree), *IDENTITY, "commit", "-qam", subject], check=True)


GPT2 = "src/transformers/models/gpt2/modeling_gpt2.py"
BLOOM = "src/transformers/models/bloom/modeling_bloom.py"
GENERATION = "src/transformers/generation/utils.py"
LOGGER = "logger = logging.get_logger(__name__)\n"
ASSISTED_LINE = "        # Assistant: initialize assistant-related variables\n"


@pytest.fixture(scope="module")
def patches(tmp_path_factory):
    """Patch files made from commits on the pristine tag, by name."""
    root = tmp_path_factory.mktemp("series")
    scratch = root / "scratch"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(BUILD_TREE), str(scratch)], check=True)
    subprocess.run(["git", "-C", str(scratch), "checkout", "-q", "-b", "a", PRISTINE_TAG], check=True)
    edit(scratch, GPT2, LOGGER, LOGGER + "# gpt2 patched\n")
    commit(scratch, "models: gpt2")
    edit(scratch, GENERATION, LOGGER, LOGGER + "GENERATION_PATCHED = True\n")
    commit(scratch, "generation: utils")
    # a change to assisted_decoding alone: plain generation cannot change
    edit(scratch, GENERATION, ASSISTED_LINE, ASSISTED_LINE + "        pad_token_id = pad_token_id\n")
    commit(scratch, "generation: assisted decoding")
    subprocess.run(["git", "-C", str(scratch), "checkout", "-q", "-b", "b", PRISTINE_TAG], check=True)
    edit(scratch, BLOOM, LOGGER, LOGGER + "BREAKS_REGRESSION = True\n")
    commit(scratch, "models: bloom breaks the regression tests")
    subprocess.run(["git", "-C", str(scratch), "checkout", "-q", "-b", "c", PRISTINE_TAG], check=True)
    edit(scratch, BLOOM, LOGGER, LOGGER + "import a_module_that_does_not_exist  # noqa\n")
    commit(scratch, "models: bloom breaks the import")
    subprocess.run(["git", "-C", str(scratch), "checkout", "-q", "-b", "d", PRISTINE_TAG], check=True)
    edit(scratch, GPT2, LOGGER, LOGGER + "# gpt2 patched differently\n")
    commit(scratch, "models: gpt2 conflicting")
    # Greedy search with a cache now feeds the model zeros instead of its last token; stock assisted decoding calls
    # the model by hand, so upstream's test_assisted_decoding_matches_greedy_search fails (the fake regression
    # test, which only looks at Bloom, does not notice).
    subprocess.run(["git", "-C", str(scratch), "checkout", "-q", "-b", "e", PRISTINE_TAG], check=True)
    edit(scratch, GPT2, "input_ids = input_ids[:, -1].unsqueeze(-1)", "input_ids = input_ids[:, -1].unsqueeze(-1) * 0")
    commit(scratch, "models: gpt2 breaks greedy search")
    out = root / "all"
    made = {}
    for branch, count in (("a", 3), ("b", 1), ("c", 1), ("d", 1), ("e", 1)):
        names = subprocess.run(
            ["git", "-C", str(scratch), "format-patch", "-o", str(out), f"{PRISTINE_TAG}..{branch}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert len(names) == count
        for number, name in enumerate(names):
            made[f"{branch}{number + 1}"] = Path(name)
    return made


def series(tmp_path: Path, patches: dict, *keys: str) -> Path:
    """A series of the given patches; a key `group:NAME` starts a group."""
    folder = tmp_path / "patches"
    folder.mkdir()
    lines = ["# the order is bisectable"]
    number = 0
    for key in keys:
        if key.startswith("group:"):
            lines.append(f"# group: {key[len('group:'):]}")
            continue
        number += 1
        name = f"{number:04d}-{key}.patch"
        (folder / name).write_bytes(patches[key].read_bytes())
        lines.append(name)
    (folder / "series").write_text("\n".join(lines) + "\n")
    return folder


def check(folder: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """check_series on the folder; every model's assisted tests at the tip only with `--plan` (they take minutes)."""
    test = tmp_path / "test_fake_regression.py"
    test.write_text(textwrap.dedent(FAKE_REGRESSION_TEST))
    if "--plan" not in args:
        args = ("--no-group-runs", *args)
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--patches", str(folder), "--tests", str(test), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_good_series_passes(patches, tmp_path):
    result = check(series(tmp_path, patches, "a1", "a2", "a3"), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    # Upstream's assisted tests: tests/generation's for the generation patches (the GPT-2 patch touches a comment).
    assert all("upstream -k assisted: OK" in line for line in lines if line.startswith("[2/3]")), lines
    # A model patch runs the tests of the classes its files define; a generation patch runs all of them, unless it
    # only changes what assisted decoding alone runs.
    assert any(line.startswith("[1/3] 0001-a1.patch: OK") and "1 passed, 2 deselected" in line for line in lines)
    assert any(line.startswith("[2/3] 0002-a2.patch: OK") and "tests [all]: 3 passed" in line for line in lines)
    assert any(line.startswith("[3/3] 0003-a3.patch: OK") and "tests [none]" in line for line in lines), lines
    assert "check_series: OK: all 3 prefixes apply, import and pass" in result.stdout


def test_plan_runs_every_model_at_group_ends(patches, tmp_path):
    """The last patch of each group and the tip run every model's assisted tests; the others what they touch."""
    result = check(series(tmp_path, patches, "group:models", "a1", "group:generation", "a2", "a3"), tmp_path, "--plan")
    assert result.returncode == 0, result.stdout + result.stderr
    plan = {line.split(":", 1)[0]: line for line in result.stdout.splitlines() if line.startswith("[")}
    assert "upstream -k assisted [every model's (group end)]" in plan["[1/3] 0001-a1.patch"]
    assert "upstream -k assisted [every model's (group end)]" not in plan["[2/3] 0002-a2.patch"]
    assert "regression [all]" in plan["[2/3] 0002-a2.patch"]
    assert "upstream -k assisted [every model's (group end)]" in plan["[3/3] 0003-a3.patch"]
    assert "regression [none]" in plan["[3/3] 0003-a3.patch"]


def test_regression_failure_names_the_prefix(patches, tmp_path):
    result = check(series(tmp_path, patches, "b1"), tmp_path)
    assert result.returncode == 1
    assert "[1/1] 0001-b1.patch: BROKEN: prefix 1 (0001-b1.patch): the regression tests fail" in result.stdout
    assert "BREAKS_REGRESSION" in result.stdout
    assert "check_series: FAILED: first broken prefix is 1 (0001-b1.patch)" in result.stdout


def test_import_failure_names_the_prefix(patches, tmp_path):
    result = check(series(tmp_path, patches, "c1"), tmp_path, "--no-tests")
    assert result.returncode == 1
    assert "BROKEN: prefix 1 (0001-c1.patch): an import fails" in result.stdout
    assert "a_module_that_does_not_exist" in result.stdout


def test_patch_that_does_not_apply_names_the_prefix(patches, tmp_path):
    result = check(series(tmp_path, patches, "a1", "d1"), tmp_path, "--no-tests")
    assert result.returncode == 1
    assert "[1/2] 0001-a1.patch: OK" in result.stdout
    assert "[2/2] 0002-d1.patch: BROKEN: patch 2 (0002-d1.patch) does not apply" in result.stdout
    assert "check_series: FAILED: first broken prefix is 2 (0002-d1.patch)" in result.stdout


def test_upstream_assisted_test_failure_names_the_prefix(patches, tmp_path):
    result = check(series(tmp_path, patches, "e1"), tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "BROKEN: prefix 1 (0001-e1.patch): upstream's assisted tests fail" in result.stdout
    assert "test_modeling_gpt2.py::GPT2ModelTest::test_assisted_decoding_matches_greedy_search" in result.stdout
    assert "check_series: FAILED: first broken prefix is 1 (0001-e1.patch)" in result.stdout


def test_missing_patch_is_reported(patches, tmp_path):
    folder = series(tmp_path, patches, "a1")
    (folder / "series").write_text("0001-a1.patch\n0002-missing.patch\n")
    result = check(folder, tmp_path)
    assert result.returncode == 1
    assert "[1/2]" not in result.stdout  # found before anything is applied
    assert "patch 2 (0002-missing.patch) is listed in series but missing" in result.stdout


# ---- what a change to generation/utils.py can change -------------------------------------------------------------

_UTILS = """
class GenerationMixin:
    def generate(self, assistant_model=None):
        if assistant_model is not None:
            check = _assistant_check(assistant_model)
        is_assisted_gen_mode = assistant_model is not None
        if is_assisted_gen_mode:
            return self.assisted_decoding(assistant_model)
        elif self.flag:
            return self.greedy_search()
        return _shared()

    def greedy_search(self):
        return _shared()

    def assisted_decoding(self, assistant_model):
        return _assisted_helper()


def _assistant_check(model):
    return 1


def _assisted_helper():
    return 2


def _shared():
    return 3
"""


def _assisted_code():
    sys.path.insert(0, str(REPO / "scripts"))
    import assisted_code

    return assisted_code


@pytest.mark.parametrize(
    "old, new, assisted_only",
    [
        ("check = _assistant_check(assistant_model)", "check = _assistant_check(assistant_model) + 1", True),
        ("return _assisted_helper()", "return _assisted_helper() + 1", True),
        ("def _assistant_check(model):\n    return 1", "def _assistant_check(model):\n    return 4", True),
        ("def _assisted_helper():\n    return 2", "def _assisted_helper():\n    return 5", True),
        ("return self.greedy_search()", "return self.greedy_search() or 1", False),  # the `else` of the branch
        ("def _shared():\n    return 3", "def _shared():\n    return 6", False),
        ("is_assisted_gen_mode = assistant_model is not None", "is_assisted_gen_mode = assistant_model", False),
    ],
    ids=["assistant-branch", "assisted-decoding", "helper-of-the-branch", "helper", "else", "shared", "mode"],
)
def test_assisted_only_changes(old, new, assisted_only):
    assert old in _UTILS
    assert _assisted_code().only_changes_assisted_decoding(_UTILS, _UTILS.replace(old, new)) is assisted_only


def test_known_failures_in_series_count_only_before_their_patch(tmp_path):
    """A test listed `until 0017` may fail on the prefixes of 1 to 16 patches, and must pass from 17 on."""
    import check_series

    listed = tmp_path / "known.txt"
    listed.write_text("# comment\n\ntests/a.py::T::test_x  # until 0017: numbers the prompt apart\n")
    assert check_series.known_in_series(3, listed) == ["tests/a.py::T::test_x  # numbers the prompt apart"]
    assert check_series.known_in_series(16, listed) == check_series.known_in_series(3, listed)
    assert check_series.known_in_series(17, listed) == []
    listed.write_text("tests/a.py::T::test_x  # numbers the prompt apart\n")
    with pytest.raises(SystemExit, match="until NNNN"):
        check_series.known_in_series(3, listed)
    # the list the series ships names tests that exist upstream, all fixed by the tip
    assert check_series.known_in_series(10**4) == []
    assert len(check_series.known_in_series(1)) >= 9


def test_the_drafting_module_is_assisted_only_code():
    """A change to generation/candidates.py, which plain generation never calls, runs no regression test (its imports
    and `tests/generation`'s assisted tests still run); another shared file runs them all."""
    sys.path.insert(0, str(REPO / "scripts"))
    import check_series

    modules, classes, shared = check_series.scope_of(REPO, ["src/transformers/generation/candidates.py"])
    assert modules == ["transformers.generation.candidates"] and classes == [] and shared
    _, classes, shared = check_series.scope_of(REPO, ["src/transformers/generation/logits_process.py"])
    assert classes is None and shared


def test_work_trees_of_one_clone_from_several_threads(tmp_path):
    """Prefixes are checked two at a time on work trees of one clone: adds from several threads each check out their
    commit, and an add that fails says git's own words."""
    sys.path.insert(0, str(REPO / "scripts"))
    from concurrent.futures import ThreadPoolExecutor

    import check_series

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(BUILD_TREE), str(clone)], check=True)
    commit = check_series.git(clone, "rev-parse", PRISTINE_TAG + "^{commit}").stdout.strip()

    def one(k: int) -> str:
        tree = tmp_path / f"prefix-{k:03d}"
        check_series.add_worktree(clone, tree, commit)
        try:
            return check_series.git(tree, "rev-parse", "HEAD").stdout.strip()
        finally:
            check_series.remove_worktree(clone, tree)

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert set(pool.map(one, range(8))) == {commit}
    with pytest.raises(RuntimeError, match="worktree add .* failed: fatal: .*"):
        check_series.add_worktree(clone, tmp_path / "bad", "0" * 40)
