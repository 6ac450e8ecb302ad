#!/usr/bin/env bash
# The one entry of the CUDA check (benchmarks/gpu_check.py; never yet run on a GPU): the checkout
# on PYTHONPATH, $PYTHON or the checkout's .venv python (else python3), and a time budget
# (GPU_CHECK_BUDGET seconds, default 420) after which `timeout` ends it (exit 124; the JSON then
# holds the steps that finished). Arguments go to gpu_check.py: --json PATH, --images N, ...
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-$here/.venv/bin/python}"; [ -x "$py" ] || py="$(command -v python3)"
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" \
    exec timeout --kill-after=15 "${GPU_CHECK_BUDGET:-420}" "$py" -m benchmarks.gpu_check "$@"
