"""One atheris (libFuzzer) fuzz target: python tests/fuzz/fuzz.py TARGET [libFuzzer args].

Run it through tests/fuzz/run.py (`make fuzz`), which puts the ASan + UBSan +
coverage-instrumented extension first on PYTHONPATH and preloads atheris'
ASan+libFuzzer runtime (asan_with_fuzzer.so) so that the C code's edges feed
libFuzzer. Python-level edges of fastdecode's own modules (api.py, the
Pillow fallback) are instrumented by atheris.instrument_imports.

FD_FUZZ_COLLECT=DIR: an oracle finding (a Python-level bug: an undocumented
exception, a wrong shape, a crop that is not a slice) is saved under DIR,
once per distinct message, and fuzzing goes on; without it the finding is
raised, which libFuzzer reports as a crash (what minimization wants). Native
crashes (ASan, UBSan, signals), timeouts and OOMs are always libFuzzer crashes.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path

import atheris

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run as a file: tests/ holds the fuzz package

with atheris.instrument_imports(include=["fastdecode"]):
    import fastdecode  # noqa: F401  (instrumented before targets imports it)

from fuzz import targets  # noqa: E402

if len(sys.argv) < 2 or sys.argv[1] not in targets.TARGETS:
    sys.exit(f"usage: fuzz.py {{{','.join(targets.TARGETS)}}} [libFuzzer args]")
TARGET = sys.argv.pop(1)
COLLECT = os.environ.get("FD_FUZZ_COLLECT")
_seen: set[str] = set()


def record(data: bytes, finding: targets.Finding) -> None:
    message = re.sub(r"\d+", "N", str(finding))[:200]
    key = hashlib.sha1(f"{TARGET}:{message}".encode()).hexdigest()[:12]
    if key in _seen:
        return
    _seen.add(key)
    out = Path(COLLECT)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{TARGET}-{key}.bin"
    if not path.exists():
        path.write_bytes(data)
        (out / f"{TARGET}-{key}.txt").write_text(f"{TARGET}\n{finding}\n")
    print(f"FINDING {path.name}: {finding}", file=sys.stderr, flush=True)


def test_one_input(data: bytes) -> None:
    try:
        targets.run(TARGET, data)
    except targets.Finding as finding:
        if not COLLECT:
            raise
        record(data, finding)


targets.warm_up(TARGET)
atheris.Setup(sys.argv, test_one_input)
atheris.Fuzz()
