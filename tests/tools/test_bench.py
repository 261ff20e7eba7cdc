"""The benchmark's machinery: the pinned training corpus, the worker's draft-length reset and failure reports, and the
driver's paired ratios. Timing never enters an assertion: these tests check what is measured, not how fast."""

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"


def load(name):
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bench_train = load("bench_train")
bench_worker = load("bench_worker")
bench = load("bench")


def pinned_copy(tmp_path):
    """A directory holding the pinned corpus files (copied from this Python, or skipped where they differ)."""
    try:
        bench_train.corpus_bytes()
    except SystemExit:
        pytest.skip("this Python's standard library is not the pinned 3.11.7 one")
    stdlib = Path(bench_train.sysconfig.get_paths()["stdlib"])
    for name in bench_train.CORPUS:
        (tmp_path / name).write_bytes((stdlib / name).read_bytes())
    return tmp_path


def test_corpus_is_the_pinned_one(tmp_path):
    data = bench_train.corpus_bytes(pinned_copy(tmp_path))
    assert len(data) == sum(len((tmp_path / name).read_bytes()) + 1 for name in bench_train.CORPUS) - 1


def test_a_changed_corpus_file_stops_the_training_and_is_named(tmp_path):
    # Fails on a corpus check that hashes nothing (or only the file list): the models would change silently.
    directory = pinned_copy(tmp_path)
    (directory / "heapq.py").write_bytes((directory / "heapq.py").read_bytes() + b"\n# another Python\n")
    (directory / "glob.py").unlink()
    with pytest.raises(SystemExit) as error:
        bench_train.corpus_bytes(directory)
    message = str(error.value)
    assert "heapq.py: sha256" in message and "glob.py" in message
    assert "colorsys.py" not in message


def test_prompts_come_from_the_held_out_tail_and_do_not_change():
    try:
        prompts = bench_train.prompts(2, 64)
    except SystemExit:
        pytest.skip("this Python's standard library is not the pinned 3.11.7 one")
    assert prompts == bench_train.prompts(2, 64)
    train_text, held_out = bench_train.split(bench_train.corpus_bytes())
    assert all(len(prompt) == 64 and bytes(prompt) in held_out for prompt in prompts)


def test_worker_resets_the_draft_length_before_every_call():
    # 4.31 keeps the draft length on the assistant across calls: without the reset the second call of the same
    # generation proposes a different number of candidates (fails on a worker that does not reset it).
    worker = bench_worker.Worker(SimpleNamespace(device="cpu", dtype="float32", threads=1, clock="cpu"))
    first = worker.run("loop", "assisted", 24)
    second = worker.run("loop", "assisted", 24)
    assert "failed" not in first
    assert (first["proposed"], first["rounds"], first["output_sha"]) == (
        second["proposed"],
        second["rounds"],
        second["output_sha"],
    )
    assert first["output_sha"] == worker.run("loop", "greedy", 24)["output_sha"]


def test_worker_reports_a_refusal_instead_of_stopping():
    # A release that refuses a workload is shown in the tables; the worker must answer, not raise.
    worker = bench_worker.Worker(SimpleNamespace(device="cpu", dtype="float32", threads=1, clock="cpu"))
    target, assistant, prompt, weights = worker.workload("loop")
    prompt = dict(prompt, use_cache=False)  # without a cache, assisted decoding refuses (stock and patched)
    worker.loaded["loop"] = (target, assistant, prompt, weights)
    answer = worker.run("loop", "assisted", 8)
    assert answer["failed"].startswith("refuses: ValueError")


def result(case, side, rep, per_token, method="assisted", **extra):
    values = {
        "phase": "ab",
        "case": case,
        "side": side,
        "rep": rep,
        "method": method,
        "per_token": per_token,
        "accepted": 6,
        "proposed": 8,
        "new_tokens": 16,
        "rounds": 4,
        "overhead_per_round": 1e-4,
        "round_time": 1e-3,
        "first_round": 2e-3,
        "output_sha": "same",
    }
    values.update(extra)
    return values


def test_ratios_pair_the_runs_of_one_repetition_and_name_the_failed_side():
    # Paired per repetition: rep 0 is slow on every side, rep 1 fast; unpaired medians would mix them.
    greedy = "greedy:trained:16"
    results = []
    for rep, scale in ((0, 2.0), (1, 1.0)):
        results.append(result(greedy, "stock", rep, 1.0 * scale, method="greedy"))
        results.append(result(greedy, "patched", rep, 1.0 * scale, method="greedy"))
        results.append(result("trained-16", "stock", rep, 0.5 * scale))
        results.append(result("trained-16", "4.35.2", rep, 0.45 * scale))
        results.append(result("trained-16", "patched", rep, 0.4 * scale))
        results.append({"phase": "ab", "case": "trained-16", "side": "4.36.2", "rep": rep, "failed": "fails: X"})
    bench.QUICK_MODE = False
    table, _ = bench.summarize(results, ["stock", "4.35.2", "4.36.2", "patched"], ["trained-16"])
    row = table["trained-16"]
    assert row["ratio"] == pytest.approx((0.8, 0.8, 0.8))
    assert row["best_peer"] == "4.35.2"
    assert row["peer_ratio"][0] == pytest.approx(0.4 / 0.45)
    assert row["speedup"]["patched"] == pytest.approx((2.5, 2.5, 2.5))
    assert row["failed"] == {"4.36.2": "fails: X"}
    assert row["same_tokens"] and row["same_as_greedy"]


def test_different_tokens_on_one_side_are_flagged():
    results = [
        result("greedy:trained:16", "stock", 0, 1.0, method="greedy"),
        result("greedy:trained:16", "patched", 0, 1.0, method="greedy"),
        result("trained-16", "stock", 0, 0.5, output_sha="other"),
        result("trained-16", "patched", 0, 0.5),
    ]
    table, _ = bench.summarize(results, ["stock", "patched"], ["trained-16"])
    assert not table["trained-16"]["same_tokens"]


def test_counted_operations_leave_out_the_forwards_and_attribute_reads():
    # The count is what the loop runs around the forward passes: a forward pass runs dozens of operations, so a
    # counter that looked inside them would count far more per round than the loop's few; attribute reads (`.shape`)
    # are not operations.
    worker = bench_worker.Worker(SimpleNamespace(device="cpu", dtype="float32", threads=1, clock="cpu"))
    counted = worker.run("loop", "greedy", 8, count_ops=True)
    assert "__get__" not in counted["ops_by_name"]
    assert "layer_norm" not in counted["ops_by_name"] and "linear" not in counted["ops_by_name"]
    assert 0 < counted["ops_outside"] / counted["rounds"] < 40
    assert counted["output_sha"] == worker.run("loop", "greedy", 8)["output_sha"]
    assert worker.run("loop", "greedy", 8)["ops_outside"] is None


def test_operation_counts_pair_each_case_with_its_greedy_reference():
    results = [
        {"phase": "ops", "case": "greedy:trained:128", "side": "patched", "ops_outside": 500, "rounds": 128},
        {"phase": "ops", "case": "trained", "side": "stock", "ops_outside": 1300, "rounds": 13},
        {"phase": "ops", "case": "trained", "side": "patched", "ops_outside": 1400, "rounds": 14},
        {"phase": "ab", "case": "trained", "side": "patched", "ops_outside": None, "rounds": 14},
    ]
    counted = bench.operation_counts(results)
    assert list(counted) == ["trained"]
    assert counted["trained"]["greedy"]["ops_outside"] == 500
    assert {side: run["ops_outside"] for side, run in counted["trained"].items() if side != "greedy"} == {
        "stock": 1300,
        "patched": 1400,
    }
