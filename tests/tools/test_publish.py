"""scripts/publish.sh: the fork is pushed to a git remote and installs with pip from there.

The slow test is the path a pip user takes: publish the build tree to a (local, bare) remote, create a fresh
virtual environment without system site-packages, `pip install "transformers @ git+file://...@<branch>"` from
the line publish.sh prints (torch comes from the local wheel), and run the #25020 reproduction there.
"""

import os
import subprocess
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "publish.sh"
REPRO = Path(__file__).resolve().parent / "repro_25020.py"
PRISTINE_TAG = "upstream-v4.31.0"
IDENTITY = ["-c", "user.name=Test", "-c", "user.email=test@localhost"]


def build_tree() -> Path:
    return Path(os.environ.get("TRANSFORMERS_TREE", REPO / "build" / "transformers")).resolve()


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, check=True).stdout.strip()


def publish(tree: Path, remote: str, branch: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), remote, branch], capture_output=True, text=True, env=dict(os.environ, TREE=str(tree))
    )


def install_line(output: str) -> str:
    line = output.strip().splitlines()[-1].strip()
    assert line.startswith('pip install "transformers @ git+'), output
    return line[len('pip install "') : -1]


@pytest.fixture
def scratch(tmp_path):
    """A small tree shaped like the build tree: a pristine root commit with the tag and one commit on top."""
    tree = tmp_path / "tree"
    tree.mkdir()
    git(tree, "init", "-q", "-b", "main")
    (tree / "setup.py").write_text("# pristine\n")
    git(tree, "add", "setup.py")
    git(tree, *IDENTITY, "commit", "-qm", "pristine")
    git(tree, "tag", PRISTINE_TAG)
    (tree / "fix.py").write_text("# the series\n")
    git(tree, "add", "fix.py")
    git(tree, *IDENTITY, "commit", "-qm", "the series")
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    return tree, remote


def test_publish_creates_and_replaces_the_branch(scratch):
    tree, remote = scratch
    result = publish(tree, str(remote), "assisted-fix")
    assert result.returncode == 0, result.stderr
    assert git(remote, "rev-parse", "assisted-fix") == git(tree, "rev-parse", "HEAD")
    assert "created assisted-fix" in result.stdout and "1 patches on upstream-v4.31.0" in result.stdout
    assert install_line(result.stdout) == f"transformers @ git+file://localhost{remote}@assisted-fix"

    # The series is rebuilt (new commits): publishing again replaces the branch.
    git(tree, *IDENTITY, "commit", "-q", "--amend", "-m", "the series, refreshed")
    result = publish(tree, str(remote), "assisted-fix")
    assert result.returncode == 0, result.stderr
    assert "moved assisted-fix" in result.stdout
    assert git(remote, "rev-parse", "assisted-fix") == git(tree, "rev-parse", "HEAD")


def test_publish_refuses_what_is_not_the_fork(scratch, tmp_path):
    tree, remote = scratch
    (tree / "fix.py").write_text("# edited, not committed\n")
    result = publish(tree, str(remote), "assisted-fix")
    assert result.returncode == 1 and "uncommitted changes" in result.stderr
    git(tree, "checkout", "-q", "--", "fix.py")

    assert publish(tree, str(remote), "bad..name").returncode == 2
    assert publish(tree, str(tmp_path / "nowhere"), "assisted-fix").returncode == 1
    git(tree, "tag", "-d", PRISTINE_TAG)
    result = publish(tree, str(remote), "assisted-fix")
    assert result.returncode == 1 and "has no tag upstream-v4.31.0" in result.stderr
    assert subprocess.run(["bash", str(SCRIPT)], capture_output=True).returncode == 2


@pytest.mark.slow
def test_pip_installs_the_published_fork_and_it_fixes_25020(tmp_path):
    tree = build_tree()
    if not (tree / ".git").exists():
        pytest.skip(f"{tree} is not a built tree (make apply)")
    if git(tree, "rev-parse", "HEAD") == git(tree, "rev-parse", f"{PRISTINE_TAG}^{{commit}}"):
        pytest.skip(f"{tree} is the pristine release: there is no fork to publish")
    remote = tmp_path / "transformers.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    result = publish(tree, str(remote), "assisted-fix")
    assert result.returncode == 0, result.stderr
    requirement = install_line(result.stdout)

    environment = tmp_path / "venv"
    venv.create(environment, with_pip=True, system_site_packages=False)
    python = str(environment / "bin" / "python")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRANSFORMERS_TREE", "VIRTUAL_ENV")}
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "torch==2.13.0", requirement],
        capture_output=True,
        text=True,
        env=clean,
        cwd=tmp_path,
        timeout=1500,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]

    where = subprocess.run(
        [python, "-c", "import transformers; print(transformers.__file__, transformers.__version__)"],
        capture_output=True,
        text=True,
        env=clean,
        cwd=tmp_path,
        check=True,
    ).stdout
    assert where.startswith(str(environment)) and where.split()[1].startswith("4.31.0"), where

    reproduction = subprocess.run(
        [python, str(REPRO)], capture_output=True, text=True, env=clean, cwd=tmp_path, timeout=600
    )
    assert reproduction.returncode == 0, reproduction.stdout + reproduction.stderr
    assert "assisted == greedy" in reproduction.stdout
