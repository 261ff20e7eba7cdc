"""scripts/cuda/ and scripts/cuda_precision.py: the parts of the GPU run that can be checked on this machine.

The GPU run itself (`scripts/cuda/run.sh`) is rehearsed end to end on the CPU by `make cuda-dry-run`; these tests
check its pieces one by one, each against a broken variant it must catch:

- isolate.py: which system entries are hidden, and that the environment it builds sees the system's packages but
  not the hidden ones, nor the interpreter's own (fails on: a name match that misses editable installs or metadata;
  a virtual environment with the system site-packages; .pth files of the system left unprocessed);
- trees.py: stock is rebuilt from the fork and the pristine files byte for byte, a tampered archive or tree is refused
  (fails on: added files left in stock, deleted files not put back, no content check), and the series identity
  changes with any patch;
- record_plain_outputs.py --shard/--merge: parts merge into the unsharded data, incomplete sets are refused;
- cuda_precision.py: departures are found and counted (fails on: a comparison that ignores a differing token);
- summarize.py: outcomes per class from a junit file, recordings compared;
- bench_patched.py: the fork's default schedule (adaptive) by default and named in its results, 9 interleaved
  repetitions with per-repetition ratios and the noise, both timings (synchronized at every forward, and plain), the
  counts per call, and their way into summary.md (fails on: the worker's default heuristic, a single timing, ratios
  of medians instead of per repetition);
- run.sh: stops at once, with a summary, when build/cuda is missing or stale.
"""

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CUDA_SCRIPTS = REPO / "scripts" / "cuda"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


isolate = _load("cuda_isolate", CUDA_SCRIPTS / "isolate.py")
trees = _load("cuda_trees", CUDA_SCRIPTS / "trees.py")
summarize = _load("cuda_summarize", CUDA_SCRIPTS / "summarize.py")


# ---- isolate.py ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "entry, expected",
    [
        ("transformers", "transformers"),
        ("transformers-5.17.0.dist-info", "transformers"),
        ("__editable__.transformers-4.31.0.pth", "transformers"),
        ("__editable___transformers_5_17_0_finder.py", "transformers"),
        ("tokenizers", "tokenizers"),
        ("tokenizers-0.23.2.dist-info", "tokenizers"),
        ("huggingface_hub", "huggingface_hub"),
        ("huggingface_hub-1.33.0.dist-info", "huggingface_hub"),
        ("accelerate-1.15.0.dist-info", "accelerate"),
        ("peft", "peft"),
        ("torch", None),
        ("torch-2.11.0.dist-info", None),
        ("sentence_transformers", None),
        ("transformers_stream_generator", None),
        ("hf_xet", None),
        ("distutils-precedence.pth", None),
    ],
)
def test_excluded_distribution(entry, expected):
    assert isolate.excluded_distribution(entry) == expected


def _fake_wheel(path):
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("huggingface_hub/__init__.py", "__version__ = '0.16.4'\n")
        wheel.writestr("huggingface_hub-0.16.4.dist-info/METADATA", "Name: huggingface-hub\nVersion: 0.16.4\n")
        wheel.writestr("huggingface_hub-0.16.4.dist-info/RECORD", "")
    return path


def _fake_system(root):
    """A system site-packages: a package to keep, the ones to hide (with metadata), and a .pth file that adds a
    folder relative to the site-packages."""
    site = root / "site-packages"
    for name, source in {
        "keepme/__init__.py": "VALUE = 'system package'\n",
        "transformers/__init__.py": "raise ImportError('the system transformers was imported')\n",
        "tokenizers/__init__.py": "raise ImportError('the system tokenizers was imported')\n",
        "huggingface_hub/__init__.py": "__version__ = '1.33.0'\n",
        "extra_dir/extramod.py": "VALUE = 'added by a .pth file'\n",
    }.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(source)
    for name in ("transformers-5.17.0.dist-info", "tokenizers-0.23.2.dist-info", "huggingface_hub-1.33.0.dist-info"):
        (site / name).mkdir()
        (site / name / "METADATA").write_text(f"Name: {name.split('-')[0]}\nVersion: {name.split('-')[1][:-10]}\n")
    (site / "extra.pth").write_text("extra_dir\n")
    (site / "__editable__.transformers-5.17.0.pth").write_text(str(root / "elsewhere") + "\n")
    return site


def test_isolated_environment(tmp_path):
    site = _fake_system(tmp_path)
    wheel = _fake_wheel(tmp_path / "huggingface_hub-0.16.4-py3-none-any.whl")
    env, links, pylib = tmp_path / "env", tmp_path / "links", tmp_path / "pylib"
    report = isolate.build(env, links, pylib, [wheel], site_dirs=[site])
    assert sorted(set(report["excluded"].values())) == ["huggingface_hub", "tokenizers", "transformers"]
    assert report["system_pth_files"] == [str(site.resolve() / "extra.pth")]
    probe = textwrap.dedent("""
        import importlib.metadata, importlib.util, json, sys
        import extramod, keepme, huggingface_hub
        print(json.dumps({
            "keepme": keepme.VALUE,
            "extramod": extramod.VALUE,
            "hub": huggingface_hub.__version__,
            "hub_metadata": importlib.metadata.version("huggingface-hub"),
            "hidden": [n for n in ("transformers", "tokenizers", "pytest", "torch") if importlib.util.find_spec(n)],
            "no_system_site": sys.prefix != sys.base_prefix,
        }))
        """)
    environ = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    out = subprocess.run(
        [str(env / "bin" / "python"), "-c", probe], capture_output=True, text=True, env=environ, check=True
    ).stdout
    seen = json.loads(out)
    assert seen["keepme"] == "system package"
    assert seen["extramod"] == "added by a .pth file"  # the system's .pth files are processed
    assert seen["hub"] == "0.16.4" and seen["hub_metadata"] == "0.16.4"
    # neither the hidden packages nor what this interpreter has installed (pytest, torch) are visible
    assert seen["hidden"] == []
    assert seen["no_system_site"]
    assert "include-system-site-packages = false" in (env / "pyvenv.cfg").read_text()
    ninja = subprocess.run([str(env / "bin" / "ninja"), "--version"], capture_output=True, text=True)
    assert ninja.returncode != 0


# ---- trees.py ------------------------------------------------------------------------------------------------------


def _write_tree(root, files):
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)


def _tar(path, root, names):
    with tarfile.open(path, "w:gz") as tar:
        for name in names:
            tar.add(root / name, arcname=name)


PRISTINE = {"src/pkg/a.py": "a = 1\n", "src/pkg/sub/c.py": "c = 3\n", "src/pkg/gone/d.py": "d = 4\n"}
FORK = {"src/pkg/a.py": "a = 2  # patched\n", "src/pkg/sub/c.py": "c = 3\n", "src/pkg/new/b.py": "b = 2\n"}


def _packed(tmp_path):
    """build/cuda-like folder for a series that modifies a.py, adds new/b.py and deletes gone/d.py."""
    ref_fork, ref_stock, cuda = tmp_path / "ref-fork", tmp_path / "ref-stock", tmp_path / "cuda"
    _write_tree(ref_fork, FORK)
    _write_tree(ref_stock, PRISTINE)
    cuda.mkdir()
    _tar(cuda / "fork-src.tar.gz", ref_fork, sorted(FORK))
    _tar(cuda / "stock-delta.tar.gz", ref_stock, ["src/pkg/a.py", "src/pkg/gone/d.py"])
    manifest = {
        "format": trees.FORMAT,
        "fork_commit": "f" * 40,
        "series": ["0001-x.patch"],
        "series_sha256": "0" * 64,
        "fork_src": trees.archive_entry(cuda, "fork-src.tar.gz", ref_fork / "src"),
        "stock": {
            **trees.archive_entry(cuda, "stock-delta.tar.gz", ref_stock / "src"),
            "replaced": ["src/pkg/a.py", "src/pkg/gone/d.py"],
            "added_by_series": ["src/pkg/new/b.py"],
        },
        "wheels": [],
    }
    (cuda / trees.MANIFEST).write_text(json.dumps(manifest))
    return cuda, manifest


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_trees_rebuild_stock_from_the_fork(tmp_path):
    cuda, _ = _packed(tmp_path)
    trees.unpack(cuda, tmp_path / "run")
    assert _files(tmp_path / "run" / "fork") == FORK
    assert _files(tmp_path / "run" / "stock") == PRISTINE
    assert not (tmp_path / "run" / "stock" / "src" / "pkg" / "new").exists()  # emptied folders go too


def test_trees_refuse_a_tampered_archive(tmp_path):
    cuda, _ = _packed(tmp_path)
    with open(cuda / "fork-src.tar.gz", "ab") as archive:
        archive.write(b"\0")
    with pytest.raises(SystemExit, match="sha256"):
        trees.unpack(cuda, tmp_path / "run")


def test_trees_refuse_a_stock_tree_that_is_not_pristine(tmp_path):
    cuda, manifest = _packed(tmp_path)
    manifest["stock"]["added_by_series"] = []  # an incomplete list: new/b.py would stay in stock
    (cuda / trees.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(SystemExit, match="stock tree"):
        trees.unpack(cuda, tmp_path / "run")


def test_series_identity(tmp_path):
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "0001-a.patch").write_text("one\n")
    (patches / "0002-b.patch").write_text("two\n")
    (patches / "series").write_text("0001-a.patch\n# a comment\n0002-b.patch\n")
    first = trees.series_sha256(tmp_path)
    (patches / "0002-b.patch").write_text("two, changed\n")
    assert trees.series_sha256(tmp_path) != first


@pytest.mark.skipif(not (REPO / "build" / "cuda" / "manifest.json").exists(), reason="run `make cuda-prep` first")
def test_packed_stock_tree_is_what_the_recording_accepts(tmp_path):
    """The stock tree rebuilt from build/cuda passes record_plain_outputs' own check; the fork does not."""
    manifest, _, _ = trees.unpack(REPO / "build" / "cuda", tmp_path)
    sys.path.insert(0, str(REPO / "scripts"))
    from record_plain_outputs import STOCK_DIGEST, stock_tree_digest

    assert stock_tree_digest(tmp_path / "stock" / "src" / "transformers") == STOCK_DIGEST
    assert stock_tree_digest(tmp_path / "fork" / "src" / "transformers") != STOCK_DIGEST


# ---- record_plain_outputs.py --shard / --merge ---------------------------------------------------------------------


def _part(index, count, names):
    meta = {"device": "cpu", "fingerprint": "abc", "shard": [index, count]}
    return {
        "meta": meta,
        "plain": {n: {"plain/greedy": {"int": [[index]]}} for n in names},
        "slicing": {n: {} for n in names},
        "sources": {n: "def prepare_inputs_for_generation(): ..." for n in names},
        "skipped": {},
    }


def test_merge_parts():
    sys.path.insert(0, str(REPO / "scripts"))
    from record_plain_outputs import merge_parts

    merged = merge_parts([_part(1, 2, ["B", "D"]), _part(0, 2, ["A", "C"])])
    assert merged["meta"] == {"device": "cpu", "fingerprint": "abc"}
    assert sorted(merged["plain"]) == ["A", "B", "C", "D"]
    with pytest.raises(ValueError, match="not shards"):
        merge_parts([_part(0, 3, ["A"]), _part(1, 3, ["B"])])  # shard 2 missing
    with pytest.raises(ValueError, match="twice"):
        merge_parts([_part(0, 2, ["A"]), _part(1, 2, ["A"])])
    other = _part(1, 2, ["B"])
    other["meta"]["device"] = "cuda"
    with pytest.raises(ValueError, match="different"):
        merge_parts([_part(0, 2, ["A"]), other])


# ---- cuda_precision.py ---------------------------------------------------------------------------------------------


def _precision():
    sys.path.insert(0, str(REPO / "scripts"))
    import cuda_precision

    return cuda_precision


def test_precision_compare():
    compare = _precision().compare
    assert compare([1, 2, 3], [1, 2, 3]) == ("same", None, 0, 3)
    assert compare([1, 2, 3, 4], [1, 2, 9, 4]) == ("differs", 2, 1, 4)
    assert compare([1, 2], [1, 2, 3]) == ("differs", 2, 1, 3)


def test_precision_run_finds_departures(tmp_path, monkeypatch):
    """One class in float32 on the CPU: every run is equal; then with an assisted path that changes the fifth token,
    every run is reported as differing at step 4."""
    precision = _precision()
    csv_path, md_path = tmp_path / "p.csv", tmp_path / "p.md"
    args = ["--classes", "^GPT2LMHeadModel$", "--dtypes", "float32", "--prompts", "2", "--csv", str(csv_path)]
    assert precision.main(args + ["--markdown", str(md_path)]) == 0
    rows = csv_path.read_text().splitlines()
    assert len(rows) == 1 + 3 * 2  # header + (2 prompts + left_pad) x (self, draft)
    assert all(",same," in row for row in rows[1:])

    original = precision._sequences

    def broken(model, kwargs, assistant=None):
        sequences = original(model, kwargs, assistant)
        if assistant is not None:
            sequences = sequences.clone()
            sequences[0, -12] += 1  # the fifth of the 16 generated tokens
        return sequences

    monkeypatch.setattr(precision, "_sequences", broken)
    assert precision.main(args) == 0
    rows = csv_path.read_text().splitlines()[1:]
    assert rows and all(",differs,4,16,1," in row for row in rows)


# ---- summarize.py --------------------------------------------------------------------------------------------------

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="models.test_assisted_vs_greedy" name="test_assisted_vs_greedy[GPT2LMHeadModel-plain]">
  <properties><property name="max_score_diff" value="2e-06"/></properties></testcase>
<testcase classname="models.test_assisted_vs_greedy" name="test_assisted_vs_greedy[GPT2LMHeadModel-left_pad]">
  <failure message="AssertionError: assisted generation differs">trace</failure></testcase>
<testcase classname="models.test_plain_unchanged" name="test_plain_unchanged[OPTForCausalLM-plain-greedy]">
  <skipped type="pytest.skip" message="no stock data"/></testcase>
<testcase classname="models.test_assisted_vs_greedy" name="test_assisted_vs_greedy[OPTForCausalLM-self]">
  <skipped type="pytest.xfail" message="known"/></testcase>
<testcase classname="models.test_discovery" name="test_no_stale_expectations"/>
</testsuite></testsuites>
"""


def test_summarize_suite(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    totals, table, classes = summarize.suite_table(summarize.parse_junit(junit))
    assert totals == {"passed": 2, "failed": 1, "skipped": 1, "xfailed": 1}
    assert classes == 2
    lines = table.splitlines()
    assert lines[2].startswith("| GPT2LMHeadModel | supported | 1 | 1 | 0 | 0 | 2e-06 | `test_assisted_vs_greedy[")
    assert any(line.startswith("| OPTForCausalLM | supported | 0 | 0 | 1 | 1 |") for line in lines)
    assert lines[-1].startswith(f"| {summarize.WHOLE_SUITE} |  | 1 | 0 |")


def test_compare_recordings(tmp_path, capsys):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    data = {"meta": {"transformers_path": "/here", "device": "cpu"}, "plain": {"A": {"x": 1}}, "slicing": {}}
    first.write_text(json.dumps(data))
    data["meta"]["transformers_path"] = "/there"
    second.write_text(json.dumps(data))
    summarize.main(["compare-recordings", str(first), str(second)])
    assert capsys.readouterr().out.startswith("same data")
    data["plain"]["A"]["x"] = 2
    second.write_text(json.dumps(data))
    summarize.main(["compare-recordings", str(first), str(second)])
    out = capsys.readouterr().out
    assert out.startswith("DIFFERS") and "plain: A" in out


# ---- bench_patched.py ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bench():
    return _load("cuda_bench_patched", CUDA_SCRIPTS / "bench_patched.py")


def test_bench_defaults(bench):
    args = bench.parse_args([])
    assert args.schedule.is_defaults()  # the fork's own schedule, not the worker's heuristic
    assert args.reps >= 9
    assert args.plan[0] == ("draft", "float32", 128)
    # what the fork's GenerationConfig runs when nothing is set
    from benchkit.worker import draft_defaults

    assert draft_defaults()["schedule"] == "adaptive"
    assert bench.parse_args(["--schedule", "heuristic"]).schedule.schedule == "heuristic"


def _bench_run(tmp_path, *extra):
    out = tmp_path / "bench.json"
    command = [sys.executable, str(CUDA_SCRIPTS / "bench_patched.py"), "--device", "cpu", "--json", str(out)]
    command += ["--markdown", str(tmp_path / "bench.md"), *extra]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    return json.loads(out.read_text()), result.stdout.strip().splitlines()[-1]  # its last line: the short result


def test_bench_run(tmp_path):
    """9 repetitions of the tiny `loop` workload on the CPU: both timings, per-repetition ratios, the counts."""
    report, stdout = _bench_run(tmp_path, "--plan", "loop:float32:24", "--reps", "9")
    assert report["schedule"] == "adaptive" and report["schedule_setting"] == "defaults"
    (result,) = report["results"]
    assert result["schedule"] == "adaptive"
    assert result["reps"] == result["reps_planned"] == 9
    assert result["same_tokens"]
    for timing in ("synced", "plain"):
        measured = result["timings"][timing]
        for key in ("greedy_ms_per_token", "assisted_ms_per_token", "greedy_again_ms_per_token"):
            assert len(measured[key]) == 9
        ratios = [
            g / a for g, a in zip(measured["greedy_ms_per_token"], measured["assisted_ms_per_token"], strict=True)
        ]
        assert measured["ratios"] == pytest.approx(ratios)
        assert measured["ratio"]["median"] == pytest.approx(sorted(ratios)[4])
        assert len(measured["noise_ratios"]) == 9 and "noise_within_limit" in measured
        counts = measured["counts"]["assisted"]
        assert counts["calls"] == (9 if timing == "synced" else 1)
        for key in ("rounds", "drafted", "accepted", "target_forwards_per_token"):
            assert counts[key]["median"] >= 0
        # every round runs one target forward and adds its accepted candidates and the target's token
        assert counts["rounds"]["median"] + counts["accepted"]["median"] == pytest.approx(24, abs=1)
    assert result["timings"]["synced"]["counts"]["greedy"]["target_forwards_per_token"]["median"] == 1.0
    assert "plain generate" in report["timing_labels"]["plain"]
    assert stdout.startswith("bench: loop float32, schedule adaptive (the fork's default), 9 reps")

    # summary.md carries the benchmark's table, its schedule and both timings
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "bench.md").write_text((tmp_path / "bench.md").read_text())
    (run / "phases.tsv").write_text(f"bench\tok\t12\t{stdout.removeprefix('bench: ')}\n")
    summarize.main(["run", str(run), "--output", str(tmp_path / "summary.md")])
    summary = (tmp_path / "summary.md").read_text()
    assert "Draft-length schedule: **adaptive (the fork's default)**" in summary
    assert "| loop | float32 | 24 | plain | 9 |" in summary and "| loop | float32 | 24 | synced | 9 |" in summary
    assert "| bench | ok | 12 | loop float32, schedule adaptive" in summary
    assert "candidates drafted" in summary


def test_bench_heuristic_when_asked(tmp_path):
    report, _ = _bench_run(tmp_path, "--plan", "loop:float32:16", "--reps", "1", "--schedule", "heuristic")
    assert report["schedule"] == "heuristic" and report["schedule_setting"] == "heuristic from 5"
    counts = report["results"][0]["timings"]["synced"]["counts"]["assisted"]
    assert counts["drafted"]["median"] >= 15  # the heuristic drafts one candidate at least in every round
    assert "(asked: heuristic from 5)" in (tmp_path / "bench.md").read_text()


def test_bench_markdown_flags_noise_and_missing_repetitions(bench):
    def timing(noise):
        values = {"median": noise, "min": noise, "max": noise}
        return {
            "greedy_ms": {"median": 10.0, "min": 9.0, "max": 11.0},
            "assisted_ms": {"median": 8.0, "min": 8.0, "max": 8.0},
            "ratio": {"median": 1.25, "min": 1.2, "max": 1.3},
            "ratios": [1.2, 1.25, 1.3],
            "noise": values,
            "noise_within_limit": abs(noise - 1) <= bench.NOISE_LIMIT,
            "counts": {"assisted": None},
        }

    result = {"workload": "draft", "dtype": "float32", "tokens": 128, "reps": 3, "reps_planned": 9}
    result.update(same_tokens=True, device_name="gpu", torch="2", clock="wall")
    result["timings"] = {"synced": timing(1.01), "plain": timing(1.05)}
    report = {"device": "cuda", "schedule": "adaptive", "schedule_setting": "defaults", "results": [result]}
    text = bench.markdown(report)
    row = "| draft | float32 | 128 | synced | 3 of 9 | 10.00 (9.00-11.00) | 8.00 | 1.250x (1.200-1.300) | 1.010 ok |"
    assert row in text
    assert "| plain | 3 of 9 |" in text and "1.050 **beyond 3%**" in text


# ---- run.sh --------------------------------------------------------------------------------------------------------


def _copy_checkout(dest):
    names = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in names:
        source = REPO / os.fsdecode(name)
        if name and source.is_file():
            target = dest / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())


def _run_sh(checkout, out):
    environ = {key: value for key, value in os.environ.items() if not key.startswith("CUDA_")}
    environ.update(OUT=str(out), DEVICE="cpu", CUDA_SYSTEM_PYTHON=sys.executable)
    return subprocess.run(
        ["bash", "scripts/cuda/run.sh"], cwd=checkout, capture_output=True, text=True, env=environ, timeout=120
    )


def test_run_sh_stops_without_build_cuda(tmp_path):
    checkout = tmp_path / "repo"
    _copy_checkout(checkout)
    result = _run_sh(checkout, tmp_path / "out")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "STOPPED" in result.stdout and "make cuda-prep" in result.stdout
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| setup-series | FAILED |" in summary


@pytest.mark.skipif(not (REPO / "build" / "cuda" / "manifest.json").exists(), reason="run `make cuda-prep` first")
def test_run_sh_stops_on_a_stale_series(tmp_path):
    checkout = tmp_path / "repo"
    _copy_checkout(checkout)
    (checkout / "build").mkdir()
    subprocess.run(["cp", "-a", str(REPO / "build" / "cuda"), str(checkout / "build")], check=True)
    series = checkout / "patches" / "series"
    first = next(line for line in series.read_text().splitlines() if line.strip() and not line.startswith("#"))
    (checkout / "patches" / first).write_text((checkout / "patches" / first).read_text() + "\n")
    result = _run_sh(checkout, tmp_path / "out")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "another patch series" in result.stdout
