#!/usr/bin/env bash
# The one entry of the CUDA check (benchmarks/gpu_check.py): the checkout on PYTHONPATH,
# $PYTHON or the checkout's .venv python (else python3), and a time budget (GPU_CHECK_BUDGET
# seconds, default 420) after which `timeout` ends it (exit 124; the JSON then holds the steps
# that finished). Arguments go to gpu_check.py: --json PATH, --images N, ...
#
# A GPU machine is often not set up by `make` (its image brings python3 with torch, and no
# venv): where that python cannot import the extension, it is built in place first with that
# python (setup.py; libjpeg-turbo through pkg-config or FASTDECODE_JPEG_INCLUDE/_LIB, whose
# directory then goes on LD_LIBRARY_PATH).
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-$here/.venv/bin/python}"; [ -x "$py" ] || py="$(command -v python3)"
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
if [ -n "${FASTDECODE_JPEG_LIB:-}" ]; then
    export LD_LIBRARY_PATH="$FASTDECODE_JPEG_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if ! "$py" -c 'import fastdecode._native' 2>/dev/null; then
    echo "gpu_check: fastdecode._native does not import with $py; building it in place" >&2
    (cd "$here" && "$py" setup.py -q build_ext --inplace -j "$(nproc)") >&2 || exit 3
fi
exec timeout --kill-after=15 "${GPU_CHECK_BUDGET:-420}" "$py" -m benchmarks.gpu_check "$@"
