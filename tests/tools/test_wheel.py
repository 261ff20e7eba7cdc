"""The wheel and constraints.txt: what a pip user installs is what the suite ran with.

constraints.txt pins the run-time dependencies. The test environment takes its pins from it (requirements.txt
constrains itself with it, and the Makefile rebuilds the venvs when it changes); the fast tests here check that the
two agree with each other and with the running environment. The slow test is the path a pip user takes: build the
wheel from the build tree, `pip install torch==2.13.0 <wheel> -c constraints.txt` in a fresh virtual environment
without system site-packages, `pip check`, and run the #25020 reproduction there.
"""

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO / "constraints.txt"
REQUIREMENTS = REPO / "requirements.txt"
MAKEFILE = REPO / "Makefile"
WHEEL_SCRIPT = REPO / "scripts" / "wheel.py"
REPRO = Path(__file__).resolve().parent / "repro_25020.py"
PRISTINE_TAG = "upstream-v4.31.0"
END_OF_RUNTIME = "[end of run-time requirements]"
TORCH = "2.13.0"

# scripts/wheel.py, loaded under a name of its own: `wheel` is also the name of the build tool's package.
_spec = importlib.util.spec_from_file_location("fork_wheel", WHEEL_SCRIPT)
fork_wheel = importlib.util.module_from_spec(_spec)
sys.path.insert(0, str(REPO / "scripts"))
_spec.loader.exec_module(fork_wheel)
RUNTIME, local_version, normalize = fork_wheel.RUNTIME, fork_wheel.local_version, fork_wheel.normalize


def pins(lines) -> dict[str, str]:
    """`name -> version` of the `name==version` lines (comments and options left out)."""
    found = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if "==" in line and not line.startswith("-"):
            name, version = line.split("==", 1)
            found[normalize(name)] = version.strip()
    return found


def constraints() -> dict[str, str]:
    return pins(CONSTRAINTS.read_text().splitlines())


def runtime_section() -> list[str]:
    return REQUIREMENTS.read_text().split(END_OF_RUNTIME, 1)[0].splitlines()


def rule(target: str) -> str:
    """The prerequisites of a Makefile rule, variables as written."""
    match = re.search(rf"^{re.escape(target)}:(.*)$", MAKEFILE.read_text(), re.MULTILINE)
    assert match, f"the Makefile has no rule for {target}"
    return match.group(1).split("##", 1)[0]


def test_constraints_pin_every_line_exactly_once():
    lines = [line.split("#", 1)[0].strip() for line in CONSTRAINTS.read_text().splitlines()]
    lines = [line for line in lines if line]
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+==[A-Za-z0-9.+!]+", line) for line in lines), lines
    assert len(constraints()) == len(lines), "constraints.txt pins a project twice"


def test_constraints_pin_transformers_run_time_requirements_and_not_torch():
    pinned = constraints()
    assert RUNTIME <= set(pinned), RUNTIME - set(pinned)
    assert "torch" not in pinned


def test_the_test_environment_takes_its_pins_from_constraints():
    assert "-c constraints.txt" in [line.strip() for line in runtime_section()]
    pinned = constraints()
    required = pins(runtime_section())
    assert required.pop("torch") == TORCH
    assert {name: pinned.get(name) for name in required} == required
    for target in ("$(VENV)/.requirements", "$(STOCK_VENV)/.requirements", "$(LINT_VENV)/.requirements"):
        assert "constraints.txt" in rule(target).split(), f"{target} is not rebuilt when constraints.txt changes"


def test_the_running_environment_has_the_pinned_versions():
    installed = {}
    for name in constraints():
        try:
            installed[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed[name] = None
    assert installed == constraints()


def test_the_wheel_is_built_without_the_development_environment():
    prerequisites = rule("wheel").split()
    assert "apply" in prerequisites and "$(WHEEL_VENV)/.requirements" in prerequisites
    assert not {"install", "venv"} & set(prerequisites)
    tools = pins((REPO / "requirements-wheel.txt").read_text().splitlines())
    assert {"pip", "setuptools", "wheel"} <= set(tools) and "torch" not in tools


def build_tree() -> Path:
    return Path(os.environ.get("TRANSFORMERS_TREE", REPO / "build" / "transformers")).resolve()


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.slow
def test_the_wheel_installs_with_the_constraints_and_fixes_25020(tmp_path):
    tree = build_tree()
    if not (tree / ".git").exists():
        pytest.skip(f"{tree} is not a built tree (make apply)")
    if git(tree, "rev-parse", "HEAD") == git(tree, "rev-parse", f"{PRISTINE_TAG}^{{commit}}"):
        pytest.skip(f"{tree} is the pristine release: there is no fork to build")
    # The build environment `make wheel` uses, where it exists: pip, setuptools and wheel, nothing else.
    builder = REPO / "build" / "wheel-venv" / "bin" / "python"
    builder = str(builder) if builder.exists() else sys.executable
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRANSFORMERS_TREE", "VIRTUAL_ENV")}
    built = subprocess.run(
        [builder, str(WHEEL_SCRIPT), "--tree", str(tree), "--out", str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        env=clean,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    version = local_version()
    assert wheel.name == f"transformers-{version}-py3-none-any.whl"

    environment = tmp_path / "venv"
    venv.create(environment, with_pip=True, system_site_packages=False)
    python = str(environment / "bin" / "python")
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", f"torch=={TORCH}", str(wheel), "-c", str(CONSTRAINTS)],
        capture_output=True,
        text=True,
        env=clean,
        cwd=tmp_path,
        timeout=1500,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]

    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, env=clean, check=True
    ).stdout
    installed = {normalize(entry["name"]): entry["version"] for entry in json.loads(listed)}
    assert installed.pop("transformers") == version
    assert installed.pop("torch").split("+")[0] == TORCH
    pinned = constraints()
    assert RUNTIME <= set(installed)
    assert {name: pinned.get(name) for name in installed if name != "pip"} == {
        name: version for name, version in installed.items() if name != "pip"
    }, "the install has versions that constraints.txt does not pin"
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True, env=clean)
    assert check.returncode == 0, check.stdout + check.stderr

    reproduction = subprocess.run(
        [python, str(REPRO)], capture_output=True, text=True, env=clean, cwd=tmp_path, timeout=600
    )
    assert reproduction.returncode == 0, reproduction.stdout + reproduction.stderr
    assert "assisted == greedy" in reproduction.stdout
