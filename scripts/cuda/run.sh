#!/usr/bin/env bash
# The model suite on a CUDA GPU machine, then the low-precision study and the benchmark as time allows.
#
#   bash scripts/cuda/run.sh          # in the repository root, with OUT=<an empty folder for the results>
#
# Needs build/cuda/ from `make cuda-prep` (carried to the machine), and the machine's Python with torch + CUDA
# (`python3`, or CUDA_SYSTEM_PYTHON). Nothing is installed into that Python: an isolated environment is built over
# it (scripts/cuda/isolate.py, see docs/cuda.md). In this order, within CUDA_BUDGET_S seconds of work:
#
#   1. set-up: check that build/cuda/ holds this checkout's series; rebuild the fork's and stock v4.31.0's src/ from
#      it (checked byte for byte); build the isolated environment; preflight both trees (versions, the device, a
#      tiny generation, every modeling module imports). Any failure here stops the run at once (exit 2).
#   2. record stock v4.31.0's plain outputs on this device (record_plain_outputs.py, in parallel shards), so that
#      test_plain_unchanged compares the fork with stock on the same device;
#   3. `pytest tests/models` on the fork, on this device, float32, xdist workers: junit.xml, per-class summary;
#   4. scripts/cuda_precision.py: how often assisted departs from greedy in bfloat16 / float16 (float32 control);
#   5. scripts/cuda/bench_patched.py: the benchmark's headline workload, greedy vs assisted, patched fork only, with
#      the fork's default draft-length schedule; synchronized at every forward and as users run it (BENCH_MAX_S at
#      most, within what is left of the budget).
#
# Results in $OUT (at most 7 files): summary.md, junit.xml, pytest.log, stock-<device>.json, precision.csv,
# bench.json, logs.tar.gz. The last lines of stdout are a short summary. Exit status: 0 when the set-up and the suite
# passed, 1 when the suite failed or did not run, 2 when the set-up failed.
#
# Knobs (environment): DEVICE (cuda; cpu for a rehearsal), CUDA_BUDGET_S (300), CUDA_JOBS (10: pytest workers and
# precision processes), CUDA_RECORD_SHARDS (8), CUDA_SYSTEM_PYTHON (python3), CUDA_SUITE_ARGS (extra pytest
# arguments), CUDA_PRECISION_ARGS (extra arguments of cuda_precision.py), CUDA_BENCH_ARGS, CUDA_SKIP (phases to
# skip: any of record suite precision bench).

set -uo pipefail

if [ ! -f scripts/cuda/run.sh ] || [ ! -d tests/models ]; then
    echo "run.sh: run me from the repository root" >&2
    exit 2
fi
if [ -z "${OUT:-}" ]; then
    echo "run.sh: set OUT to the folder the results go to" >&2
    exit 2
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
REPO=$(pwd)

export DEVICE=${DEVICE:-cuda}
BUDGET=${CUDA_BUDGET_S:-300}
JOBS=${CUDA_JOBS:-10}
SHARDS=${CUDA_RECORD_SHARDS:-8}
SYSPY=${CUDA_SYSTEM_PYTHON:-python3}
SKIP=" ${CUDA_SKIP:-} "
RUN=$REPO/build/cuda-run
LOGS=$RUN/logs
# the benchmark's seconds at most (its headline's 9 repetitions take about 100 s of an H200), and the seconds the
# precision study leaves it when the budget is short
BENCH_MAX_S=150
BENCH_KEEP_S=100
ISO=$RUN/env/bin/python
T0=$SECONDS

rm -rf "$RUN"
mkdir -p "$LOGS"
: >"$RUN/phases.tsv"

# Everything below runs in the isolated environment, with the tree under test first on PYTHONPATH.
unset PYTHONHOME PYTHONSTARTUP
export PYTHONNOUSERSITE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME=$RUN/hf-home
export CUBLAS_WORKSPACE_CONFIG=:4096:8
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
ORIGINAL_PYTHONPATH=${PYTHONPATH:-}
unset PYTHONPATH

left() { echo $((BUDGET - (SECONDS - T0))); }
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }
log() { echo "[$(printf '%4d' $((SECONDS - T0)))s] $*"; }
# phase NAME STATUS SECONDS NOTE: one line of the summary table
phase() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >>"$RUN/phases.tsv"; log "$1: $2${4:+ - $4}"; }
skipped() { [[ "$SKIP" == *" $1 "* ]]; }
# phase_result NAME RC START: the phase's own summary line (`NAME: ...`, the last of its log) when it exited 0, else
# its exit status and the last line of its log.
phase_result() {
    if [ "$2" -eq 0 ]; then
        local line
        line=$(grep "^$1:" "$LOGS/$1.log" | tail -n 1)
        phase "$1" ok $((SECONDS - $3)) "${line#"$1": }"
    else
        phase "$1" FAILED $((SECONDS - $3)) "exit $2: $(tail -n 1 "$LOGS/$1.log")"
    fi
}

# after every step: summary.md and logs.tar.gz in $OUT, so that a run killed later still leaves them
pack_logs() {
    cp "$RUN/phases.tsv" "$LOGS/" 2>/dev/null
    "$SYSPY" scripts/cuda/summarize.py run "$RUN" --output "$OUT/summary.md" >/dev/null 2>&1
    tar -czf "$OUT/logs.tar.gz" -C "$RUN" logs 2>/dev/null
}

finish() {
    local status=$1
    "$SYSPY" scripts/cuda/summarize.py run "$RUN" --output "$OUT/summary.md" || echo "run.sh: no summary.md"
    cp "$RUN/phases.tsv" "$LOGS/" 2>/dev/null
    tar -czf "$OUT/logs.tar.gz" -C "$RUN" logs 2>/dev/null
    echo "total: $((SECONDS - T0))s of work (budget ${BUDGET}s); results in \$OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
    exit "$status"
}

die() {
    phase "$1" FAILED "$2" "$3"
    echo "run.sh: STOPPED: $3 (see logs.tar.gz: logs/$1*.log)"
    for file in "$LOGS/$1"*.log; do
        [ -f "$file" ] && { echo "---- tail of $(basename "$file")"; tail -n 25 "$file"; }
    done
    finish 2
}

# timed LOGNAME TIMEOUT COMMAND...: run with a time limit (the whole process group is signalled), output to the log
timed() {
    local name=$1 limit=$2
    shift 2
    timeout -k 15 "$limit" "$@" >"$LOGS/$name.log" 2>&1
}

log "cuda run: device=$DEVICE budget=${BUDGET}s jobs=$JOBS shards=$SHARDS system python=$(command -v "$SYSPY") ($("$SYSPY" --version 2>&1))"
log "machine: $(nproc) cores, $(uname -n)${ORIGINAL_PYTHONPATH:+, PYTHONPATH was $ORIGINAL_PYTHONPATH (unset)}"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$LOGS/nvidia-smi.log" 2>&1
    log "gpu: $(head -n 1 "$LOGS/nvidia-smi.log")"
fi

# ---- 1. set-up ---------------------------------------------------------------------------------------------------
start=$SECONDS
for tool in timeout tar; do
    command -v $tool >/dev/null || die setup 0 "$tool is not installed"
done
timed setup-series 60 "$SYSPY" scripts/cuda/trees.py check-series build/cuda . ||
    die setup-series $((SECONDS - start)) "$(tail -n 1 "$LOGS/setup-series.log")"
timed setup-trees 120 "$SYSPY" scripts/cuda/trees.py unpack build/cuda "$RUN" ||
    die setup-trees $((SECONDS - start)) "$(tail -n 1 "$LOGS/setup-trees.log")"
FORK=$RUN/fork
STOCK=$RUN/stock
WHEELS=()
for wheel in build/cuda/wheels/*.whl; do WHEELS+=(--wheel "$wheel"); done

# the environment's bin/ comes first: its python, and the ninja stub (isolate.py)
export PATH=$RUN/env/bin:$PATH
EXCLUDE_EXTRA=()
for attempt in 1 2 3 4; do
    timed setup-isolate 120 "$SYSPY" scripts/cuda/isolate.py --env "$RUN/env" --links "$RUN/links" \
        --pylib "$RUN/pylib" "${WHEELS[@]}" "${EXCLUDE_EXTRA[@]}" --report "$LOGS/isolation.json" ||
        die setup-isolate $((SECONDS - start)) "$(tail -n 1 "$LOGS/setup-isolate.log")"
    PYTHONPATH=$FORK/src timed setup-preflight-fork 180 "$ISO" scripts/cuda/preflight.py --tree "$FORK" \
        --kind fork --device "$DEVICE" --discover --links "$RUN/links" --json "$LOGS/preflight-fork.json"
    rc=$?
    culprit=$(sed -n 's/^preflight(fork): CULPRIT //p' "$LOGS/setup-preflight-fork.log")
    if [ $rc -eq 3 ] && [ -n "$culprit" ] && [ $attempt -lt 4 ]; then
        case "$culprit" in
        torch | torch-* | numpy* | nvidia* | triton* | safetensors* | regex* | requests* | tqdm* | yaml | PyYAML* | \
            filelock* | packaging* | pytest* | _pytest | xdist | pytest_xdist* | execnet* | pluggy*)
            die setup-preflight-fork $((SECONDS - start)) "an essential package fails to import: $culprit" ;;
        esac
        cp "$LOGS/setup-preflight-fork.log" "$LOGS/setup-preflight-fork-attempt$attempt.log"
        # the distribution name: the entry without its version / metadata suffix
        name=$(echo "$culprit" | sed -E 's/[-.].*$//')
        log "setup: the modeling modules do not import with the system's $name installed; hiding it as well"
        EXCLUDE_EXTRA+=(--exclude "$name")
        continue
    fi
    break
done
if [ $rc -ne 0 ]; then
    # for the diagnosis: what the system's own interpreter sees, outside the isolated environment
    timeout 120 "$SYSPY" -c 'import sys, torch; print("outside the isolated environment:", sys.executable, "torch",
        torch.__version__, "cuda available:", torch.cuda.is_available())' >>"$LOGS/setup-preflight-fork.log" 2>&1
    die setup-preflight-fork $((SECONDS - start)) "$(grep -m 1 'FAILED' "$LOGS/setup-preflight-fork.log")"
fi
PYTHONPATH=$STOCK/src timed setup-preflight-stock 120 "$ISO" scripts/cuda/preflight.py --tree "$STOCK" \
    --kind stock --device "$DEVICE" --json "$LOGS/preflight-stock.json" ||
    die setup-preflight-stock $((SECONDS - start)) "$(grep -m 1 'FAILED' "$LOGS/setup-preflight-stock.log")"
grep -h '^preflight' "$LOGS/setup-preflight-fork.log" "$LOGS/setup-preflight-stock.log"
hidden=$("$SYSPY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(", ".join(sorted(set(r["excluded"].values()))))' "$LOGS/isolation.json" 2>/dev/null || echo "?")
phase setup ok $((SECONDS - start)) "fork and stock trees checked; hidden from the environment: $hidden"
pack_logs

# ---- 2. stock recording on this device ---------------------------------------------------------------------------
DATA=tests/models/data/stock-$DEVICE.json
RECORDED=0
if skipped record; then
    phase record skipped 0
else
    start=$SECONDS
    [ -f "$DATA" ] && cp "$DATA" "$RUN/committed-stock.json"
    rm -f "$DATA"
    limit=$(min 150 $(($(left) - 120)))
    if [ "$limit" -lt 30 ]; then
        phase record "not run" 0 "no time left"
    else
        pids=()
        for ((k = 0; k < SHARDS; k++)); do
            PYTHONPATH=$STOCK/src TRANSFORMERS_TREE=$STOCK timed "record-$k" "$limit" "$ISO" \
                scripts/record_plain_outputs.py --shard "$k/$SHARDS" --output "$RUN/record/part-$k.json" &
            pids+=($!)
        done
        failed=0
        for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
        if [ $failed -ne 0 ]; then
            phase record FAILED $((SECONDS - start)) "$failed of $SHARDS shards failed or ran out of time: plain outputs are NOT compared with stock"
        elif PYTHONPATH=$STOCK/src timed record-merge 60 "$ISO" scripts/record_plain_outputs.py --merge \
            "$RUN"/record/part-*.json --output "$DATA"; then
            RECORDED=1
            cp "$DATA" "$OUT/"
            note="$(tail -n 1 "$LOGS/record-merge.log")"
            if [ -f "$RUN/committed-stock.json" ]; then
                note="$note; $("$SYSPY" scripts/cuda/summarize.py compare-recordings "$RUN/committed-stock.json" "$DATA")"
            fi
            phase record ok $((SECONDS - start)) "$note"
        else
            phase record FAILED $((SECONDS - start)) "$(tail -n 1 "$LOGS/record-merge.log")"
        fi
    fi
    pack_logs
fi

# ---- 3. the model suite on the fork ------------------------------------------------------------------------------
SUITE_OK=0
if skipped suite; then
    phase suite skipped 0
else
    start=$SECONDS
    limit=$(($(left) - 25))
    if [ "$limit" -lt 60 ]; then
        phase suite "not run" 0 "no time left"
    else
        # shellcheck disable=SC2086  # CUDA_SUITE_ARGS is a list of arguments
        PYTHONPATH=$FORK/src TRANSFORMERS_TREE=$FORK timeout -k 15 "$limit" "$ISO" -m pytest -p xdist.plugin \
            -n "$JOBS" -p no:cacheprovider -ra tests/models --junitxml="$OUT/junit.xml" -o junit_family=xunit1 \
            ${CUDA_SUITE_ARGS:-} >"$OUT/pytest.log" 2>&1
        rc=$?
        cp "$OUT/pytest.log" "$LOGS/suite.log"
        grep -m 1 '^device:' "$OUT/pytest.log" | sed 's/^/suite: /'
        counts=$("$SYSPY" scripts/cuda/summarize.py suite "$OUT/junit.xml" --markdown "$RUN/suite.md" 2>&1)
        echo "$counts"
        last=$(tail -n 1 "$OUT/pytest.log")
        if [ $rc -eq 0 ]; then
            SUITE_OK=1
            phase suite ok $((SECONDS - start)) "$last"
        elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
            phase suite FAILED $((SECONDS - start)) "stopped after ${limit}s (time limit): $last"
        else
            phase suite FAILED $((SECONDS - start)) "pytest exit $rc: $last"
        fi
        if [ ! -f "$DATA" ]; then
            echo "suite: WARNING: no stock recording on $DEVICE: test_plain_unchanged was skipped"
        elif [ $RECORDED -eq 0 ]; then
            echo "suite: WARNING: test_plain_unchanged compared with the checkout's $DATA, not recorded in this run"
        fi
    fi
    pack_logs
fi

# ---- 4. low precision --------------------------------------------------------------------------------------------
if skipped precision; then
    phase precision skipped 0
else
    start=$SECONDS
    available=$(($(left) - 15))
    # at most 150 s; the benchmark (after it) keeps BENCH_KEEP_S of what is left, as long as this study gets 60 s
    deadline=$(min "$available" $(min 150 $((available - BENCH_KEEP_S > 60 ? available - BENCH_KEEP_S : 60))))
    if [ "$deadline" -lt 30 ]; then
        phase precision "not run" 0 "no time left"
    else
        # shellcheck disable=SC2086
        PYTHONPATH=$FORK/src TRANSFORMERS_TREE=$FORK timed precision $((deadline + 45)) "$ISO" \
            scripts/cuda_precision.py --jobs "$JOBS" --deadline "$deadline" --csv "$OUT/precision.csv" \
            --markdown "$RUN/precision.md" ${CUDA_PRECISION_ARGS:-}
        phase_result precision $? "$start"
    fi
    pack_logs
fi

# ---- 5. benchmark ------------------------------------------------------------------------------------------------
if skipped bench; then
    phase bench skipped 0
else
    start=$SECONDS
    budget=$(min $BENCH_MAX_S $(($(left) - 10)))
    if [ "$budget" -lt 30 ]; then
        phase bench "not run" 0 "no time left"
    else
        # shellcheck disable=SC2086
        PYTHONPATH=$FORK/src timed bench $((budget + 30)) "$ISO" scripts/cuda/bench_patched.py --device "$DEVICE" \
            --budget "$budget" --json "$OUT/bench.json" --markdown "$RUN/bench.md" ${CUDA_BENCH_ARGS:-}
        phase_result bench $? "$start"
    fi
fi

[ $SUITE_OK -eq 1 ] && finish 0
finish 1
