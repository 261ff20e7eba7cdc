"""The machinery around the series: `make apply` (scripts/apply.py), `make export` and `make wheel`.

Every test works on its own copies under tmp_path; the real build tree is only read. The source is the release's
full tree as an archive, from build/cache/ (where `make apply` keeps it) or from its known place beside the
repository, so nothing here needs the network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
sys.path.insert(0, str(SCRIPTS))

from series import (  # noqa: E402
    ARCHIVE_NAME,
    ARCHIVE_SHA256,
    KNOWN_ARCHIVES,
    PINNED_COMMIT,
    PRISTINE_TAG,
    RELEASE_TREE_ID,
    STAMP,
)

UTILS = "src/transformers/generation/utils.py"
IDENTITY = ["-c", "user.name=Test", "-c", "user.email=test@example.invalid"]
# pip must not reach any index in these tests: no configuration, no index, no local wheel folders.
OFFLINE_PIP = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}
SOURCE_OPTIONS = ("SOURCE=git", f"SOURCE=/path/to/{ARCHIVE_NAME}", "SOURCE=/path/to/checkout")


def run(script: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / script), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", *IDENTITY, *args], cwd=tree, check=True, capture_output=True, text=True).stdout


class Workspace:
    """A cache, a patches folder and a tree path, as `make apply` sees them, inside tmp_path."""

    def __init__(self, root: Path):
        self.root = root
        self.cache = root / "cache"
        self.patches = root / "patches"
        self.tree = root / "transformers"
        self.cache.mkdir()
        self.patches.mkdir()

    def apply(self, *args: str, env: dict | None = None, known: Path | None = None) -> subprocess.CompletedProcess:
        """apply.py on this workspace; the known archive place is `known` (default: a path that does not exist)."""
        paths = ["--tree", str(self.tree), "--patches", str(self.patches), "--cache", str(self.cache)]
        paths += ["--known-archive", str(known or self.root / "nowhere" / ARCHIVE_NAME)]
        return run("apply.py", *paths, *args, env=env)

    def export(self) -> subprocess.CompletedProcess:
        return run("export.py", "--tree", str(self.tree), "--patches", str(self.patches))

    def head(self) -> str:
        return git(self.tree, "rev-parse", "HEAD").strip()

    def commit_edit(self, path: str, old: str, new: str, subject: str) -> None:
        file = self.tree / path
        text = file.read_text()
        assert old in text
        file.write_text(text.replace(old, new, 1))
        git(self.tree, "commit", "-q", "-am", subject)


@pytest.fixture(scope="session")
def archive() -> Path:
    for candidate in (REPO / "build" / "cache" / ARCHIVE_NAME, *KNOWN_ARCHIVES):
        if candidate.is_file():
            return candidate
    pytest.fail(f"no {ARCHIVE_NAME} in build/cache/ or at {KNOWN_ARCHIVES}: run `make apply SOURCE=/path/to/it`")


@pytest.fixture(scope="session")
def pristine(tmp_path_factory, archive) -> Path:
    """One build tree made by apply.py from the archive, with no patches; tests clone it."""
    workspace = Workspace(tmp_path_factory.mktemp("pristine"))
    result = workspace.apply("--source", str(archive))
    assert result.returncode == 0, result.stderr
    return workspace.tree


@pytest.fixture
def workspace(tmp_path, pristine) -> Workspace:
    workspace = Workspace(tmp_path)
    subprocess.run(["git", "clone", "-q", str(pristine), str(workspace.tree)], check=True)
    git(workspace.tree, "fetch", "-q", "--tags", str(pristine))
    return workspace


@pytest.fixture
def two_patches(workspace) -> Workspace:
    """The workspace with a two-patch series, exported and applied."""
    workspace.commit_edit(UTILS, "import copy\n", "import copy  # first\n", "generation: first change")
    workspace.commit_edit("setup.py", "import os\n", "import os  # second\n", "setup: second change")
    assert workspace.export().returncode == 0
    return workspace


def test_archive_is_hash_checked_cached_and_gives_the_release_tree(tmp_path, archive):
    workspace = Workspace(tmp_path)
    result = workspace.apply("--source", str(archive))
    assert result.returncode == 0, result.stderr
    assert f"sha256 {ARCHIVE_SHA256}" in result.stdout
    assert (workspace.cache / ARCHIVE_NAME).read_bytes() == archive.read_bytes()
    root = git(workspace.tree, "rev-list", "--max-parents=0", "HEAD").strip()
    assert root == git(workspace.tree, "rev-parse", f"{PRISTINE_TAG}^{{commit}}").strip()
    assert git(workspace.tree, "rev-parse", f"{PRISTINE_TAG}^{{tree}}").strip() == RELEASE_TREE_ID
    files = git(workspace.tree, "ls-tree", "-r", "--name-only", PRISTINE_TAG).splitlines()
    for needed in (
        "tests/generation/test_utils.py",
        "utils/check_copies.py",
        "setup.py",
        "src/transformers/__init__.py",
    ):
        assert needed in files
    assert not [name for name in files if "egg-info" in name or name.endswith("PKG-INFO")]


@pytest.mark.parametrize("damage", ["tampered", "truncated"])
def test_bad_archive_is_refused_and_nothing_is_unpacked(tmp_path, archive, damage):
    workspace = Workspace(tmp_path)
    data = archive.read_bytes()
    data = data[:-1] + bytes([data[-1] ^ 1]) if damage == "tampered" else data[: len(data) // 2]
    bad = tmp_path / ARCHIVE_NAME
    bad.write_bytes(data)
    result = workspace.apply("--source", str(bad))
    assert result.returncode == 1
    assert "is not the pinned" in result.stderr and ARCHIVE_SHA256 in result.stderr
    assert "Nothing was unpacked" in result.stderr
    assert not workspace.tree.exists()
    assert not (workspace.cache / ARCHIVE_NAME).exists()
    assert not any(path.name.startswith(".source-") for path in tmp_path.iterdir())


def test_the_source_distribution_is_refused_with_the_reason(tmp_path):
    workspace = Workspace(tmp_path)
    result = workspace.apply("--source", "sdist")
    assert result.returncode == 1
    assert "no tests/ and no utils/" in result.stderr
    for option in SOURCE_OPTIONS:
        assert option in result.stderr
    partial = tmp_path / "transformers-4.31.0"  # what the sdist unpacks to: src/ without tests/ and utils/
    (partial / "src" / "transformers").mkdir(parents=True)
    (partial / "src" / "transformers" / "__init__.py").write_text('__version__ = "4.31.0"\n')
    result = workspace.apply("--source", str(partial))
    assert result.returncode == 1
    assert "has no tests/ and no utils/" in result.stderr
    assert not workspace.tree.exists()


def test_no_network_and_no_archive_lists_the_sources(tmp_path):
    workspace = Workspace(tmp_path)
    missing = tmp_path / "no-such-repository.git"
    result = workspace.apply("--source", "auto", "--git-url", str(missing), env=OFFLINE_PIP)
    assert result.returncode == 1
    assert "could not get the transformers v4.31.0 source" in result.stderr
    assert f"no {ARCHIVE_NAME}" in result.stderr
    for option in SOURCE_OPTIONS:
        assert option in result.stderr
    assert not workspace.tree.exists()


@pytest.mark.parametrize("where", ["cache", "known place"])
def test_auto_falls_back_to_the_archive(tmp_path, archive, where):
    workspace = Workspace(tmp_path)
    known = None
    if where == "cache":
        shutil.copy(archive, workspace.cache)
    else:
        known = tmp_path / "shared" / ARCHIVE_NAME
        known.parent.mkdir()
        shutil.copy(archive, known)
    result = workspace.apply("--git-url", str(tmp_path / "unreachable.git"), known=known)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("notice:") == 1 and ARCHIVE_NAME in result.stdout
    assert "created" in result.stdout
    assert (workspace.cache / ARCHIVE_NAME).is_file()


@pytest.fixture
def upstream_repo(tmp_path, archive) -> tuple[Path, str]:
    """A local repository standing in for upstream: the archive's files committed and tagged v4.31.0."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(repo, filter="data")
    (top,) = repo.iterdir()
    git(top, "init", "-q")
    git(top, "add", "-A")
    git(top, "commit", "-q", "-m", "v4.31.0")
    git(top, "tag", "v4.31.0")
    return top, git(top, "rev-parse", "HEAD").strip()


def test_git_source_refuses_an_unexpected_commit(workspace, upstream_repo):
    repo, commit = upstream_repo
    tree = workspace.root / "from-git"
    result = run(
        "apply.py",
        "--source",
        "git",
        "--git-url",
        str(repo),
        "--tree",
        str(tree),
        "--cache",
        str(workspace.cache),
        "--patches",
        str(workspace.patches),
    )
    assert result.returncode == 1
    assert commit in result.stderr and PINNED_COMMIT in result.stderr
    assert not tree.exists()


def test_git_source_builds_from_the_pinned_tag_and_caches_the_clone(workspace, upstream_repo):
    repo, commit = upstream_repo
    tree = workspace.root / "from-git"
    args = [
        "--source",
        "git",
        "--git-url",
        str(repo),
        "--pinned-commit",
        commit,
        "--cache",
        str(workspace.cache),
        "--patches",
        str(workspace.patches),
    ]
    result = run("apply.py", *args, "--tree", str(tree))
    assert result.returncode == 0, result.stderr
    assert f"git tag v4.31.0 ({commit})" in result.stdout
    assert (tree / "src" / "transformers" / "__init__.py").exists()
    shutil.rmtree(repo)  # the second build must come from the cache alone
    again = run("apply.py", *args, "--tree", str(workspace.root / "again"))
    assert again.returncode == 0, again.stderr
    assert git(tree, "rev-parse", "HEAD") == git(workspace.root / "again", "rev-parse", "HEAD")


def test_local_checkout_and_unpacked_tree_sources(workspace, upstream_repo):
    repo, commit = upstream_repo
    base = ["--cache", str(workspace.cache), "--patches", str(workspace.patches)]
    wrong = run("apply.py", "--source", str(repo), *base, "--tree", str(workspace.root / "wrong"))
    assert wrong.returncode == 1
    assert commit in wrong.stderr and PINNED_COMMIT in wrong.stderr
    tree = workspace.root / "from-checkout"
    right = run("apply.py", "--source", str(repo), "--pinned-commit", commit, *base, "--tree", str(tree))
    assert right.returncode == 0, right.stderr
    shutil.rmtree(repo / ".git")  # an unpacked tree, not a clone: its files are checked against the release's tree
    (repo / "src" / "transformers" / "__pycache__").mkdir(exist_ok=True)  # what a run leaves is not part of it
    (repo / "src" / "transformers" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"")
    plain = run("apply.py", "--source", str(repo), *base, "--tree", str(workspace.root / "from-folder"))
    assert plain.returncode == 0, plain.stderr
    assert git(workspace.root / "from-folder", "rev-parse", f"{PRISTINE_TAG}^{{tree}}").strip() == RELEASE_TREE_ID
    readme = repo / "README.md"
    readme.write_text(readme.read_text() + "changed\n")
    changed = run("apply.py", "--source", str(repo), *base, "--tree", str(workspace.root / "changed"))
    assert changed.returncode == 1
    assert "not the v4.31.0 release's tree" in changed.stderr and RELEASE_TREE_ID in changed.stderr
    assert not (workspace.root / "changed").exists()


@pytest.mark.parametrize("editable", [True, False], ids=["editable", "non-editable"])
def test_pip_install_leaves_the_tree_clean(tmp_path, two_patches, editable):
    """Installing the tree must not leave files git sees (the sdist's egg-info did), nor upset the next apply."""
    # The interpreter running the suite has the build back end; --ignore-installed and --prefix leave its own
    # environment untouched (pip would otherwise uninstall the transformers installed there first).
    target = ["-e", str(two_patches.tree)] if editable else [str(two_patches.tree)]
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--ignore-installed"]
        + ["--prefix", str(tmp_path)]
        + target,
        capture_output=True,
        text=True,
        env={**os.environ, **OFFLINE_PIP},
    )
    assert install.returncode == 0, install.stderr
    assert git(two_patches.tree, "status", "--porcelain", "--ignored=no") == ""
    again = two_patches.apply()
    assert again.returncode == 0, again.stderr
    assert "up to date" in again.stdout


def test_apply_is_idempotent(two_patches):
    head = two_patches.head()
    result = two_patches.apply()
    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stdout and "2 patches" in result.stdout
    assert two_patches.head() == head


def test_apply_prints_one_line_per_patch_and_rebuilds_when_the_series_changes(two_patches):
    first, second = sorted(two_patches.patches.glob("*.patch"))
    (two_patches.patches / "series").write_text(f"{second.name}\n")
    result = two_patches.apply()
    assert result.returncode == 0, result.stderr
    assert "rebuilding" in result.stdout
    assert [line for line in result.stdout.splitlines() if line.startswith("applied")] == [f"applied {second.name}"]
    assert "# first" not in (two_patches.tree / UTILS).read_text()
    (two_patches.patches / "series").write_text(f"{first.name}\n{second.name}\n")
    result = two_patches.apply()
    assert [line for line in result.stdout.splitlines() if line.startswith("applied")] == [
        f"applied {first.name}",
        f"applied {second.name}",
    ]


def test_export_right_after_apply_changes_nothing(two_patches):
    before = {path.name: path.read_bytes() for path in two_patches.patches.iterdir()}
    rebuilt = two_patches.apply("--force")  # a clean rebuild from patches/, commit hashes and dates included
    assert rebuilt.returncode == 0
    result = two_patches.export()
    assert result.returncode == 0, result.stderr
    assert "0 changed, 0 added, 0 removed" in result.stdout
    assert {path.name: path.read_bytes() for path in two_patches.patches.iterdir()} == before


def test_export_writes_series_and_is_deterministic(two_patches):
    names = [line for line in (two_patches.patches / "series").read_text().splitlines()]
    assert names == ["0001-generation-first-change.patch", "0002-setup-second-change.patch"]
    text = (two_patches.patches / names[0]).read_text()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert "Subject: [PATCH] generation: first change" in text
    assert not text.rstrip().endswith("--")  # no signature with the git version


def test_uncommitted_edit_is_refused_and_kept(two_patches):
    head = two_patches.head()
    utils = two_patches.tree / UTILS
    utils.write_text(utils.read_text() + "# work in progress\n")
    result = two_patches.apply()
    assert result.returncode == 1
    assert "uncommitted changes" in result.stderr and "make export" in result.stderr
    assert utils.read_text().endswith("# work in progress\n")
    assert two_patches.head() == head


def test_commits_missing_from_patches_are_refused(two_patches):
    two_patches.commit_edit(UTILS, "import inspect\n", "import inspect  # third\n", "generation: third change")
    head = two_patches.head()
    result = two_patches.apply()
    assert result.returncode == 1
    assert "commits that patches/ does not have" in result.stderr and "make export" in result.stderr
    assert two_patches.head() == head
    assert two_patches.export().returncode == 0
    assert two_patches.apply().returncode == 0
    assert two_patches.head() == head


def test_a_patch_that_does_not_apply_is_named_and_the_tree_left_at_the_last_good_patch(two_patches):
    first, second = sorted(two_patches.patches.glob("*.patch"))
    second.write_text(second.read_text().replace("\n-import os\n", "\n-import os as operating_system\n"))
    result = two_patches.apply()
    assert result.returncode == 1
    assert f"patch {second.name} does not apply" in result.stderr
    assert "setup.py" in result.stderr
    assert f"applied {first.name}" in result.stdout
    assert not (two_patches.tree / ".git" / "rebase-apply").exists()
    assert git(two_patches.tree, "log", "-1", "--format=%s").strip() == "generation: first change"
    assert git(two_patches.tree, "status", "--porcelain", "--untracked-files=no") == ""


def test_an_interrupted_apply_recovers(two_patches):
    """The state a kill during `git am` leaves: the stamp says applying, and git am is half done."""
    git(two_patches.tree, "reset", "-q", "--hard", PRISTINE_TAG)
    utils = two_patches.tree / UTILS
    utils.write_text(utils.read_text().replace("import copy\n", "import copy  # conflicting\n", 1))
    git(two_patches.tree, "commit", "-q", "-am", "conflict")
    (two_patches.tree / ".git" / STAMP).write_text("applying\n")
    subprocess.run(
        ["git", *IDENTITY, "am", "-q", str(sorted(two_patches.patches.glob("*.patch"))[0])],
        cwd=two_patches.tree,
        capture_output=True,
    )
    assert (two_patches.tree / ".git" / "rebase-apply").exists()
    result = two_patches.apply()
    assert result.returncode == 0, result.stderr
    assert "interrupted" in result.stdout
    assert two_patches.apply().stdout.count("up to date") == 1


def test_wheel_installs_in_a_fresh_venv_with_the_local_version(tmp_path, two_patches):
    out = tmp_path / "dist"
    built = run("wheel.py", "--tree", str(two_patches.tree), "--patches", str(two_patches.patches), "--out", str(out))
    assert built.returncode == 0, built.stderr
    (wheel,) = out.glob("*.whl")
    assert wheel.name == "transformers-4.31.0+assisted.2-py3-none-any.whl"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # transformers' run-time requirements, pinned: the section of requirements.txt between torch and the end marker
    lines = (REPO / "requirements.txt").read_text().split("[end of run-time requirements]")[0].splitlines()
    runtime = [line for line in lines if "==" in line and not line.startswith(("#", "torch=="))]
    # --no-deps with the full pinned list: the same result as resolving, without a minute of index queries
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel), *runtime], capture_output=True, text=True
    )
    assert install.returncode == 0, install.stderr
    version = subprocess.run(
        [str(python), "-c", "import transformers; print(transformers.__version__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == "4.31.0+assisted.2"
