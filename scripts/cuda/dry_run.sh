#!/usr/bin/env bash
# A rehearsal of scripts/cuda/run.sh on this machine: the same command on a copy of what a run carries (the
# checkout's tracked and untracked-not-ignored files, plus build/cuda), on the CPU, with results in
# build/cuda-dry/out. The "system" Python is CUDA_SYSTEM_PYTHON (default: .venv/bin/python, whose transformers,
# tokenizers and huggingface-hub the isolation must hide); the other knobs of run.sh pass through.
#
#   make cuda-dry-run                                        # everything, on the CPU (about 10 minutes on 2 cores)
#   CUDA_SUITE_ARGS="-k GPT2" CUDA_PRECISION_ARGS="--limit 2" make cuda-dry-run   # a quick rehearsal
set -euo pipefail
REPO=$(pwd)
DEST=$REPO/build/cuda-dry
[ -f build/cuda/manifest.json ] || { echo "dry_run.sh: run \`make cuda-prep\` first" >&2; exit 2; }
rm -rf "$DEST"
mkdir -p "$DEST/repo/build" "$DEST/out"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' name; do
    [ -f "$name" ] && printf '%s\0' "$name"
done | tar --null -T - -cf - | tar -xf - -C "$DEST/repo"
cp -a build/cuda "$DEST/repo/build/"
echo "dry_run.sh: $(du -sh --apparent-size "$DEST/repo" | cut -f1) would travel; running scripts/cuda/run.sh on the CPU"
cd "$DEST/repo"
export DEVICE=${DEVICE:-cpu}
export CUDA_SYSTEM_PYTHON=${CUDA_SYSTEM_PYTHON:-$REPO/.venv/bin/python}
export CUDA_BUDGET_S=${CUDA_BUDGET_S:-1500}
export CUDA_JOBS=${CUDA_JOBS:-2}
export CUDA_RECORD_SHARDS=${CUDA_RECORD_SHARDS:-2}
status=0
OUT=$DEST/out bash scripts/cuda/run.sh || status=$?
echo "dry_run.sh: run.sh exited $status; results in $DEST/out"
exit $status
