#!/usr/bin/env bash
# Builds pillow-simd into its own virtual environment (default .venv-simd) for
# the "torchvision + pillow-simd" row of benchmarks/bench_transforms.py.
#
# pillow-simd replaces Pillow (same `PIL` package), so it cannot share .venv.
# torch, torchvision and numpy are NOT installed again (an unpinned torch
# download is several GB): a .pth file appends .venv's site-packages after
# .venv-simd's own, so `import PIL` finds pillow-simd first and everything
# else comes from .venv.
#
# Safe to run again: it does nothing when the venv already has pillow-simd.
# Exit status 0 also when the build fails (the benchmark then reports the row
# as skipped, with the reason written to $VENV/BUILD-FAILED).
#
#   benchmarks/setup_pillow_simd.sh            # or: make -C . ... (see Makefile)
#   VENV_SIMD=/tmp/simd PILLOW_SIMD_VERSION=12.1.1.post0 benchmarks/setup_pillow_simd.sh

set -uo pipefail
cd "$(dirname "$0")/.."

BASE_VENV=${BASE_VENV:-.venv}
VENV=${VENV_SIMD:-.venv-simd}
VERSION=${PILLOW_SIMD_VERSION:-12.1.1.post0}

if [ ! -x "$BASE_VENV/bin/python" ]; then
    echo "setup_pillow_simd: $BASE_VENV is missing (run 'make build' first)" >&2
    exit 1
fi

check() {
    "$VENV/bin/python" - <<'EOF' 2>/dev/null
import sys
import PIL, torch, torchvision  # noqa: F401
from PIL import features
sys.exit(0 if ".post" in PIL.__version__ and features.check("jpg") else 1)
EOF
}

if [ -x "$VENV/bin/python" ] && check; then
    echo "setup_pillow_simd: $VENV already has pillow-simd $("$VENV/bin/python" -c 'import PIL; print(PIL.__version__)')"
    exit 0
fi

# The same interpreter as .venv, so .venv's compiled packages load.
PYTHON=$("$BASE_VENV/bin/python" -c 'import sys; print(sys._base_executable)')
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV" || { echo "setup_pillow_simd: cannot create $VENV" >&2; exit 0; }

LOG="$VENV/build.log"
# -mavx2: pillow-simd's SIMD paths are compiled in only for what the compiler
# may use; the benchmark machine's CPU decides (AVX2 when it has it).
SIMD_FLAGS="-msse4"
if grep -q avx2 /proc/cpuinfo 2>/dev/null; then SIMD_FLAGS="-mavx2"; fi
echo "setup_pillow_simd: building pillow-simd $VERSION with CC='cc $SIMD_FLAGS' (log: $LOG)"
if ! CC="cc $SIMD_FLAGS" "$VENV/bin/python" -m pip install --no-cache-dir --no-binary pillow-simd \
        "pillow-simd==$VERSION" >"$LOG" 2>&1; then
    tail -n 20 "$LOG" >&2
    { echo "pip install pillow-simd==$VERSION failed; last lines of the log:"; tail -n 20 "$LOG"; } \
        >"$VENV/BUILD-FAILED"
    echo "setup_pillow_simd: build failed; the benchmark will say so" >&2
    exit 0
fi

SITE_SIMD=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
SITE_BASE=$("$BASE_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$(cd "$SITE_BASE" && pwd)" >"$SITE_SIMD/zz_fastdecode_base_venv.pth"

if check; then
    rm -f "$VENV/BUILD-FAILED"
    echo "setup_pillow_simd: ok, $("$VENV/bin/python" -c 'import PIL; print("pillow-simd", PIL.__version__)')"
else
    echo "built, but 'import PIL, torch, torchvision' fails in $VENV" >"$VENV/BUILD-FAILED"
    echo "setup_pillow_simd: built, but the venv does not import torch/torchvision with it" >&2
fi
exit 0
