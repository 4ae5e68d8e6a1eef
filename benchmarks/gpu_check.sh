#!/usr/bin/env bash
# GPU check (benchmarks/gpu_check.py says what it checks): run from anywhere on a machine with an
# NVIDIA GPU and a Python whose torch is a CUDA build (PYTHON=..., default python3). heedful is
# taken from this checkout's src/, so nothing is installed; its other imports (numpy, PyYAML,
# sentencepiece, safetensors, sacrebleu, tqdm) must be importable. Bounded to 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else "no CUDA device")'
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
timeout 300 "$PYTHON" benchmarks/gpu_check.py
# training from a prepared directory (heedful prepare): rates, attention kernels, resume
timeout 300 "$PYTHON" benchmarks/gpu_prepared.py
