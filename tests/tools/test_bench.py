"""The benchmark's machinery (scripts/benchkit/): the pinned training corpus, the sides and their settings, the
worker's draft-length hook and failure reports, the weights a side adopts, and the driver's paired ratios, report and
verdict lines. Timing never enters an assertion: these tests check what is measured, not how fast."""

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

from benchkit import counting, measure, peers, report, sides, summary, train, workloads  # noqa: E402
from benchkit import worker as bench_worker  # noqa: E402
from benchkit.settings import DraftLength, Settings  # noqa: E402

ALL_SIDES = ["stock", "4.35.2", "4.36.2", "5.23.0", "5.23.0-eager", "patched"]


def make_worker(**settings):
    args = SimpleNamespace(device="cpu", dtype="float32", threads=1, clock="cpu")
    if settings:
        args.settings = Settings(**settings).to_json()
    return bench_worker.Worker(args)


def pinned_copy(tmp_path):
    """A directory holding the pinned corpus files (copied from this Python, or skipped where they differ)."""
    try:
        train.corpus_bytes()
    except SystemExit:
        pytest.skip("this Python's standard library is not the pinned 3.11.7 one")
    stdlib = Path(train.sysconfig.get_paths()["stdlib"])
    for name in train.CORPUS:
        (tmp_path / name).write_bytes((stdlib / name).read_bytes())
    return tmp_path


def test_corpus_is_the_pinned_one(tmp_path):
    data = train.corpus_bytes(pinned_copy(tmp_path))
    assert len(data) == sum(len((tmp_path / name).read_bytes()) + 1 for name in train.CORPUS) - 1


def test_a_changed_corpus_file_stops_the_training_and_is_named(tmp_path):
    # Fails on a corpus check that hashes nothing (or only the file list): the models would change silently.
    directory = pinned_copy(tmp_path)
    (directory / "heapq.py").write_bytes((directory / "heapq.py").read_bytes() + b"\n# another Python\n")
    (directory / "glob.py").unlink()
    with pytest.raises(SystemExit) as error:
        train.corpus_bytes(directory)
    message = str(error.value)
    assert "heapq.py: sha256" in message and "glob.py" in message
    assert "colorsys.py" not in message


def test_prompts_come_from_the_held_out_tail_and_do_not_change():
    try:
        prompts = train.prompts(2, 64)
    except SystemExit:
        pytest.skip("this Python's standard library is not the pinned 3.11.7 one")
    assert prompts == train.prompts(2, 64)
    train_text, held_out = train.split(train.corpus_bytes())
    assert all(len(prompt) == 64 and bytes(prompt) in held_out for prompt in prompts)


def test_the_entry_scripts_stay_thin_and_importable():
    # The Makefile and the docs name scripts/bench.py, bench_worker.py, bench_peers.py and bench_train.py.
    for script in ("bench.py", "bench_peers.py", "bench_train.py"):
        result = subprocess.run([sys.executable, str(SCRIPTS / script), "--help"], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    result = subprocess.run([sys.executable, str(SCRIPTS / "bench.py"), "--help"], capture_output=True, text=True)
    assert "--peers" in result.stdout and "--constant-draft" in result.stdout and "--report-from" in result.stdout


# ---- workloads, peers, sides, settings


def test_every_case_names_a_pair_and_the_poor_drafts_are_the_five():
    assert workloads.HEADLINE in workloads.CASES
    for case in workloads.CASES.values():
        if case.kind == "real":  # measured apart on the real checkpoints (benchkit.real)
            continue
        assert case.pair in workloads.PAIRS and (case.group in workloads.GROUPS or case.kind == "asr")
        assert workloads.PAIRS[case.pair].greedy in workloads.PAIRS
    assert {name for name, case in workloads.CASES.items() if case.poor_draft} == {
        "draft",
        "draft-16",
        "partial",
        "self",
        "whisper-own-poor",
    }
    # draft, self and partial share the GPT-2 small target: one greedy baseline per token count
    assert workloads.CASES["self"].greedy_key(False) == workloads.CASES["draft"].greedy_key(False) == ("draft", 128)
    assert workloads.CASES["loop"].greedy_key(True) == ("loop", 256)
    # so do the distil-whisper-shaped cases
    distil = [name for name, case in workloads.CASES.items() if case.group == "whisper"]
    assert distil == ["whisper-shared", "whisper-own", "whisper-own-poor"]
    assert {workloads.CASES[name].greedy_key(False) for name in distil} == {("whisper-shared", 96)}
    assert {workloads.CASES[name].greedy_key(True) for name in distil} == {("whisper-shared", 32)}
    # every group has its repetitions in both plans
    for group in workloads.GROUPS:
        assert f"{group}_reps" in measure.FULL and f"{group}_reps" in measure.QUICK


def test_peers_are_pinned_exactly_with_the_local_torch():
    for version, peer in peers.PEERS.items():
        requirements = peer.requirements()
        assert f"transformers=={version}" in requirements
        # any looser torch spec pulls a multi-GB CUDA build
        assert "torch==2.13.0" in requirements
        assert all("==" in line and not any(c in line for c in "<>~!*") for line in requirements), requirements
        names = [line.split("==")[0].lower().replace("_", "-") for line in requirements]
        assert len(names) == len(set(names)), f"{version} pins a package twice"
    assert peers.stamp("5.23.0") != peers.stamp("4.36.2")


def test_a_run_has_its_sides_in_table_order_with_unique_names():
    run = sides.run_sides(list(peers.PEERS), constant=[1, 2])
    names = [side.name for side in run]
    assert names == ALL_SIDES + ["patched-k1", "patched-k2"]
    assert len({side.short for side in run}) == len(run)
    assert [side.kind for side in run].count("peer") == 4
    by_name = {side.name: side for side in run}
    assert by_name["5.23.0"].environment == by_name["5.23.0-eager"].environment == "5.23.0"
    assert by_name["5.23.0"].settings.draft.is_defaults() and by_name["5.23.0"].settings.attention is None
    assert by_name["5.23.0-eager"].settings.attention == "eager"
    assert by_name["4.35.2"].settings.draft == DraftLength.heuristic(5)
    assert by_name["patched-k2"].settings.draft == DraftLength("constant", 2, 0.0)
    # a saved run's sides come back as they ran, with or without their stored specs (runs saved before them)
    meta = {"sides": names, "side_specs": {side.name: side.to_json() for side in run}}
    assert sides.from_meta(meta) == run
    # runs saved before the specs ran the fork with the 4.31 heuristic
    assert sides.from_meta({"sides": names}) == run[:-3] + [sides.patched_side(DraftLength.heuristic())] + run[-2:]


@pytest.mark.parametrize("rep", [0, 1, 2, 3, 4, 5])
@pytest.mark.parametrize("case", ["trained", "draft-16", "sampling-t1.0"])
def test_the_references_run_next_to_the_patched_assisted_run(case, rep):
    run = sides.run_sides(list(peers.PEERS), constant=[1])
    order = measure.Bench.order(SimpleNamespace(sides=[side.name for side in run]), rep)
    references = [name for name in order if name in sides.reference_sides(workloads.CASES[case], run)]
    assisted = [name for name in order if name in sides.case_sides(workloads.CASES[case], run, None)]
    sequence = measure.Bench.sequence(rep, case, references, assisted)
    reference_method = workloads.CASES[case].reference_method
    # every side runs once, the assisted sides in the rotating order
    assert sorted(sequence) == sorted(
        [(name, reference_method) for name in references] + [(n, "assisted") for n in assisted]
    )
    assert [name for name, method in sequence if method == "assisted"] == assisted
    # the references form one block with the patched assisted run, the patched reference next to it, on the side
    # that alternates from one repetition to the next
    at = sequence.index(("patched", "assisted"))
    block = sequence[at - len(references) : at + 1] if rep % 2 == 0 else sequence[at : at + len(references) + 1]
    assert sorted(block) == sorted([(name, reference_method) for name in references] + [("patched", "assisted")])
    assert sequence[at - 1 if rep % 2 == 0 else at + 1] == ("patched", reference_method)


def test_the_patched_side_runs_the_forks_defaults_unless_told_otherwise():
    from benchkit import cli

    assert cli.parse_args([]).patched_draft == DraftLength.defaults()
    default = sides.run_sides([], patched_draft=cli.parse_args([]).patched_draft)[-1]
    assert (default.name, default.label) == ("patched", "patched") and default.settings.draft.is_defaults()
    told = sides.run_sides([], patched_draft=cli.parse_args(["--patched-draft", "heuristic:5"]).patched_draft)[-1]
    assert told.label == "patched (heuristic from 5)" and told.settings.draft == DraftLength.heuristic(5)
    # the report's method section says which schedule the defaults are
    info = {"transformers": "4.31.0", "draft_defaults": {"via": "generation_config", "num_assistant_tokens": 5}}
    info["draft_defaults"]["schedule"] = "adaptive"
    text = report.draft_text(default, {"patched": info})
    assert text.startswith("the fork's defaults") and "`adaptive` (in each round" in text
    assert "`heuristic`" in report.draft_text(told, {"patched": info})


def test_constant_draft_lengths_run_the_cases_whose_drafts_pay_only():
    from benchkit import cli

    args = cli.parse_args([])
    assert args.constant_draft == list(range(1, 11))
    run = sides.run_sides(["5.23.0"], constant=args.constant_draft)
    paying = [name for name, case in workloads.CASES.items() if case.best_constant]
    assert paying == ["trained", "encdec"]
    for name, case in workloads.CASES.items():
        ran = sides.case_sides(case, run)
        assert ("patched-k10" in ran) == (name in paying)
        assert {"stock", "patched"} <= set(ran)
        assert ("5.23.0" in ran) == (case.peers is None or "5.23.0" in case.peers)
    # 5.23.0's Whisper generate returns its tokens without the decoder start token: it stays out of the distil cases
    assert sides.case_sides(workloads.CASES["whisper-own"], sides.run_sides(list(peers.PEERS))) == [
        "stock",
        "4.36.2",
        "patched",
    ]
    # --constant-cases chooses others
    assert "patched-k1" in sides.case_sides(workloads.CASES["loop"], run, ["loop"])
    assert "patched-k1" not in sides.case_sides(workloads.CASES["trained"], run, ["loop"])
    assert cli.parse_args(["--constant-draft", ""]).constant_draft == []
    args = cli.parse_args(["--constant-cases", "loop,nope"])
    with pytest.raises(SystemExit, match="nope"):
        cli.run_cases(args)


def test_draft_lengths_parse_and_travel_as_json():
    assert DraftLength.parse("defaults") == DraftLength.defaults()
    assert DraftLength.parse("heuristic") == DraftLength.heuristic(5)
    assert DraftLength.parse("heuristic:3") == DraftLength("heuristic", 3)
    assert DraftLength.parse("constant:4") == DraftLength.constant(4)
    assert DraftLength.parse("adaptive") == DraftLength("adaptive", None)
    for text in ("constant", "constant:0", "heuristic:x", ""):
        with pytest.raises(ValueError):
            DraftLength.parse(text)
    settings = Settings(attention="eager", draft=DraftLength.constant(3))
    assert Settings.from_json(settings.to_json()) == settings
    assert Settings.from_json(None) == Settings()
    assert sides.parse_lengths("1-3,5") == [1, 2, 3, 5]


# ---- the worker


class _Config(SimpleNamespace):
    """A generation_config with the draft-length fields (4.35+, 5.x, and the patched fork once it has them)."""


def test_the_draft_length_hook_puts_every_call_in_the_same_state():
    assistant = SimpleNamespace(generation_config=_Config(num_assistant_tokens=9, num_assistant_tokens_schedule="x"))
    saved = {
        "num_assistant_tokens": None,
        "num_assistant_tokens_schedule": None,
        "assistant_confidence_threshold": None,
    }
    assistant.generation_config.assistant_confidence_threshold = 0.3
    assistant.num_assistant_tokens = 7  # 4.35's attribute would override the config
    bench_worker.set_draft_length(assistant, DraftLength.defaults(), saved)
    assert "num_assistant_tokens" not in assistant.__dict__
    assert vars(assistant.generation_config) == saved  # the release's defaults fill them in at generation time
    bench_worker.set_draft_length(assistant, DraftLength.heuristic(5), saved)
    config = assistant.generation_config
    assert (config.num_assistant_tokens, config.num_assistant_tokens_schedule) == (5, "heuristic")
    assert config.assistant_confidence_threshold is None
    bench_worker.set_draft_length(assistant, DraftLength.constant(3), saved)
    assert (config.num_assistant_tokens, config.num_assistant_tokens_schedule) == (3, "constant")
    assert config.assistant_confidence_threshold == 0.0

    # 4.31: the heuristic only, from `max_assistant_tokens`
    old = SimpleNamespace(generation_config=SimpleNamespace(), max_assistant_tokens=11.0)
    bench_worker.set_draft_length(old, DraftLength.heuristic(5), {})
    assert "max_assistant_tokens" not in old.__dict__
    bench_worker.set_draft_length(old, DraftLength.heuristic(3), {})
    assert old.max_assistant_tokens == 3
    with pytest.raises(ValueError, match="schedule"):
        bench_worker.set_draft_length(old, DraftLength.constant(3), {})


def test_worker_resets_the_draft_length_before_every_call():
    # 4.31 keeps the draft length on the assistant across calls: without the reset the second call of the same
    # generation proposes a different number of candidates (fails on a worker that does not reset it).
    worker = make_worker()
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
    worker = make_worker()
    target, assistant, prompt, weights = worker.workload("loop")
    prompt = dict(prompt, use_cache=False)  # without a cache, assisted decoding refuses (stock and patched)
    worker.loaded["loop"] = (target, assistant, prompt, weights)
    answer = worker.run("loop", "assisted", 8)
    assert answer["failed"].startswith("refuses: ValueError")


def test_a_draft_length_the_version_lacks_is_a_refusal_and_an_attention_it_lacks_an_error():
    worker = make_worker(draft=DraftLength.constant(2))
    answer = worker.run("loop", "assisted", 8)
    if "failed" in answer:  # 4.31 without generation_config.num_assistant_tokens
        assert answer["failed"].startswith("refuses: ValueError") and "schedule" in answer["failed"]
    else:  # the fork has the fields: every round drafts exactly two candidates (but the last ones)
        assert answer["proposed"] >= 2 * (answer["rounds"] - 2)
    info = worker.info()
    assert info["settings"]["draft"]["schedule"] == "constant"
    assert info["draft_defaults"]["via"] in ("max_assistant_tokens", "generation_config")
    if not hasattr(worker.workload("loop")[0].config, "_attn_implementation"):
        with pytest.raises(ValueError, match="attention"):
            make_worker(attention="eager").workload("loop")


def test_a_side_that_builds_other_weights_adopts_the_reference_ones(tmp_path):
    import torch

    reference, other = make_worker(), make_worker()
    expected = reference.workload("loop")[3]
    target = other.workload("loop")[0]
    with torch.no_grad():
        next(target.parameters()).add_(1.0)  # as a version that initializes in another order
    assert bench_worker.checksum(target, other.workload("loop")[1]) != expected
    path = str(tmp_path / "loop.pt")
    assert reference.save_weights("loop", path)["weights"] == expected
    assert other.adopt_weights("loop", path)["weights"] == expected
    assert other.workload("loop")[3] == expected


def test_counted_operations_leave_out_the_forwards_and_attribute_reads():
    # The count is what the loop runs around the forward passes: a forward pass runs dozens of operations, so a
    # counter that looked inside them would count far more per round than the loop's few; attribute reads (`.shape`)
    # are not operations.
    worker = make_worker()
    counted = worker.run("loop", "greedy", 8, count_ops=True)
    assert "__get__" not in counted["ops_by_name"]
    assert "layer_norm" not in counted["ops_by_name"] and "linear" not in counted["ops_by_name"]
    assert 0 < counted["ops_outside"] / counted["rounds"] < 40
    assert counted["output_sha"] == worker.run("loop", "greedy", 8)["output_sha"]
    assert worker.run("loop", "greedy", 8)["ops_outside"] is None


# ---- the driver: summaries, report, verdict


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


def named(*names):
    return [sides.known(name) for name in names]


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
    table, _ = summary.summarize(results, named("stock", "4.35.2", "4.36.2", "patched"), ["trained-16"])
    row = table["trained-16"]
    assert row["ratio"] == pytest.approx((0.8, 0.8, 0.8))
    assert row["best_peer"] == "4.35.2"
    assert row["peer_ratio"][0] == pytest.approx(0.4 / 0.45)
    assert row["speedup"]["patched"] == pytest.approx((2.5, 2.5, 2.5))
    assert row["slowdown"]["patched"] == pytest.approx((0.4, 0.4, 0.4))
    assert row["failed"] == {"4.36.2": "fails: X"}
    assert row["same_tokens"] and row["same_as_greedy"]


def test_cases_that_share_a_reference_are_each_paired_with_their_own_runs():
    greedy = "greedy:draft:128"
    results = []
    for case, scale in (("draft", 1.0), ("self", 2.0)):
        for side in ("stock", "patched"):
            results.append(result(greedy, side, 0, 10.0 * scale, method="greedy", reference_for=case))
        results.append(result(case, "patched", 0, 11.0 * scale))
    table, _ = summary.summarize(results, named("stock", "patched"), ["draft", "self"])
    for case in ("draft", "self"):
        assert table[case]["slowdown"]["patched"] == pytest.approx((1.1, 1.1, 1.1))
        assert table[case]["noise"] == pytest.approx((1.0, 1.0, 1.0))
    assert table["self"]["greedy"] == pytest.approx(20.0)
    # runs saved before each case had its own references share them
    for saved in results:
        saved.pop("reference_for", None)
    table, _ = summary.summarize(results, named("stock", "patched"), ["draft", "self"])
    assert table["draft"]["greedy"] == table["self"]["greedy"]


def test_different_tokens_on_one_side_are_flagged():
    results = [
        result("greedy:trained:16", "stock", 0, 1.0, method="greedy"),
        result("greedy:trained:16", "patched", 0, 1.0, method="greedy"),
        result("trained-16", "stock", 0, 0.5, output_sha="other"),
        result("trained-16", "patched", 0, 0.5),
    ]
    table, _ = summary.summarize(results, named("stock", "patched"), ["trained-16"])
    assert not table["trained-16"]["same_tokens"]


def test_operation_counts_pair_each_case_with_its_greedy_reference():
    results = [
        {"phase": "ops", "case": "greedy:trained:128", "side": "patched", "ops_outside": 500, "rounds": 128},
        {"phase": "ops", "case": "trained", "side": "stock", "ops_outside": 1300, "rounds": 13},
        {"phase": "ops", "case": "trained", "side": "patched", "ops_outside": 1400, "rounds": 14},
        {"phase": "ab", "case": "trained", "side": "patched", "ops_outside": None, "rounds": 14},
    ]
    counted = counting.operation_counts(results, {"trained": ("trained", 128), "loop": ("loop", 1024)})
    assert list(counted) == ["trained"]
    assert counted["trained"]["greedy"]["ops_outside"] == 500
    assert {side: run["ops_outside"] for side, run in counted["trained"].items() if side != "greedy"} == {
        "stock": 1300,
        "patched": 1400,
    }


def fake_run():
    """A small run of every side on the headline case and two poor-draft cases, and of two constant draft lengths on
    the headline case: (results, sides, meta, info)."""
    run = sides.run_sides(list(peers.PEERS), constant=[1, 2])
    # time per token of each side on the trained case; 5.23.0 eager is the fastest upstream side, k=2 the best constant
    trained = {"stock": 3.0, "4.35.2": 2.6, "4.36.2": 2.9, "5.23.0": 2.5, "5.23.0-eager": 2.4, "patched": 2.7}
    trained.update({"patched-k1": 3.5, "patched-k2": 2.55})
    results = []
    for rep in range(3):
        jitter = 1 + 0.01 * rep
        for case, tokens, greedy_pair, greedy_time, slow in (
            ("trained", 128, "trained", 6.0, 1.0),
            ("draft", 128, "draft", 70.0, 2.0),
            ("partial", 128, "draft", 70.0, 2.5),
        ):
            for side in ("stock", "patched"):
                results.append(result(f"greedy:{greedy_pair}:{tokens}", side, rep, greedy_time * jitter, "greedy"))
            for side in sides.case_sides(workloads.CASES[case], run):
                per_token = trained[side] if case == "trained" else greedy_time * slow
                results.append(result(case, side, rep, per_token * jitter, continuation=[101, 110] * 64))
    results.append(result("batch:batched-assisted:8", "stock", None, 1.0, phase="batch-probe", failed="refuses: X"))
    meta = {
        "quick": False,
        "sides": [side.name for side in run],
        "cases": ["trained", "draft", "partial"],
        "marks": [],
        "wall": 60.0,
        "finished": "today",
        "command": "python scripts/bench.py",
        "machine": {"cpu": "cpu", "cores": 2, "platform": "linux"},
        "load_before": "1.0",
        "load_after": "1.0",
        "patches": 25,
        "attention": {side.name: {"trained": "sdpa" if side.name == "5.23.0" else None} for side in run},
        "adopted": {"encdec": ["5.23.0", "5.23.0-eager"]},
    }
    info = {}
    for side in run:
        version = side.environment if side.kind == "peer" else "4.31.0"
        info[side.name] = {
            "transformers": version,
            "transformers_file": str(REPO / "build" / side.environment),
            "torch": "2.13.0",
            "python": "3.11.7",
            "threads": 1,
            "device": "cpu",
            "device_name": "cpu",
            "dtype": "float32",
            "clock": "cpu",
        }
    info["5.23.0"]["draft_defaults"] = {
        "via": "generation_config",
        "num_assistant_tokens": 20,
        "schedule": "constant",
        "confidence": 0.4,
        "confidence_adapts": False,
    }
    info["5.23.0-eager"]["draft_defaults"] = info["5.23.0"]["draft_defaults"]
    return results, run, meta, info


def test_the_report_keeps_its_sections_and_names_every_side():
    results, run, meta, info = fake_run()
    table, growth = summary.summarize(results, run, meta["cases"])
    text = report.report(meta, info, run, table, growth, [], results)
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == ["## Machine and versions", "## Cases", "## Method", "## Results", "## Plots", "## GPU"]
    assert text.startswith("# Benchmark: assisted generation, stock 4.31.0, upstream 4.35/4.36/5.23 and the patched")
    for side in run:
        assert side.is_constant or side.label in text
    assert "| trained | 128 |" in text
    # 5.23.0's defaults and attention are named, and the weights it adopted
    assert "`num_assistant_tokens` 20, schedule `constant`, `assistant_confidence_threshold` 0.4" in text
    assert "`sdpa` (its default)" in text
    assert "upstream 5.23.0 and upstream 5.23.0 eager built other `encdec` weights" in text
    assert "transformers==5.23.0, tokenizers==0.23.3, huggingface-hub==2.4.0, safetensors==0.8.0" in text
    assert "patched/5.23.0-eager (the fastest upstream side on this case)" in text
    # the constant draft lengths have their own table, and stay out of the others
    assert "| trained | 128 | 2727.00 | 3535.00 | **2575.50** | k=2 | **1.059 (1.059-1.059)** | 3 |" in text
    assert "k=1" not in text.split("**Best constant draft length in hindsight.**")[0]
    assert "On `trained` the best constant length is the longest tried (k=2): a longer one may be" in text
    # how many repetitions each case got
    assert "- Repetitions per case (paired): 3: `trained`, `draft` and `partial`." in text


def test_the_verdict_ends_with_the_best_peer_and_the_worst_poor_draft():
    results, run, meta, _ = fake_run()
    table, _ = summary.summarize(results, run, meta["cases"])
    lines = report.verdict(table, {side.name: side.label for side in run})
    assert [line.split(":")[0] for line in lines] == [
        "greedy patched/stock time per token, trained pair",
        "assisted patched/stock time per token",
        "assisted patched/best peer time per token",
        "assisted/greedy time per token, poor draft",
        "assisted patched/best constant draft length",
        "assisted/greedy time per token, distil-whisper shape, shared encoder",
        "assisted/greedy time per token, distil-whisper shape, own encoder",
    ]
    # the distil-whisper-shaped cases did not run: their lines say so, with their targets
    assert lines[5].endswith(": n/a (target <= 0.893; whisper-shared did not run on the patched side)")
    assert lines[6].endswith(": n/a (target <= 1.10; whisper-own did not run on the patched side)")
    assert lines[2].startswith(
        f"assisted patched/best peer time per token: {2.7 / 2.4:.3f} (best peer: upstream 5.23.0 eager"
    )
    assert lines[3].startswith("assisted/greedy time per token, poor draft: 2.50 (partial, the worst of ")
    assert lines[4].startswith(
        f"assisted patched/best constant draft length: {2.7 / 2.55:.3f} (trained, best constant: patched k=2; the "
        "worst of trained, encdec; median of 3 runs"
    )
    # without constant draft lengths the line says so, and stays the fifth
    plain = [r for r in results if not r["side"].startswith("patched-k")]
    table, _ = summary.summarize(plain, run, meta["cases"])
    assert report.verdict(table, {})[4].startswith("assisted patched/best constant draft length: n/a")
    assert report.speedup_line(table).startswith("assisted speedup over greedy, trained draft: 2.22 ")


# ---- sampling


def test_the_sampling_cases_run_plain_sampling_the_431_rule_and_speculative_sampling():
    run = sides.run_sides(list(peers.PEERS), constant=[1, 2])
    for name in ("sampling-t1.0", "sampling-t0.7"):
        case = workloads.CASES[name]
        assert case.sampling and case.pair == "trained-sampling" and case.tokens == 128
        assert sides.case_sides(case, run) == ["stock", "5.23.0", "patched"]
        assert sides.reference_sides(case, run) == ["patched"]  # plain sampling, patched alone
        assert case.reference_method == "sample"
    assert workloads.CASES["sampling-t0.7"].greedy_key(False) == ("trained", 128, 0.7)
    assert workloads.greedy_name(("trained", 128, 0.7)) == "sample:trained:128:t0.7"
    assert workloads.CASES["sampling-t0.7-greedy-draft"].greedy_key(False) == ("trained", 128, 0.7)
    # greedy cases keep their references: stock and patched
    assert sides.reference_sides(workloads.CASES["trained"], run) == ["stock", "patched"]
    assert workloads.PAIRS["trained-sampling"].greedy == "trained"
    assert workloads.sampling_seed(0) != workloads.sampling_seed(1)


def test_sampling_runs_are_seeded_and_generate_what_was_asked():
    worker = make_worker()
    first = worker.run("loop", "sample", 24, temperature=0.7, seed=5)
    again = worker.run("loop", "sample", 24, temperature=0.7, seed=5)
    other = worker.run("loop", "sample", 24, temperature=0.7, seed=6)
    assert first["output_sha"] == again["output_sha"] != other["output_sha"]
    assert first["new_tokens"] == 24 and first["target_calls"] == 24 and first["proposed"] == 0
    assert first["temperature"] == 0.7 and first["seed"] == 5
    assisted = worker.run("loop", "assisted", 24, temperature=0.7, seed=5)
    assert "failed" not in assisted and assisted["new_tokens"] == 24
    assert assisted["output_sha"] == worker.run("loop", "assisted", 24, temperature=0.7, seed=5)["output_sha"]
    assert worker.run("loop", "greedy", 24)["temperature"] is None


def sampling_results(short=False):
    results = []
    for rep in range(3):
        results.append(result("sample:trained:128:t0.7", "patched", rep, 8.0, "sample", new_tokens=128, rounds=128))
        for side, per_token, calls in (("stock", 10.0, 100), ("5.23.0", 9.0, 64), ("patched", 5.0, 25)):
            new_tokens = 120 if short and side == "stock" else 128
            results.append(
                result("sampling-t0.7", side, rep, per_token, output_sha=f"{side}{rep}", new_tokens=new_tokens)
                | {"target_calls": calls, "rounds": calls}
            )
    return results


def test_sampling_rows_check_lengths_not_tokens_and_count_tokens_per_target_forward():
    run = sides.run_sides(["5.23.0"])
    table, _ = summary.summarize(sampling_results(), run, ["sampling-t0.7"])
    row = table["sampling-t0.7"]
    assert row["sampling"] == 0.7 and row["noise"] is None
    assert row["same_tokens"] is None and row["lengths_ok"]
    assert row["reference"]["per_token"] == 8.0 and row["reference"]["tokens_per_forward"] == 1.0
    assert row["side"]["patched"]["tokens_per_forward"] == pytest.approx(128 / 25)
    assert row["speedup"]["patched"] == pytest.approx((1.6, 1.6, 1.6))
    table, _ = summary.summarize(sampling_results(short=True), run, ["sampling-t0.7"])
    assert not table["sampling-t0.7"]["lengths_ok"]


def test_the_report_gives_sampling_a_section_of_its_own():
    results, run, meta, info = fake_run()
    results += sampling_results()
    meta["cases"] = meta["cases"] + ["sampling-t0.7"]
    table, growth = summary.summarize(results, run, meta["cases"])
    text = report.report(meta, info, run, table, growth, [], results)
    results_part, sampling_part = text.split("## Sampling")
    assert "| sampling-t0.7 |" not in results_part
    assert "| sampling-t0.7 | 0.7 | 8000.00 | 10000.00 (0.80x) | 9000.00 (0.89x) | 5000.00 (1.60x) |" in sampling_part
    assert "speculative sampling (patched) is faster than plain sampling: 1.60 (1.60-1.60) times" in sampling_part
    assert "| sampling-t0.7 | distilled on the target's distributions | 1.00 | 1.28 (75%) |" in sampling_part
    assert "stock 4.31.0 (the 4.31 rule)" in sampling_part and "patched (speculative sampling)" in sampling_part
    lines = report.sampling_text(table, run)
    assert lines[-1].startswith("sampling-t0.7") and "plain/patched 1.60" in lines[-1] and "lengths ok" in lines[-1]


def test_the_sampling_draft_has_its_own_key_and_learns_the_targets_distributions():
    import torch

    assert train.sampling_key() != train.key()
    assert train.SAMPLING_SETTINGS["draft"] == train.SETTINGS["draft"]
    assert train.sampling_dir().parent == train.model_dir().parent
    torch.manual_seed(0)
    target = train.gpt2({"n_layer": 1, "n_embd": 16, "n_head": 2}).eval()
    other = train.gpt2({"n_layer": 1, "n_embd": 16, "n_head": 2})
    input_ids = torch.randint(0, 256, (2, 8))
    objective = train.distribution_loss(target, 1.0)
    assert objective(target, input_ids).item() == pytest.approx(0.0, abs=1e-6)
    assert objective(other, input_ids).item() > 0


# ---- batched speech recognition


def test_the_asr_case_is_measured_apart_with_a_tokenizer_built_here():
    case = workloads.CASES["asr-batch"]
    assert case.kind == "asr" and case.pair == "whisper" and case.group not in workloads.GROUPS
    assert all(c.kind in ("generate", "real") for name, c in workloads.CASES.items() if name != "asr-batch")
    tokenizer = workloads.asr_tokenizer()
    assert len(tokenizer) == 256 + len(workloads.ASR_SPECIAL_TOKENS)
    assert tokenizer.convert_tokens_to_ids("<|notimestamps|>") == len(tokenizer) - 1
    ids = tokenizer("def f(x): return 'é'", add_special_tokens=False).input_ids
    assert max(ids) < 256 and tokenizer.decode(ids) == "def f(x): return 'é'"
    audio = workloads.asr_audio(4)
    assert [len(row) for row in audio] == [int(s * 16000) for s in workloads.ASR_SECONDS]
    assert (audio[0] == workloads.asr_audio(1)[0]).all()
    # every batch size transcribes the same recordings, enough to fill the largest batch once
    assert workloads.ASR_BATCH_SIZES == (1, 4, 8) and workloads.ASR_RECORDINGS == max(workloads.ASR_BATCH_SIZES)
    recordings = workloads.asr_audio(workloads.ASR_RECORDINGS)
    assert len({len(row) for row in recordings}) == len(workloads.ASR_SECONDS)
    assert all((first == again).all() for first, again in zip(audio, recordings[:4], strict=True))
    assert workloads.ASR_LARGEST_TARGET[0] == max(workloads.ASR_BATCH_SIZES)
    # two pairs, any pair first, then the one that agrees; the second with tokens and repetitions of its own
    assert list(workloads.ASR_WORKLOADS) == [workloads.ASR_ANY_PAIR, workloads.ASR_AGREEING_PAIR]
    assert workloads.ASR_ANY_PAIR == "whisper" and workloads.ASR_AGREEING_PAIR == "whisper-shared"
    assert all(name in workloads.PAIRS for name in workloads.ASR_WORKLOADS)
    whisper, shared = workloads.ASR_WORKLOADS.values()
    assert (whisper.new_tokens(False), whisper.new_tokens(True)) == (case.tokens, case.quick_tokens)
    assert (shared.new_tokens(False), shared.new_tokens(True)) == (64, 32)
    assert all(way.reps in measure.FULL and way.reps in measure.QUICK for way in workloads.ASR_WORKLOADS.values())
    # one vocabulary for both pairs: the tokenizer's, every special token where the configs put it
    shapes = [(workloads.ASR_TARGET, 2), (workloads.ASR_ASSISTANT, 2)]
    shapes += [(workloads.DISTIL_TARGET, workloads.DISTIL_HEADS), (workloads.DISTIL_ASSISTANT, workloads.DISTIL_HEADS)]
    for shape, heads in shapes:
        config = workloads._whisper_config(shape, heads)
        assert config.vocab_size == len(tokenizer) and config.num_mel_bins == 80
        assert config.decoder_start_token_id == tokenizer.convert_tokens_to_ids("<|startoftranscript|>")
        assert config.eos_token_id == config.pad_token_id == tokenizer.pad_token_id


def test_the_asr_worker_transcribes_a_batch_or_reports_what_the_pipeline_raised():
    worker = make_worker()
    largest = max(workloads.ASR_BATCH_SIZES)
    greedy = worker.asr("greedy", 2, largest)
    assert "failed" not in greedy, greedy
    assert greedy["workload"] == "whisper"
    assert len(greedy["texts"]) == workloads.ASR_RECORDINGS and greedy["target_calls"] == 2
    # the tokens generate returned, a row per recording: the decoder start token and the 2 new tokens
    assert len(greedy["tokens"]) == workloads.ASR_RECORDINGS and {len(row) for row in greedy["tokens"]} == {3}
    assert "generate" not in vars(worker.loaded["whisper"][0])  # the recording wrapper is gone
    assisted = worker.asr("assisted", 2, largest)
    if "failed" not in assisted:  # the fork's pipeline takes the assistant with a batch
        assert assisted["texts"] == greedy["texts"] and assisted["tokens"] == greedy["tokens"]
        # the fork's account of the call's one batch
        assert greedy["decoding_stats"] is None and len(assisted["decoding_stats"]) == 1
    else:
        assert assisted["failed"].split(":")[0] in ("refuses", "fails")


def test_the_asr_worker_runs_the_agreeing_pair_with_a_pipeline_of_its_own():
    # A worker that never built the whisper pair: the pipeline's parts are built for the pair asked for.
    worker = make_worker(draft=DraftLength.defaults())
    largest = max(workloads.ASR_BATCH_SIZES)
    greedy = worker.asr("greedy", 3, largest, "whisper-shared")
    assert "failed" not in greedy, greedy
    assert "whisper" not in worker.loaded and set(worker.asr_pipelines) == {"whisper-shared"}
    target = worker.loaded["whisper-shared"][0]
    assert worker.asr_pipelines["whisper-shared"].model is target
    assert greedy["workload"] == "whisper-shared" and greedy["target_calls"] == 3
    assert len(greedy["tokens"]) == workloads.ASR_RECORDINGS and {len(row) for row in greedy["tokens"]} == {4}
    assisted = worker.asr("assisted", 3, largest, "whisper-shared")
    if "failed" in assisted:
        assert assisted["failed"].split(":")[0] in ("refuses", "fails")
        return
    # the assistant computes the target's function: greedy's tokens, every candidate drafted accepted
    assert assisted["tokens"] == greedy["tokens"] and assisted["texts"] == greedy["texts"]
    (stats,) = assisted["decoding_stats"] or [None]
    if stats is not None:  # the fork's account
        assert stats["num_drafted"] > 0 and stats["num_accepted"] == stats["num_drafted"]
        assert assisted["target_calls"] == stats["num_rounds"] < greedy["target_calls"]
    # the whisper pair gets a pipeline of its own, over the same parts
    parts = worker.builder.cache["whisper-parts"]
    assert "failed" not in worker.asr("greedy", 1, largest)
    assert worker.asr_pipelines["whisper"].model is worker.loaded["whisper"][0]
    assert worker.builder.cache["whisper-parts"] is parts
    assert worker.asr_pipelines["whisper"].tokenizer is worker.asr_pipelines["whisper-shared"].tokenizer


def asr_results(skipped=False, sizes=(1, 4, 8), ratios=None, tokens=None, workload=None, reps=2):
    """The results of an asr-batch run of one pair (`workload`, None: a run that did not record it, the whisper
    pair): greedy at 1.0 s per row, assisted at `ratios[size]` (0.5) times it."""
    results = [
        {"phase": "asr-probe", "side": "stock", "method": "assisted", "failed": "refuses: ValueError: batch_size = 1"},
        {"phase": "asr-probe", "side": "5.23.0", "method": "assisted", "target_calls": 4, "assistant_calls": 0}
        | {"max_new_tokens": 4, "texts": ["a"] * 8},
    ]
    if skipped:
        return results
    ratios = ratios or {}
    for rep in range(reps):
        for size in sizes:
            batches = 8 // size
            for method, calls in (("greedy", 32 * batches), ("assisted", 12 * batches)):
                per_row = 1.0 if method == "greedy" else ratios.get(size, 0.5) * (1 + rep / 10)
                rows = [[1, 2, 3]] * 8 if tokens is None or method == "greedy" else tokens(size, rep)
                # the fork's account of each batch: at batch 8 it stopped drafting
                stop = f"stopped after {rep + 3} rounds" if size == 8 else None
                stats = {"schedule": "adaptive", "num_rounds": 12, "num_drafted": 30, "num_accepted": 20}
                results.append(
                    {"phase": "asr", "side": "patched", "method": method, "rep": rep, "per_row": per_row}
                    | {"target_calls": calls, "assistant_calls": 40 if method == "assisted" else 0, "texts": ["t"] * 8}
                    | {"rows": 8, "batch_size": size, "max_new_tokens": 32, "tokens": rows}
                    | {"decoding_stats": [stats | {"stop_reason": stop}] * batches if method == "assisted" else None}
                    | ({"workload": workload} if workload else {})
                )
    return results


def two_pair_run(shared_ratios=None, **whisper):
    """(meta, results) of an asr-batch run of both pairs: the whisper pair as `asr_results(**whisper)`, two
    repetitions of 32 tokens; the agreeing pair one repetition of 32 tokens, assisted at `shared_ratios[size]` (0.8)
    times greedy's time, every candidate accepted."""
    pairs = {"whisper": {"tokens": 32, "reps": 2}, "whisper-shared": {"tokens": 32, "reps": 1}}
    meta = {"asr": {"case": "asr-batch", "sizes": [1, 4, 8], "recordings": 8, "pairs": pairs}}
    shared = asr_results(ratios={1: 0.8, 4: 0.8, 8: 0.8} | (shared_ratios or {}), workload="whisper-shared", reps=1)
    for result in shared[2:]:
        if result["decoding_stats"]:
            result["decoding_stats"] = [
                {"schedule": "adaptive", "num_rounds": 4, "num_drafted": 28, "num_accepted": 28, "stop_reason": None}
            ] * len(result["decoding_stats"])
    return meta, asr_results(workload="whisper", **whisper) + shared[2:]


def test_the_asr_summary_pairs_the_methods_at_every_batch_size():
    table, probes = summary.summarize_asr(asr_results(ratios={8: 0.9}))
    assert list(table) == [1, 4, 8] and set(probes) == {"stock", "5.23.0"}
    assert table[4]["ratio"] == pytest.approx((0.525, 0.5, 0.55)) and table[8]["ratio"][0] == pytest.approx(0.945)
    row = table[1]
    assert row["same_texts"] and row["same_tokens"] and row["stable"] and row["reps"] == 2 and row["rows"] == 8
    assert row["method"]["greedy"]["target_calls"] == 256
    assert row["method"]["assisted"]["per_token"] == pytest.approx(0.525 / 32)
    # the fork's account, summed over the call's batches
    assert row["method"]["assisted"]["decoding_stats"] == {
        "batches": 8,
        "schedule": "adaptive",
        "rounds": 96,
        "drafted": 240,
        "accepted": 160,
        "reasons": [],
    }
    assert table[8]["method"]["assisted"]["decoding_stats"]["reasons"] == ["stopped after 3 rounds"]
    assert row["method"]["greedy"]["decoding_stats"] is None
    # other tokens than greedy's at batch 4; other tokens from one repetition to the next at batch 8
    other = summary.summarize_asr(asr_results(tokens=lambda size, rep: [[1, 2, 4 if size == 4 else 3]] * 8))[0]
    assert other[4]["same_tokens"] is False and other[4]["same_texts"] and other[1]["same_tokens"]
    flaky = summary.summarize_asr(asr_results(tokens=lambda size, rep: [[1, 2, 3 + rep * (size == 8)]] * 8))[0]
    assert not flaky[8]["stable"] and flaky[4]["stable"]
    # a run before the tokens were recorded: the texts alone
    results = asr_results()
    for result in results:
        result.pop("tokens", None)
    assert summary.summarize_asr(results)[0][8]["same_tokens"] is None
    # a size without both methods' runs has no row
    results = [r for r in asr_results() if not (r.get("batch_size") == 4 and r["method"] == "assisted")]
    assert list(summary.summarize_asr(results)[0]) == [1, 8]
    # two pairs: each its own table, the runs of one never paired with the other's
    _, results = two_pair_run()
    whisper, shared = (summary.summarize_asr(results, name)[0] for name in ("whisper", "whisper-shared"))
    assert whisper[8]["ratio"] == pytest.approx((0.525, 0.5, 0.55)) and whisper[8]["reps"] == 2
    assert shared[8]["ratio"] == pytest.approx((0.8, 0.8, 0.8)) and shared[8]["reps"] == 1
    assert shared[8]["method"]["assisted"]["decoding_stats"]["accepted"] == 28
    assert summary.summarize_asr(results)[0] == whisper


def test_the_asr_section_reports_every_size_or_why_it_was_skipped_and_what_the_others_did():
    run = sides.run_sides(["5.23.0"])
    meta = {"asr": {"case": "asr-batch", "tokens": 32, "sizes": [1, 4, 8], "recordings": 8, "reps": 2}}
    text = "\n".join(report.asr_section(meta, run, asr_results()))
    assert "transcribes the same 8 synthetic recordings (2, 3, 2.5, 3.5, 2, 3, 2.5, 3.5 s" in text
    assert "| 1 | 8 | 32 | 1000.0 | **525.0** | 0.525 (0.500-0.550) | 256 / 96 | 40 | yes, yes | yes |" in text
    assert "| 8 | 1 | 32 | 1000.0 | **525.0** | 0.525 (0.500-0.550) | 32 / 12 | 40 | yes, yes | yes |" in text
    assert (
        "- speech recognition pipeline assisted/greedy time per row, whisper pair, batch_size 1/4/8: 0.525, 0.525, "
        "0.525" in text
    )
    assert "stock 4.31.0: **refuses** (`ValueError: batch_size = 1`)" in text
    assert "asked once each for a batch of 8 of the whisper pair with the assistant" in text
    assert "upstream 5.23.0: **ran it without the assistant** (4 target forwards and 0 assistant forwards" in text
    assert (
        "summed over a call's batches): schedule `adaptive`, rounds/drafted/accepted per call B=1 96/240/160, "
        "B=4 24/60/40, B=8 12/30/20; drafted nothing or stopped drafting because: stopped after 3 rounds." in text
    )
    printed = report.asr_text(meta, asr_results())
    assert printed[1].startswith("asr-batch, whisper (8 recordings, 32 tokens per row, patched, 2 reps)")
    assert printed[2] == "  B=1: 1000.0 / 525.0, 0.525 (0.500-0.550), 256 / 96, 40, yes, yes, yes"
    assert printed[5].startswith("asr-batch, whisper, the fork's account of its assisted calls: schedule `adaptive`")
    assert printed[-1].startswith("asr-batch, other versions: stock: refuses")
    # a size whose calls failed: said so in its row
    failed = [r for r in asr_results() if not (r.get("batch_size") == 4 and r["method"] == "assisted")]
    failed.append(
        {"phase": "asr", "side": "patched", "method": "assisted", "rep": 0, "batch_size": 4} | {"failed": "fails: E"}
    )
    text = "\n".join(report.asr_section(meta, run, failed))
    assert "| 4 | - | - | - | - | n/a (assisted: fails: E) | | | | |" in text
    assert "  B=4: n/a (assisted: fails: E)" in report.asr_text(meta, failed)
    meta["asr"]["skipped"] = "assisted: fails: RuntimeError: dtypes"
    text = "\n".join(report.asr_section(meta, run, asr_results(skipped=True)))
    assert "**Skipped in this run**: on the patched fork the pipeline raised (assisted: fails: RuntimeError" in text
    assert report.asr_text(meta, asr_results(skipped=True))[1].startswith(
        "asr-batch, whisper: skipped (patched: assisted"
    )
    each, largest = report.asr_lines(meta, asr_results(skipped=True))
    assert each.endswith(
        "whisper pair, batch_size 1/4/8: n/a (target <= 1.05 at each; skipped: assisted: fails: "
        "RuntimeError: dtypes)"
    )
    assert largest.endswith(
        "distil-whisper-shaped pair sharing the encoder, batch_size 8: n/a (target < 1.00; skipped: assisted: fails: "
        "RuntimeError: dtypes)"
    )
    assert report.asr_section({"asr": None}, run, []) == [] and report.asr_lines({"asr": None}, []) == []
    # a run of one batch size (before several were measured)
    old = {"asr": {"case": "asr-batch", "tokens": 32, "batch_size": 4, "reps": 2}}
    assert "| 4 | 2 | 32 | 1000.0 |" in "\n".join(report.asr_section(old, run, asr_results(sizes=(4,))))


def test_the_asr_section_has_a_table_per_pair_and_a_pair_that_failed_says_why():
    run = sides.run_sides(["5.23.0"])
    meta, results = two_pair_run()
    text = "\n".join(report.asr_section(meta, run, results))
    assert "with the whisper pair and the distil-whisper-shaped pair sharing the encoder." in text
    assert "**The whisper pair** (`whisper`): random Whisper (1+4 layers, 128 wide)" in text
    assert "**The distil-whisper-shaped pair sharing the encoder** (`whisper-shared`): distil-whisper-shaped" in text
    assert "32 new tokens per row, 2 repetitions." in text and "32 new tokens per row, 1 repetition." in text
    assert "| 8 | 1 | 32 | 1000.0 | **525.0** | 0.525 (0.500-0.550) | 32 / 12 | 40 | yes, yes | yes |" in text
    assert "| 8 | 1 | 32 | 1000.0 | **800.0** | 0.800 (0.800-0.800) | 32 / 12 | 40 | yes, yes | yes |" in text
    assert "B=1 32/224/224, B=4 8/56/56, B=8 4/28/28; no batch stopped drafting." in text
    assert text.count("- speech recognition pipeline assisted/greedy time per row") == 2
    printed = report.asr_text(meta, results)
    assert printed[1].startswith("asr-batch, whisper (8 recordings, 32 tokens per row, patched, 2 reps)")
    assert printed[6].startswith("asr-batch, whisper-shared (8 recordings, 32 tokens per row, patched, 1 rep)")
    assert printed[9] == "  B=8: 1000.0 / 800.0, 0.800 (0.800-0.800), 32 / 12, 40, yes, yes, yes"
    # the agreeing pair's warm-up failed: skipped, the whisper pair reported all the same
    meta["asr"]["pairs"]["whisper-shared"]["skipped"] = "assisted: fails: E"
    whisper_only = [r for r in results if r.get("workload") != "whisper-shared"]
    text = "\n".join(report.asr_section(meta, run, whisper_only))
    assert "| 8 | 1 | 32 | 1000.0 | **525.0** |" in text
    assert "**Skipped in this run**: on the patched fork the pipeline raised (assisted: fails: E)" in text
    assert "asr-batch, whisper-shared: skipped (patched: assisted: fails: E)" in report.asr_text(meta, whisper_only)
    each, largest = report.asr_lines(meta, whisper_only)
    assert ": met (" in each
    assert largest.endswith("batch_size 8: n/a (target < 1.00; skipped: assisted: fails: E)")


def test_the_asr_closing_lines_judge_the_whisper_pair_at_each_size_and_the_agreeing_pair_at_8():
    meta, results = two_pair_run(ratios={1: 1.0, 8: 0.9})
    each, largest = report.asr_lines(meta, results)
    assert each == (
        "speech recognition pipeline assisted/greedy time per row, whisper pair, batch_size 1/4/8: 1.050, 0.525, "
        "0.945, target <= 1.05 at each: met (patched, medians of 2 paired runs, spreads 1.000-1.100, 0.500-0.550, "
        "0.900-0.990; the same tokens as greedy: yes, yes, yes; 8 recordings, 32 new tokens per row; the fork's "
        "record: B=1 96 rounds, 240 candidates drafted, 160 accepted; B=4 24 rounds, 60 candidates drafted, 40 "
        "accepted; B=8 12 rounds, 30 candidates drafted, 20 accepted)"
    )
    assert largest == (
        "speech recognition pipeline assisted/greedy time per row, distil-whisper-shaped pair sharing the encoder, "
        "batch_size 8: 0.800, target < 1.00: met (patched, median of 1 paired run, spread 0.800-0.800; 2.67 new "
        "tokens per row and target forward, 12 target forwards against greedy's 32, 40 assistant forwards; the "
        "fork's record: 4 rounds, 28 candidates drafted, 28 accepted; the same tokens as greedy: yes; 8 recordings, "
        "32 new tokens per row)"
    )
    # the whisper pair slower than the target at one size; the agreeing pair no faster at 8
    meta, results = two_pair_run(shared_ratios={8: 1.0}, ratios={1: 1.1})
    each, largest = report.asr_lines(meta, results)
    assert "1.155, 0.525, 0.525, target <= 1.05 at each: NOT met" in each
    assert "batch_size 8: 1.000, target < 1.00: NOT met" in largest
    # faster, but not greedy's tokens: no speedup
    meta, results = two_pair_run(tokens=lambda size, rep: [[1, 2, 4 if size == 8 else 3]] * 8)
    each, _ = report.asr_lines(meta, results)
    assert "target <= 1.05 at each: NOT met" in each and "the same tokens as greedy: yes, yes, NO" in each
    for result in results:
        if result.get("workload") == "whisper-shared" and result["method"] == "assisted" and result["batch_size"] == 8:
            result["tokens"] = [[1, 2, 4]] * 8
    assert "target < 1.00: NOT met" in report.asr_lines(meta, results)[1]
    # faster at batch 8 without a single assistant forward: the machine's noise, no speedup
    meta, results = two_pair_run()
    for result in results:
        if result.get("workload") == "whisper-shared" and result["method"] == "assisted":
            result["assistant_calls"], result["decoding_stats"] = 0, None
    largest = report.asr_lines(meta, results)[1]
    assert "batch_size 8: 0.800, target < 1.00: NOT met" in largest
    assert "(no assistant forward: no speedup, whatever the ratio)" in largest and "the fork's record" not in largest
    # a size that did not run: n/a, and the target at each size not met
    meta, results = two_pair_run()
    results = [r for r in results if r.get("batch_size") != 8]
    each, largest = report.asr_lines(meta, results)
    assert "batch_size 1/4/8: 0.525, 0.525, n/a, target <= 1.05 at each: NOT met" in each
    assert largest.endswith("batch_size 8: n/a (target < 1.00; batch_size 8 did not run: no paired runs)")
    # a run before the second pair: the whisper pair judged as before, the agreeing pair n/a
    old = {"asr": {"case": "asr-batch", "tokens": 32, "sizes": [1, 4, 8], "recordings": 8, "reps": 2}}
    each, largest = report.asr_lines(old, asr_results(ratios={8: 0.9}))
    assert "whisper pair, batch_size 1/4/8: 0.525, 0.525, 0.945, target <= 1.05 at each: met" in each
    assert largest == (
        "speech recognition pipeline assisted/greedy time per row, distil-whisper-shaped pair sharing the encoder, "
        "batch_size 8: n/a (target < 1.00; skipped: not part of this run)"
    )
    assert "**The distil-whisper-shaped pair" not in "\n".join(report.asr_section(old, [], asr_results()))


def test_the_asr_table_warms_up_and_interleaves_both_pairs_with_their_own_tokens_and_repetitions():
    asked = []

    class Worker:
        def ask(self, command):
            asked.append(command)
            if command["workload"] == "whisper-shared" and fail_shared:
                return {"method": command["method"], "failed": "fails: E"}
            return {"method": command["method"], "per_row": 0.1, "target_calls": 1}

    bench = object.__new__(measure.Bench)
    bench.cases, bench.quick, bench.plan, bench.start = ["asr-batch"], False, measure.FULL, 0.0
    bench.main_sides, bench.results = ["stock", "patched"], []
    bench.environments = {"stock": "stock", "patched": "patched"}
    bench.workers = {"stock": Worker(), "patched": Worker()}
    fail_shared = False
    bench.asr_table()
    pairs = bench.asr_meta["pairs"]
    assert pairs == {"whisper": {"tokens": 128, "reps": 3}, "whisper-shared": {"tokens": 64, "reps": 1}}
    calls = [(c["workload"], c["method"], c["batch_size"], c["max_new_tokens"]) for c in asked]
    # the stock side asked once, the whisper pair; a warm-up per pair and method at batch 8
    assert calls[0] == ("whisper", "assisted", 8, 8) and bench.results[0]["phase"] == "asr-probe"
    assert calls[1:5] == [(name, method, 8, 8) for name in pairs for method in ("greedy", "assisted")]
    measured = [(r["rep"], r["workload"], r["batch_size"], r["method"]) for r in bench.results if r["phase"] == "asr"]
    assert measured[:12] == [
        (0, name, size, method) for name in pairs for size in (1, 4, 8) for method in ("greedy", "assisted")
    ]
    # the second repetition: the whisper pair alone, the methods the other way round
    assert measured[12:18] == [(1, "whisper", size, method) for size in (1, 4, 8) for method in ("assisted", "greedy")]
    assert len(measured) == 6 * 3 + 6 and {c[3] for c in calls[5:] if c[0] == "whisper-shared"} == {64}
    assert all(r["case"] == f"asr:{r['workload']}:{r['method']}:{r['batch_size']}" for r in bench.results)
    # the agreeing pair's warm-up fails: that pair skipped, the whisper pair measured all the same
    asked.clear()
    fail_shared = True
    bench.results = []
    bench.asr_table()
    assert bench.asr_meta["pairs"]["whisper-shared"]["skipped"] == "greedy: fails: E"
    assert {r["workload"] for r in bench.results if r["phase"] == "asr"} == {"whisper"}
    assert len([r for r in bench.results if r["phase"] == "asr"]) == 18


# ---- the batch table


def batch_results():
    """Two repetitions of the batch table at B=1 and B=4, made up: rows of their own run 10 rounds at B=4 where aligned
    rows run 16 and the slowest prompt alone 9, and are 1.5 times as fast as aligned rows and batched greedy search
    (ms per token)."""
    results = [{"phase": "batch-probe", "side": "stock", "case": "batch:batched-assisted:4", "failed": "refuses: X"}]
    figures = {  # name: (time per token, rounds of a call at B=1, at B=4, the most of one call at B=4)
        "batched-assisted": (1.0, 9, 10, 10),
        "aligned-assisted": (1.5, 9, 16, 16),
        "batched-greedy": (1.5, 16, 16, 16),
        "separate-assisted": (2.0, 9, 32, 9),
        "separate-greedy": (3.0, 16, 64, 16),
    }
    for rep in range(2):
        for size in (1, 4):
            for name, (per_token, rounds_one, rounds, rounds_max) in figures.items():
                way = workloads.BATCH_METHODS[name]
                calls = size if way.separate else 1
                rounds, rounds_max = (rounds_one, rounds_one) if size == 1 else (rounds, rounds_max)
                if size == 1 and way.aligned:
                    per_token = figures["batched-assisted"][0]  # one row: the same call
                new_tokens = 16 * calls
                assisted = way.method == "assisted"
                results.append(
                    {"phase": "batch", "side": "patched", "rep": rep, "case": f"batch:{name}:{size}"}
                    | {"method": way.method, "separate": way.separate, "aligned_rows": way.aligned, "calls": calls}
                    | {"per_token": per_token * 1e-3, "wall_per_token": per_token * 1e-3, "max_new_tokens": 16}
                    | {"new_tokens": new_tokens, "rounds": rounds, "rounds_max": rounds_max, "batch_size": size}
                    | {"accepted": new_tokens - rounds if assisted else 0, "proposed": 40 if assisted else 0}
                    | {"rows": [[7] * 16] * size, "prompt_lengths": [64, 40, 56, 32][:size], "time": 1.0, "wall": 1.0}
                )
    return results


def test_the_batch_table_has_rows_of_their_own_beside_aligned_rows():
    # Every way of the table goes to the worker with its switches; the aligned rows are assisted, batched, aligned.
    assert workloads.BATCH_METHODS["aligned-assisted"] == workloads.BatchMethod("assisted", aligned=True)
    assert not workloads.BATCH_METHODS["batched-assisted"].aligned
    table, probes = summary.summarize_batch(batch_results(), [1, 4])
    assert list(table) == [1, 4] and list(probes) == ["stock"]
    row = table[4]
    assert row["holes_over_aligned"][0] == pytest.approx(1.5) and row["assisted_over_greedy"][0] == pytest.approx(1.5)
    assert row["holes_slowdown"][0] == pytest.approx(1 / 1.5) and row["aligned_same"] and row["batched_same"]
    assert row["forwards_over_slowest"] == pytest.approx(10 / 9)
    assert row["aligned_forwards_over_slowest"] == pytest.approx(16 / 9)
    assert row["method"]["separate-assisted"]["rounds"] == 8 and row["method"]["separate-assisted"]["rounds_max"] == 9
    # a size where one way did not run is left out (a run saved before the aligned rows had a way of their own)
    older = [r for r in batch_results() if not r["case"].startswith("batch:aligned-assisted:4")]
    assert list(summary.summarize_batch(older, [1, 4])[0]) == [1]

    printed = report.batch_text(table)
    assert "aligned tok/s" in printed[0] and "slowest alone" in printed[0]
    assert printed[2].split()[:9] == ["4", "667", "1000", "667", "500", "1.50x", "1.50x", "10", "16"]
    assert printed[2].endswith("yes")

    meta = {"batch": {"sizes": [1, 4, 8], "tokens": 16, "reps": 2}}
    lines = report.batch_lines(meta, batch_results())
    assert [line.split(":")[0] for line in lines] == [
        "batched assisted/batched greedy time per token, B=8",
        "rows of their own/aligned time per token, B=4",
        "target forwards/slowest row alone, B=4",
    ]
    assert lines[0].endswith("n/a (target < 1.00; B=8 did not run)")
    assert lines[1].startswith(
        "rows of their own/aligned time per token, B=4: 0.667 (0.667-0.667), target <= 1/1.20 = 0.833: met"
    )
    assert lines[2].startswith("target forwards/slowest row alone, B=4: 1.11 (adaptive draft length; the bound 1.10")
    assert "aligned rows: 1.78" in lines[2] and "B=8 did not run" in lines[2]
    assert report.batch_lines({"batch": None}, []) == []


def test_the_batch_calls_let_the_rows_keep_their_own_unless_told_to_keep_them_aligned():
    # A stopping criterion of a class of its own (the round timestamps) would keep every batch aligned: the batch
    # calls run without it, and the aligned ones set the switch on the target for the call only.
    worker = make_worker()
    target = worker.workload("loop")[0]
    prompts = [list(range(5, 5 + length)) for length in (12, 7, 10, 4)]
    greedy = worker.batch("loop", "greedy", 24, prompts)
    own = worker.batch("loop", "assisted", 24, prompts)
    if "failed" in own:  # stock 4.31.0 refuses assisted generation of a batch
        assert own["failed"].startswith("refuses")
        return
    aligned = worker.batch("loop", "assisted", 24, prompts, aligned_rows=True)
    separate = worker.batch("loop", "assisted", 24, prompts, separate=True)
    assert "_supports_rows_with_holes" not in target.__dict__
    assert own["rows"] == aligned["rows"] == greedy["rows"]
    assert not own["aligned_rows"] and aligned["aligned_rows"]
    assert own["rounds"] == own["rounds_max"] and separate["rounds_max"] < separate["rounds"]
    supports = getattr(target, "_supports_rows_with_holes", None)
    if callable(supports) and supports(64):  # the fork: this pair's rows keep their own, in fewer rounds
        assert own["rounds"] < aligned["rounds"]
    # without its round timestamps a call is one round, its forwards counted all the same
    alone = worker.run("loop", "assisted", 24, time_rounds=False)
    assert alone["rounds"] == 1 and alone["new_tokens"] == 24 and alone["target_calls"] > 1


def test_the_batch_section_says_what_rows_of_their_own_and_aligned_rows_do():
    meta = {
        "batch": {"sizes": [1, 4], "tokens": 16, "reps": 2, "prompt_lengths": [64, 40, 56, 32], "seconds": 60.0}
        | {"load_start": "1.0", "load_end": "1.0", "load_peak": 1.0},
        "machine": {"cpu": "cpu", "cores": 2, "platform": "linux"},
        "quick": True,
        "patches": 67,
    }
    info = {
        "patched": {"clock": "cpu", "transformers_file": str(REPO / "build" / "transformers" / "src"), "torch": "2"}
        | {"python": "3.11.7", "transformers": "4.31.0", "device_name": "cpu", "dtype": "float32", "threads": 1}
    }
    text = "\n".join(report.batch_section(meta, info, [], batch_results()))
    assert "- *aligned assisted*: the same call with the rows kept aligned by a switch private to the bench" in text
    assert "the trained pair is GPT-2" in text and "not shipped" not in text
    assert "| 4 | 64, 40, 56, 32 | 667 (1.500) | **1000 (1.000)** | 667 (1.500) | 500 (2.000) |" in text
    assert (
        "| 4 | 15% (6/40) | 0% (0/40) | 80% (32/40) | 1.60 | 1.00 | 2.00 | 10 | 16 | 9 | 8.0 | 1.11x | 1.78x |" in text
    )
    assert "(aligned acceptance is 0% at B=4, where the same prompts one at a time keep 80%)" in text
    assert "rows of their own over aligned rows (time per token, aligned over own): 1.00 (1.00-1.00)x at B=1" in text
    assert "target forwards over the slowest row alone, rows of their own and aligned: 1.11x and 1.78x at B=4" in text
    assert "Every batched assisted run, rows of their own or aligned, returned exactly batched greedy" in text


def batch_eos_results(sizes=(4, 8), differ=None):
    """Two repetitions of the rows ending on an EOS at `sizes`, made up: the rows end at steps 6, 3, 12, 1 (and, at
    B=8, 1, 2, 5, 16) of 16; call times (s) of batched assisted, aligned and greedy 1, 2 and 4 at B=4, 1, 1.25 and 2 at
    B=8. `differ`: (size, rep, way) whose last row differs from batched greedy's."""
    ends = [6, 3, 12, 1, 1, 2, 5, 16]
    figures = {  # name: (call time at B=4, at B=8, rounds, drafted candidates)
        "batched-assisted": (1.0, 1.0, 5, 30),
        "aligned-assisted": (2.0, 1.25, 9, 36),
        "batched-greedy": (4.0, 2.0, 16, 0),
    }
    results = []
    for rep in range(2):
        for size in sizes:
            width = max(ends[:size])
            rows = [[7] * (end - 1) + [32] + [0] * (width - end) if end < 16 else [7] * 16 for end in ends[:size]]
            row_ends = [end if end < 16 else None for end in ends[:size]]  # the last row reaches the limit
            for name in workloads.BATCH_EOS_METHODS:
                way = workloads.BATCH_METHODS[name]
                time_4, time_8, rounds, proposed = figures[name]
                call = time_4 if size == 4 else time_8
                own = [list(row) for row in rows]
                if differ == (size, rep, name):
                    own[-1][0] = 8
                results.append(
                    {"phase": "batch-eos", "side": "patched", "rep": rep, "case": f"batch-eos:{name}:{size}"}
                    | {"method": way.method, "separate": False, "aligned_rows": way.aligned, "calls": 1}
                    | {"time": call, "wall": call, "generated": sum(ends[:size]), "max_new_tokens": 16}
                    | {"per_token": call / sum(ends[:size]), "new_tokens": width, "batch_size": size}
                    | {"rounds": rounds + (2 * rep if way.method == "assisted" else 0), "proposed": proposed}
                    | {"rounds_max": rounds, "accepted": None}
                    | {"rows": own, "row_ends": row_ends, "eos_token_id": 32}
                    | {"prompt_lengths": [64, 40, 56, 32, 48, 60, 36, 52][:size]}
                )
    return results


def test_the_batch_calls_end_rows_on_an_eos_and_time_them_over_their_real_tokens():
    worker = make_worker()
    prompts = [list(range(5, 5 + length)) for length in (12, 7, 10, 4)]
    plain = worker.batch("loop", "greedy", 24, prompts)
    eos = plain["rows"][1][-1]  # the random loop pair repeats a token, then switches to another: its last one
    greedy = worker.batch("loop", "greedy", 24, prompts, eos_token_id=eos)
    assert plain["row_ends"] is None and greedy["eos_token_id"] == eos
    ends = greedy["row_ends"]
    assert any(end is not None for end in ends)
    for row, end, alone in zip(greedy["rows"], ends, plain["rows"], strict=True):
        if end is None:
            assert row == alone
        else:  # the row up to its first EOS, then the pad token
            assert row[:end] == alone[:end] and row[end - 1] == eos and eos not in row[: end - 1]
            assert set(row[end:]) <= {0}
    assert greedy["generated"] == sum(end or len(row) for end, row in zip(ends, greedy["rows"], strict=True))
    assert greedy["per_token"] == pytest.approx(greedy["time"] / greedy["generated"])
    own = worker.batch("loop", "assisted", 24, prompts, eos_token_id=eos)
    if "failed" in own:  # stock 4.31.0 refuses assisted generation of a batch
        return
    aligned = worker.batch("loop", "assisted", 24, prompts, aligned_rows=True, eos_token_id=eos)
    assert own["rows"] == aligned["rows"] == greedy["rows"] and own["row_ends"] == aligned["row_ends"] == ends
    # no row's accepted candidates are its new tokens less the rounds: none given
    assert own["accepted"] is None and own["proposed"] > 0


def test_the_rows_ending_on_an_eos_are_timed_over_their_real_tokens_and_paired_by_call_times():
    table = summary.summarize_batch_eos(batch_results() + batch_eos_results(), [4, 8])
    assert list(table) == [4, 8]
    row = table[4]
    assert row["row_ends"] == [6, 3, 12, 1] and row["generated"] == 22 and row["eos"] == 32 and row["reps"] == 2
    assert row["method"]["batched-greedy"]["per_token"] == pytest.approx(4.0 / 22)
    assert row["holes_slowdown"][0] == pytest.approx(0.5) and row["assisted_slowdown"][0] == pytest.approx(0.25)
    assert row["holes_over_aligned"][0] == pytest.approx(2.0) and row["assisted_over_greedy"][0] == pytest.approx(4.0)
    assert row["batched_same"] and row["aligned_same"]
    assert table[8]["holes_slowdown"][0] == pytest.approx(0.8) and table[8]["generated"] == 46
    # the check is per repetition: one repetition's other tokens are flagged, with the row
    flagged = summary.summarize_batch_eos(batch_eos_results(differ=(8, 1, "aligned-assisted")), [4, 8])
    assert flagged[4]["aligned_same"] and flagged[8]["batched_same"] and not flagged[8]["aligned_same"]
    # the table without an EOS is not mixed with it, nor the other way round
    assert summary.summarize_batch(batch_eos_results(), [4, 8])[0] == {}
    assert summary.summarize_batch_eos(batch_results(), [4]) == {}

    printed = report.batch_eos_text(table)
    assert "row end steps" in printed[0] and "rounds g/own/al" in printed[0]
    # rounds are medians: the adaptive draft length reads a clock (here 5 and 7 rounds, 9 and 11 aligned)
    assert printed[1].split() == ["4", "6,3,12,1", "22", "6", "22", "11", "4.00x", "2.00x", "16/6/10", "30/36", "yes"]
    assert printed[2].split()[1] == "6,3,12,1,1,2,5,none"


def test_the_rows_ending_on_an_eos_close_with_their_own_lines_after_the_tables():
    eos = {"token": 32, "sizes": [4, 8], "tokens": 16, "reps": 2, "methods": workloads.BATCH_EOS_METHODS}
    meta = {"batch": {"sizes": [1, 4, 8], "tokens": 16, "reps": 2, "eos": eos}}
    lines = report.batch_lines(meta, batch_results() + batch_eos_results())
    # the table's own lines come first, as they were
    assert lines[:3] == report.batch_lines({"batch": dict(meta["batch"], eos=None)}, batch_results())
    assert lines[3].startswith(
        "rows ending on an EOS: rows of their own/aligned time per token, B=4: 0.500 (0.500-0.500), "
        "target <= 1/1.20 = 0.833: met (patched; aligned: the same fork"
    )
    assert "rows end at new-token steps 6, 3, 12, 1 of 16, 22 real new tokens)" in lines[3]
    assert lines[4].startswith(
        "rows ending on an EOS: rows of their own/aligned time per token, B=8: 0.800 (0.800-0.800) (shown, not judged"
    )
    assert lines[5].startswith(
        "rows ending on an EOS: batched assisted/batched greedy time per token, B=8: 0.500 (0.500-0.500), "
        "target < 1.00: met (patched, rows of their own; median of 2 paired runs of the call times"
    )
    assert "steps 6, 3, 12, 1, 1, 2, 5, none of 16" in lines[5]
    # a run of B=1 and 4 only: B=8 not among its sizes
    small = {"batch": {"sizes": [1, 4], "tokens": 16, "reps": 2, "eos": dict(eos, sizes=[4])}}
    lines = report.batch_lines(small, batch_results() + batch_eos_results(sizes=(4,)))
    assert lines[4].endswith("B=8: n/a (shown, not judged; B=8 did not run (not among this run's batch sizes))")
    assert lines[5].endswith("n/a (target < 1.00; B=8 did not run (not among this run's batch sizes))")


def test_the_batch_table_runs_the_rows_ending_on_an_eos_in_its_repetitions_and_stops_on_other_tokens():
    asked = []

    class Worker:
        def ask(self, command):
            asked.append(command)
            if command["op"] == "cache_bound":
                return {"rows": [], "tokens": command["max_new_tokens"]}
            rows = [[1, 32, 0]] * len(command["prompts"])
            if command.get("eos_token_id") and command["aligned_rows"] and wrong:
                rows = [[1, 2, 32]] * len(command["prompts"])
            answer = {"method": command["method"], "per_token": 0.1, "rounds": 3, "accepted": None, "proposed": 2}
            return answer | {"rows": rows, "row_ends": [2] * len(rows)}

    bench = object.__new__(measure.Bench)
    bench.quick, bench.plan, bench.start, bench.batch_sizes = True, measure.QUICK, 0.0, [1, 4, 8]
    bench.sides, bench.environments, bench.results = ["patched"], {"patched": "patched"}, []
    bench.workers = {"patched": Worker()}
    bench.trained = {"batch_prompts": [[5 + row] * 3 for row in range(8)]}
    wrong = False
    bench.batch_table()
    assert bench.batch_meta["eos"] == {
        "token": 32,
        "sizes": [4, 8],
        "tokens": 128,  # a quick run keeps the rows' 128 tokens: fewer would cut the rows that end late
        "reps": measure.QUICK["batch_reps"],
        "methods": ["batched-assisted", "aligned-assisted", "batched-greedy"],
    }
    # a warm-up per size and way, with the EOS; then each repetition the sizes without an EOS, then with it
    warm = [(r["case"], r["max_new_tokens"]) for r in bench.results if r["phase"] == "batch-eos-warmup"]
    assert warm == [(f"batch-eos:{name}:{size}", 4) for size in (4, 8) for name in workloads.BATCH_EOS_METHODS]
    assert all(c["eos_token_id"] == 32 for c in asked if c.get("eos_token_id") is not None)
    assert not any("eos_token_id" in c for c in asked[: 3 * 5])
    timed = [(r["rep"], r["case"]) for r in bench.results if r["phase"] in ("batch", "batch-eos")]
    first, second = timed[: 3 * 5 + 2 * 3], timed[3 * 5 + 2 * 3 :]
    assert [case for _, case in first[15:18]] == [f"batch-eos:{name}:4" for name in workloads.BATCH_EOS_METHODS]
    # the second repetition: shifted by one and reversed, as the table's own ways
    order = ["batched-assisted", "batched-greedy", "aligned-assisted"]
    assert [case for _, case in second[15:18]] == [f"batch-eos:{name}:4" for name in order]
    assert {rep for rep, _ in first} == {0} and {rep for rep, _ in second} == {1}
    assert all(r["max_new_tokens"] == 128 for r in bench.results if r["phase"] == "batch-eos")
    # an assisted call that returns other tokens than batched greedy search in the same repetition stops the run
    wrong, asked[:] = True, []
    with pytest.raises(SystemExit, match="B=4, repetition 0: aligned-assisted DID NOT RETURN BATCHED GREEDY"):
        bench.batch_table()


def test_the_cache_bound_measures_the_peak_cache_of_each_draft_and_length():
    worker = make_worker()
    prompts = [list(range(5, 5 + length)) for length in (12, 7, 10, 4)]
    answer = worker.cache_bound("loop", [4], [4, 10], 24, prompts)
    assert answer["tokens"] == 24
    assert [(row["size"], row["draft"], row["draft_length"]) for row in answer["rows"]] == [
        (4, draft, length) for draft in ("rarely", "unevenly") for length in (4, 10)
    ]
    for row in answer["rows"]:
        assert row["same"] and row["greedy_width"] == 12 + 24 - 1
        assert row["greedy_width"] <= row["assisted_width"] <= 12 + 24 + 16


def test_the_cache_bound_section_and_line_judge_the_worst_call():
    from benchkit import report

    rows = [
        {"size": 4, "draft": "rarely", "draft_length": 4, "greedy_width": 100, "assisted_width": 104, "same": True},
        {"size": 8, "draft": "unevenly", "draft_length": 10, "greedy_width": 100, "assisted_width": 108, "same": True},
    ]
    batch = {"cache_bound": {"rows": rows, "tokens": 200}}
    section = "\n".join(report.cache_bound_section(batch))
    assert "| 8 | unevenly | 10 | 100 | 108 | 1.080 | yes |" in section
    (line,) = report.cache_bound_lines(batch)
    assert line.startswith("peak target cache, batched assisted/batched greedy: 1.080, target <= 1.10: met")
    rows[0]["assisted_width"] = 120
    assert "1.200, target <= 1.10: NOT met" in report.cache_bound_lines(batch)[0]
    assert report.cache_bound_lines({}) == [] and report.cache_bound_section({}) == []


# ---- the time a full run takes


def test_a_quick_run_estimates_the_full_run_by_tokens_and_repetitions():
    from benchkit import estimate
    from benchkit.measure import FULL, QUICK

    results = [
        {"phase": "ab", "case": "trained", "wall": 1.0, "cpu": 0.5},
        {"phase": "ab", "case": "greedy:draft:32", "wall": 2.0, "cpu": 2.0},  # the reference of `draft`
        # a reference that two cases of different groups share, run for the second one
        {"phase": "ab", "case": "sample:trained:128:t0.7", "reference_for": "sampling-t0.7-greedy-draft", "wall": 1.0},
        {"phase": "warmup", "wall": 1.0, "cpu": 1.0},
        {"phase": "asr-probe", "wall": 1.0, "cpu": 1.0},
    ]
    cases = ["trained", "draft", "sampling-t0.7", "sampling-t0.7-greedy-draft", "asr-batch"]
    meta = {"quick": True, "cases": cases, "wall": 10.0}
    parts, total = estimate.full_seconds(results, meta)
    headline = FULL["headline_reps"][0] / QUICK["headline_reps"][0]
    costly = FULL["costly_reps"][0] / QUICK["costly_reps"][0]
    cheap = FULL["cheap_reps"][0] / QUICK["cheap_reps"][0]
    assert parts["trained"] == pytest.approx(headline)
    assert parts["draft"] == pytest.approx(2.0 * 128 / 32 * costly)
    assert parts["sampling-t0.7-greedy-draft"] == pytest.approx(cheap) and "sampling-t0.7" not in parts
    assert parts["warm-up"] == pytest.approx(FULL["warmup_tokens"] / QUICK["warmup_tokens"])
    assert parts["start-up and the rest"] == pytest.approx(10.0 - 6.0)
    assert total == pytest.approx(sum(parts.values()))
    cpu_parts, _ = estimate.full_seconds(results, meta, "cpu")
    assert cpu_parts["trained"] == pytest.approx(0.5 * headline) and "start-up and the rest" not in cpu_parts
    lines = estimate.estimate_lines(results, meta)
    assert lines[0].startswith(f"estimated full run: {total / 60:.1f} minutes")
    assert estimate.estimate_lines(results, dict(meta, quick=False)) == []
    # a call's first round (the prompt's, encoders included) does not grow with the number of new tokens
    whisper = {"phase": "ab", "case": "whisper-own", "wall": 1.0, "cpu": 1.0, "time": 1.0, "first_round": 0.4}
    parts, _ = estimate.full_seconds([whisper], dict(meta, cases=["whisper-own"]))
    reps = FULL["whisper_reps"][0] / QUICK["whisper_reps"][0]
    assert parts["whisper-own"] == pytest.approx((0.4 + 0.6 * 96 / 32) * reps)
    assert estimate.token_scale({"time": 1.0}, 3.0) == estimate.token_scale({}, 3.0) == 3.0
    # the asr-batch case: each pair's calls by its own tokens and repetitions (a result without a pair: the whisper
    # pair's, from a run before the second pair)
    asr = [{"phase": "asr", "workload": "whisper-shared", "wall": 1.0}, {"phase": "asr", "wall": 1.0}]
    parts, _ = estimate.full_seconds(asr, dict(meta, cases=["asr-batch"]))
    shared = 64 / 32 * FULL["asr_agreeing_reps"] / QUICK["asr_agreeing_reps"]
    assert parts["asr-batch"] == pytest.approx(shared + 128 / 32 * FULL["asr_reps"] / QUICK["asr_reps"])
    # the rows ending on an EOS keep their tokens in a quick run: scaled by the repetitions alone
    eos = [{"phase": "batch-eos", "wall": 1.0}, {"phase": "batch-eos-warmup", "wall": 1.0}]
    parts, _ = estimate.full_seconds(eos, dict(meta, cases=[]))
    reps = FULL["batch_reps"] / QUICK["batch_reps"]
    assert parts["batches"] == pytest.approx(reps + FULL["warmup_tokens"] / QUICK["warmup_tokens"])


# ---- the distil-whisper-shaped pairs


def test_the_distil_pairs_compute_the_targets_function_with_an_encoder_shared_or_copied():
    import torch
    from transformers import GenerationConfig

    worker = make_worker()
    target, shared, prompt, _ = worker.workload("whisper-shared")
    own_target, own, _, _ = worker.workload("whisper-own")
    poor_target, poor, _, _ = worker.workload("whisper-own-poor")
    # one target for the three (and one greedy reference), its decoder layers the cost of a token, not its output
    assert own_target is target and poor_target is target
    layers = target.get_decoder().layers
    assert len(layers) == 4 and len(own.get_decoder().layers) == len(poor.get_decoder().layers) == 1
    assert sum(p.numel() for p in layers.parameters()) > 20 * target.get_output_embeddings().weight.numel()
    assert shared.get_encoder() is target.get_encoder()
    assert own.get_encoder() is not target.get_encoder() and poor.get_encoder() is not target.get_encoder()
    copied = own.get_encoder().state_dict()
    assert all(torch.equal(copied[name], value) for name, value in target.get_encoder().state_dict().items())
    for layer in layers[1:]:
        for projection in (layer.self_attn.out_proj, layer.encoder_attn.out_proj, layer.fc2):
            assert not projection.weight.any() and not projection.bias.any()
    assert prompt["input_features"].shape == (1, 80, 3000)
    config = GenerationConfig(
        max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0, decoder_start_token_id=0
    )
    with torch.no_grad():
        greedy = target.generate(**prompt, generation_config=config)
        # the assistant computes the target's function: every candidate it drafts is accepted
        assert torch.equal(own.generate(**prompt, generation_config=config), greedy)
        assert torch.equal(shared.generate(**prompt, generation_config=config), greedy)
        assert not torch.equal(poor.generate(**prompt, generation_config=config), greedy)


def test_the_worker_leaves_the_encoders_out_of_the_candidates_and_keeps_the_forks_account():
    # An encoder's forward pass is not a candidate: counted as one, the assistant's own encoder (run in the round of
    # its first draft) would read as a rejected candidate, and the fork's account would disagree with the worker's.
    worker = make_worker(draft=DraftLength.defaults())
    greedy = worker.run("whisper-shared", "greedy", 16)
    assert greedy["decoding_stats"] is None and greedy["new_tokens"] == 16
    for name in ("whisper-shared", "whisper-own", "whisper-own-poor"):
        answer = worker.run(name, "assisted", 16)
        assert "failed" not in answer, answer
        assert answer["new_tokens"] == 16 and answer["output_sha"] == greedy["output_sha"]
        assert answer["prompt_length"] == 3000  # feature frames
        stats = answer["decoding_stats"]
        if stats is None:  # a transformers that keeps no account of its assisted calls (stock 4.31.0)
            assert not bench_worker.returns_decoding_stats()
            continue
        assert stats["schedule"] == "adaptive"
        counted = (answer["rounds"], answer["proposed"], answer["accepted"])
        assert (stats["num_rounds"], stats["num_drafted"], stats["num_accepted"]) == counted
        if name != "whisper-shared":
            assert stats["num_drafted"] == 0 or stats["num_accepted"] <= stats["num_drafted"]
            assert stats["num_drafted"] > 0 or stats["stop_reason"]


def test_the_loop_is_counted_per_round_without_the_calls_set_up():
    worker = make_worker()
    counted = worker.run("loop", "greedy", 12, count_ops=True)
    # greedy search runs the same operations in every step; the call's set-up comes on top of them
    assert counted["ops_loop_per_round"] == int(counted["ops_loop_per_round"]) > 0
    assert counted["ops_outside"] > counted["ops_loop_per_round"] * counted["rounds"]
    assert counting.per_round(counted) == (counted["ops_loop_per_round"], counted["syncs_loop_per_round"])
    assert worker.run("loop", "greedy", 4)["ops_loop_per_round"] is None
    # runs saved before the loop was counted apart: the call's count over its rounds
    saved = dict(counted, ops_loop_per_round=None, syncs_loop_per_round=None)
    expected = (counted["ops_outside"] / counted["rounds"], counted["syncs_outside"] / counted["rounds"])
    assert counting.per_round(saved) == pytest.approx(expected)
    assert counting.per_round({"failed": "refuses: X"}) is None and counting.per_round(None) is None
    # a round checked several times (after each accepted candidate) is noted at its last check
    counter = counting.OpCounter(SimpleNamespace(depth=0))
    for round_number, ops, syncs in ((1, 40, 1), (2, 45, 1), (2, 47, 2), (3, 55, 2)):
        counter.counts["cat"], counter.syncs["item"] = ops, syncs
        counter.mark(round_number)
    assert counter.loop_per_round() == (7.5, 0.5)


def distil_results(shared=0.6, own=1.02, poor=1.01, noise=1.0):
    """Three repetitions of the distil-whisper-shaped cases on stock, 4.36.2 and patched, with the fork's account of
    the patched calls, and the counted calls of the poor draft."""
    results = []
    stats = {
        "whisper-shared": (6, 90, 90, None),
        "whisper-own": (96, 0, 0, "the assistant's encoder would cost about {} forward passes of the model"),
        "whisper-own-poor": (96, 0, 0, "the assistant's encoder would cost about {} forward passes of the model"),
    }
    for rep in range(3):
        for case, slowdown in (("whisper-shared", shared), ("whisper-own", own), ("whisper-own-poor", poor)):
            for side, scale in (("stock", 1.0), ("patched", noise)):
                greedy = result("greedy:whisper-shared:96", side, rep, 10.0 * scale, "greedy", reference_for=case)
                results.append(greedy | {"new_tokens": 96, "rounds": 96})
            rounds, drafted, accepted, reason = stats[case]
            account = {"schedule": "adaptive", "num_rounds": rounds, "num_drafted": drafted}
            account |= {"num_accepted": accepted, "stop_reason": reason and reason.format(360 + rep)}
            for side, per_token in (("stock", 13.0), ("4.36.2", 12.0), ("patched", 10.0 * noise * slowdown)):
                run = result(case, side, rep, per_token, new_tokens=96, rounds=rounds)
                results.append(run | {"decoding_stats": account if side == "patched" else None})
    counted = {"phase": "ops", "rounds": 96, "ops_outside": 600, "syncs_outside": 0, "syncs_loop_per_round": 0.0}
    results.append(counted | {"case": "greedy:whisper-shared:96", "side": "patched", "ops_loop_per_round": 5.0})
    results.append(counted | {"case": "whisper-own-poor", "side": "patched", "ops_loop_per_round": 4.0})
    results.append(counted | {"case": "whisper-own-poor", "side": "stock", "ops_loop_per_round": 37.0})
    return results


DISTIL = ["whisper-shared", "whisper-own", "whisper-own-poor"]


def test_the_distil_targets_are_judged_by_the_paired_median_within_the_noise_floor():
    run = named("stock", "4.36.2", "patched")
    table, _ = summary.summarize(distil_results(), run, DISTIL)
    judged = summary.targets(table)
    assert list(judged) == ["whisper-shared", "whisper-own"]
    label, limit, shared = judged["whisper-shared"]
    assert (label, limit) == ("distil-whisper shape, shared encoder", 0.893)
    assert shared["value"] == pytest.approx((0.6, 0.6, 0.6)) and shared["met"] and shared["noise_ok"]
    assert judged["whisper-own"][2]["met"] and judged["whisper-own"][2]["limit"] == 1.10
    lines = report.target_lines(table)
    assert lines[0] == (
        "assisted/greedy time per token, distil-whisper shape, shared encoder: 0.600 (0.600-0.600), target <= 0.893: "
        "met; noise floor 1.000 (1.000-1.000), within ±3% (whisper-shared, patched, median of 3 paired runs; 96 "
        "tokens)"
    )
    assert lines[1].startswith("assisted/greedy time per token, distil-whisper shape, own encoder: 1.020 (")
    assert "target <= 1.10: met" in lines[1]
    # the poor draft is judged with the others: the worst of them here
    case, row = summary.worst_poor_draft(table)
    assert case == "whisper-own-poor" and row["slowdown"]["patched"][0] == pytest.approx(1.01)
    # a miss, and a noise floor beyond ±3%: no verdict
    table, _ = summary.summarize(distil_results(shared=0.95, noise=1.05), run, DISTIL)
    line = report.target_lines(table)[0]
    assert "0.950 (0.950-0.950), target <= 0.893: NOT met; noise floor 1.050 (1.050-1.050), OUTSIDE ±3%" in line
    assert line.split("OUTSIDE ±3%")[1].startswith(": not a verdict")


def test_the_forks_account_of_its_calls_is_summed_up_and_reported():
    run = named("stock", "4.36.2", "patched")
    results = distil_results()
    table, _ = summary.summarize(results, run, DISTIL)
    assert table["whisper-shared"]["side"]["stock"]["decoding_stats"] is None
    stats = table["whisper-own"]["side"]["patched"]["decoding_stats"]
    assert (stats["runs"], stats["rounds"], stats["drafted"], stats["accepted"], stats["stopped"]) == (3, 96, 0, 0, 3)
    # reasons that differ only in their figures count together, in the first one's words
    assert stats["reasons"] == [("the assistant's encoder would cost about 360 forward passes of the model", 3)]
    text = report.stats_text(stats)
    assert text.startswith("96 rounds, 0 drafted, 0 accepted (schedule `adaptive`, medians of 3 calls)")
    assert text.endswith("in 3 of 3 calls: the assistant's encoder would cost about 360 forward passes of the model")
    assert report.stats_text(table["whisper-shared"]["side"]["patched"]["decoding_stats"]).endswith(
        "drafted to the end in every call"
    )
    printed = report.distil_text(table)
    assert printed[1].startswith("whisper-shared: patched assisted/greedy 0.600 (0.600-0.600), noise floor 1.000")
    assert len(printed) == 4


def test_the_report_gives_the_distil_pairs_a_section_and_counts_their_rounds_beside_greedy():
    results, run, meta, info = fake_run()
    results += distil_results()
    meta["cases"] = meta["cases"] + DISTIL
    table, growth = summary.summarize(results, run, meta["cases"])
    text = report.report(meta, info, run, table, growth, [], results)
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == [
        "## Machine and versions",
        "## Cases",
        "## Method",
        "## Results",
        "## Distil-whisper-shaped pairs",
        "## Plots",
        "## GPU",
    ]
    section = text.split("## Distil-whisper-shaped pairs")[1].split("## Plots")[0]
    assert (
        "| whisper-shared | 96 | 10000.00 | 6000.00 | **0.600 (0.600-0.600), target <= 0.893: met; noise floor"
        in section
    )
    assert "| **1.010 (1.010-1.010), poor draft, at most 1.05: met** |" in section
    assert "stock 4.31.0 1.30 (1.30-1.30); upstream 4.36.2 1.20 (1.20-1.20)" in section
    assert (
        "| 3 | 96 rounds, 0 drafted, 0 accepted (schedule `adaptive`, medians of 3 calls); drafted nothing" in section
    )
    # the counted rounds of the patched side beside greedy search's steps: operations; syncs
    assert "| **per round, patched / greedy: operations; syncs** |" in text
    assert "| whisper-own-poor | 600 (6) | 600 (6) | - | - | - | - | 600 (6) | +0 | 4.0 / 5.0; 0.00 / 0.00 |" in text
    printed = report.counted_text(results, meta)
    assert printed[1] == (
        "whisper-own-poor: per round of the loop, patched / greedy: operations; syncs outside the forwards "
        "4.0 / 5.0; 0.00 / 0.00"
    )
    # a run of these cases alone closes with their lines, without the headline's
    closing = report.case_lines(table, {})
    assert closing[0].startswith("assisted/greedy time per token, poor draft: 2.50 (partial")
    assert [line.split(":")[0] for line in closing[-2:]] == [
        "assisted/greedy time per token, distil-whisper shape, shared encoder",
        "assisted/greedy time per token, distil-whisper shape, own encoder",
    ]


# ---- the cases on the real checkpoints (benchkit.real): prompts, order, token checks, lines; nothing is run


def test_the_real_prompts_are_chatml_and_the_grounded_ones_carry_their_source():
    from benchkit import real

    for case in ("lookup-grounded", "lookup-open", "lookup-batch", "real-assisted"):
        for text in real.prompts_of(case).values():
            assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_end|>\n<|im_start|>assistant\n")
            assert text.count("<|im_start|>") == 2
    grounded = real.prompts_of("lookup-grounded")
    assert len(grounded) >= 3 and len(real.prompts_of("lookup-open")) >= 3
    assert real._PASSAGE in grounded["past-tense"] and real._CODE in grounded["rename"]
    assert real._PARAGRAPH in grounded["summarize"] and real._NOTE in grounded["correct"]
    # a request to change the text, never to copy it
    requests = [text.split("\n")[1].lower() for text in grounded.values()]
    assert not any("repeat" in request or "copy" in request for request in requests), requests
    assert len(real.prompts_of("lookup-batch")) == 8
    assert set(real.prompts_of("lookup-batch")) == set(real.GROUNDED) | set(real.MORE_GROUNDED)
    assert not set(real.prompts_of("lookup-open")) & set(grounded)
    for case in ("lookup-grounded", "lookup-open", "lookup-batch", "real-assisted", "real-asr"):
        assert workloads.CASES[case].kind == "real" and case in real.PLAN
        assert workloads.CASES[case].peers == (real.PEER,)


def test_the_real_runs_of_each_ratio_stay_next_to_each_other():
    from benchkit import real

    for case, other in (("lookup-grounded", "lookup"), ("lookup-batch", "lookup"), ("real-asr", "assisted")):
        for rep in range(4):
            labels = [label for _, _, label in real.sequence(case, rep, real.PEER)]
            assert abs(labels.index(other) - labels.index("greedy")) == 1, (case, rep, labels)
    for rep in range(2):
        runs = real.sequence("lookup-open", rep, real.PEER)
        labels = [label for _, _, label in runs]
        assert abs(labels.index("lookup") - labels.index("peer-lookup")) == 1
        assert {"greedy", "greedy-again"} <= set(labels)
        assert dict((label, side) for side, _, label in runs)["peer-lookup"] == real.PEER
    # no peer on a batch (5.23.0 refuses it), none where the run has no 5.23.0 side
    assert all(side == "patched" for side, _, _ in real.sequence("lookup-batch", 0, real.PEER))
    assert all(side == "patched" for side, _, _ in real.sequence("lookup-grounded", 1, None))
    command = real._command("lookup-batch", "lookup", 64, warmup=True)
    assert command["batch"] and len(command["prompts"]) == 8
    assert len(real._command("lookup-grounded", "greedy", 64, warmup=True)["prompts"]) == 1
    assert len(real._command("real-asr", "assisted", 64)["clips"]) == len(real.CLIPS)


def test_a_real_run_with_other_tokens_than_greedy_stops_the_benchmark_loudly():
    from benchkit import real

    greedy = {"rows": [[5, 6, 2], [7, 2]]}
    real.check_tokens("lookup-grounded", "lookup", {"rows": [[5, 6, 2], [7, 2]]}, greedy)
    with pytest.raises(SystemExit, match="DID NOT RETURN THE FORK'S GREEDY TOKENS"):
        real.check_tokens("lookup-grounded", "peer-lookup", {"rows": [[5, 6, 2], [7, 8]]}, greedy)
    with pytest.raises(SystemExit, match="FAILED"):
        real.check_tokens("lookup-batch", "lookup", {"failed": "refuses: ValueError: no"}, greedy)


def real_result(case, label, rep, time, calls=10, generated=10, stats=None, side="patched"):
    return {
        "phase": "real",
        "case": f"real:{case}",
        "label": label,
        "rep": rep,
        "side": side,
        "time": time,
        "per_token": time / generated,
        "forward_time": time * 0.9,
        "target_calls": calls,
        "generated": generated,
        "rows": [[1, 2]],
        "stats": stats or [None],
    }


def test_the_real_lines_give_the_paired_medians_the_noise_floor_and_the_targets():
    from benchkit import real

    lookup_stats = [{"schedule": "prompt_lookup", "num_rounds": 6, "num_drafted": 9, "num_accepted": 4}]
    results = []
    for rep, (greedy, lookup, peer, again) in enumerate([(1.0, 0.6, 0.7, 1.0), (1.0, 0.5, 0.6, 1.02)]):
        results += [
            real_result("lookup-grounded", "greedy", rep, greedy),
            real_result("lookup-grounded", "lookup", rep, lookup, calls=6, stats=lookup_stats),
            real_result("lookup-grounded", "peer-lookup", rep, peer, calls=7, side=real.PEER),
            real_result("lookup-grounded", "greedy-again", rep, again),
            real_result("lookup-open", "greedy", rep, greedy),
            real_result("lookup-open", "lookup", rep, 1.1, calls=9),
            real_result("lookup-open", "greedy-again", rep, again),
            real_result("lookup-batch", "greedy", rep, 2.0),
            real_result("lookup-batch", "lookup", rep, 1.9),
        ]
    results.append({**real_result("lookup-grounded", "lookup", 0, 9.0), "phase": "real-warmup"})  # not counted
    table = real.summarize_real(results)
    assert table["lookup-grounded"]["reps"] == 2
    assert table["lookup-grounded"]["ratio"] == pytest.approx((0.55, 0.5, 0.6))
    assert table["lookup-grounded"]["noise"] == pytest.approx((1.01, 1.0, 1.02))
    assert table["lookup-grounded"]["labels"]["lookup"]["target_forwards"] == pytest.approx(0.6)
    meta = {"plan": {case: {"reps": 2, "tokens": 64} for case in real.PLAN}, "batch_probe": "refuses: ValueError"}
    lines = real.real_lines(table, meta)
    grounded = next(line for line in lines if line.startswith("prompt lookup/greedy time per token, grounded: "))
    assert "0.550 (0.500-0.600), target <= 0.667: met" in grounded and "noise floor" in grounded
    assert "1.010 (1.000-1.020)" in grounded and "median of 2 paired runs" in grounded
    open_line = next(line for line in lines if line.startswith("prompt lookup/greedy time per token, open-ended: "))
    assert "target <= 1.031: NOT met" in open_line
    peer = next(line for line in lines if line.startswith("prompt lookup patched/5.23.0 time per token: "))
    assert "target <= 0.952: met" in peer
    forwards = next(line for line in lines if line.startswith("prompt lookup target forwards per token, grounded"))
    assert "patched 0.600, 5.23.0 0.700" in forwards and "6/9/4" in forwards
    batch = next(line for line in lines if "batch 8" in line)
    assert "target < 1: met" in batch and "refuses" in batch
    section = "\n".join(real.real_section(table, meta))
    assert "## Real checkpoints" in section and "`lookup-open`" in section
    assert real.real_lines({}, {"skipped": "no manifest.json"}) == ["real checkpoints: SKIPPED (no manifest.json)"]
    assert real.real_lines({}, None) == []
    # the cases of the paired repetitions leave the real ones alone
    assert summary.summarize(results, [sides.patched_side()], ["lookup-grounded", "lookup-open"])[0] == {}


def test_without_the_real_checkpoints_their_cases_are_skipped_loudly(tmp_path, monkeypatch, capsys):
    from benchkit import cli, real

    monkeypatch.setenv("REAL_MODELS_DIR", str(tmp_path / "nothing"))
    assert "no manifest.json" in real.missing()
    args = cli.parse_args(["--cases", "trained,lookup-grounded,real-asr"])
    assert cli.run_cases(args) == ["trained"]
    assert "SKIPPED" in capsys.readouterr().out and "no manifest.json" in args.real_skipped
    with pytest.raises(SystemExit, match="nothing left to run"):
        cli.run_cases(cli.parse_args(["--cases", "lookup-open"]))
    (tmp_path / "nothing").mkdir()
    (tmp_path / "nothing" / "manifest.json").write_text("{}")
    assert "smollm2-135m-instruct/config.json is missing" in real.missing()


def test_make_bench_builds_the_real_checkpoints_first_when_it_can():
    import re

    rule = re.search(r"^bench:(.*)$", (REPO / "Makefile").read_text(), re.MULTILINE).group(1).split("##")[0]
    assert "real-models-if-available" in rule.split()


def test_a_quick_run_of_the_real_cases_is_scaled_to_a_full_one():
    from benchkit import real

    (reps, tokens), (quick_reps, quick_tokens) = real.PLAN["lookup-grounded"]
    result = real_result("lookup-grounded", "greedy", 0, 1.0)
    assert real.full_scale(result) == pytest.approx(reps * tokens / (quick_reps * quick_tokens))
    assert real.full_scale({**result, "phase": "real-warmup"}) == 1.0
