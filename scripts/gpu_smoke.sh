#!/usr/bin/env bash
# GPU smoke test of the VERL recipe: two GRPO-RoC training steps of the kit's tiny Qwen3 with
# SGLang rollouts, the kit agent loop, sandbox, reward function and RoC sampler, on this
# machine's GPUs. Not part of `make test` (needs a CUDA GPU and SGLang; see README).
#
#   scripts/gpu_smoke.sh [RUN_DIR]        # default runs/gpu-smoke; N_GPUS=<n> to use more GPUs
#
# Passes when VERL exits 0 and the step-2 checkpoint exists. Offline: the model is built and
# its tokenizer trained locally (kit.bridge.launch.prepare_smoke), nothing is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
RUN=${1:-runs/gpu-smoke}
N_GPUS=${N_GPUS:-1}

command -v nvidia-smi >/dev/null || { echo "gpu_smoke: no nvidia-smi; this check needs a CUDA GPU" >&2; exit 2; }
nvidia-smi -L
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "gpu_smoke: torch has no CUDA")'
"$PY" -c 'import sglang; print("sglang", sglang.__version__)' \
  || { echo "gpu_smoke: sglang is not importable; install the GPU extra (README, 'Paper scale')" >&2; exit 2; }

rm -rf "$RUN"
mkdir -p "$(dirname "$RUN")"
start=$(date +%s)
"$PY" -m kit launch --smoke --run-dir "$RUN" --n-gpus-per-node "$N_GPUS" 2>&1 | tee "$RUN.log"
end=$(date +%s)
ckpt="$RUN/checkpoints/global_step_2"
if [ -d "$ckpt" ]; then
  echo "gpu_smoke: OK, 2 steps in $((end - start)) s, checkpoint $ckpt"
  grep -E "roc/kept|roc/sampled|actor/pg_loss|training/global_step" "$RUN.log" | tail -n 8 || true
else
  echo "gpu_smoke: FAILED, no $ckpt (log: $RUN.log)" >&2
  exit 1
fi
