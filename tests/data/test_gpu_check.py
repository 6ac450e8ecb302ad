"""benchmarks/gpu_check (the CUDA path's prepared check), where no GPU is:
its one-line skip, its argument parsing and its pure helpers on fake numbers."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
check = importlib.import_module("benchmarks.gpu_check")


def no_gpu_env(**extra: str) -> dict[str, str]:
    """This environment with every GPU hidden, so the skip is tested on any machine."""
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    env.update(CUDA_VISIBLE_DEVICES="", PYTHON=sys.executable, **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


# --------------------------------------------------------------------------
# without CUDA: one line, exit 0, the JSON


@pytest.mark.parametrize("entry", [pytest.param("sh", marks=pytest.mark.slow), "module"])
def test_without_cuda_says_so_in_one_line_and_writes_the_json(tmp_path, entry):
    out = tmp_path / "out"
    if entry == "sh":
        cmd = ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--json",
               str(tmp_path / "given.json")]
        written, env = tmp_path / "given.json", no_gpu_env()
    else:  # no --json: $OUT/gpu_check.json
        cmd = [sys.executable, "-m", "benchmarks.gpu_check"]
        written, env = out / "gpu_check.json", no_gpu_env(OUT=str(out))
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: skipped: no CUDA ("), proc.stdout
    assert "Traceback" not in proc.stderr
    result = json.loads(written.read_text())
    assert result["status"] == "skipped: no CUDA" and result["note"] == check.LAST_RUN


# --------------------------------------------------------------------------
# argument parsing


def test_defaults(monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    args = check.parse_args([])
    assert (args.images, args.batch, args.size, args.rounds, args.json, args.workers) == \
        (512, 64, 224, 3, None, None)


def test_json_defaults_to_out(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert check.parse_args([]).json == tmp_path / "gpu_check.json"
    assert check.parse_args(["--json", "x.json"]).json == Path("x.json")


@pytest.mark.parametrize("argv,message", [
    pytest.param(["--rounds", "2"], "--rounds must be >= 3", id="two-rounds"),
    pytest.param(["--batch", "0"], "--batch must be >= 1", id="zero-batch"),
    pytest.param(["--images", "-1"], "--images must be >= 1", id="negative-images"),
    pytest.param(["--workers", "0"], "--workers must be >= 1", id="no-workers"),
    pytest.param(["--skip", "nothing"], "invalid choice", id="unknown-step"),
])
def test_bad_arguments_are_refused(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        check.parse_args(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_skip_repeats():
    assert check.parse_args(["--skip", "tests", "--skip", "doctor"]).skip == ["tests", "doctor"]


# --------------------------------------------------------------------------
# pure helpers on fake numbers


@pytest.mark.parametrize("values,median,spread,noisy", [
    pytest.param([100.0, 110.0, 90.0], 100.0, 0.2, True, id="noisy"),
    pytest.param([1000.0, 1010.0, 995.0, 1005.0], 1002.5, 15 / 1002.5, False, id="steady-even"),
    pytest.param([7.0], 7.0, 0.0, False, id="one"),
])
def test_summarize(values, median, spread, noisy):
    s = check.summarize(values)
    assert s["median"] == pytest.approx(median) and s["spread"] == pytest.approx(spread)
    assert (s["min"], s["max"], s["n"], s["noisy"]) == (min(values), max(values), len(values),
                                                        noisy)


def test_summarize_refuses_nothing():
    with pytest.raises(ValueError, match="no values"):
        check.summarize([])


@pytest.mark.parametrize("nbytes,ms,expected", [
    pytest.param(10**9, 1000.0, 1.0, id="1GB-1s"),
    pytest.param(38_535_168, 1.5, 25.69, id="batch-of-224"),
])
def test_gb_per_s(nbytes, ms, expected):
    assert check.gb_per_s(nbytes, ms) == pytest.approx(expected, rel=1e-3)


def test_gb_per_s_refuses_zero_time():
    with pytest.raises(ValueError, match="not a duration"):
        check.gb_per_s(10, 0.0)


@pytest.mark.parametrize("output,expected", [
    pytest.param("..\n2 passed in 3.1s\n", dict(passed=2), id="passed"),
    pytest.param("F.s\n1 failed, 1 passed, 1 skipped in 2s\n",
                 dict(failed=1, passed=1, skipped=1), id="mixed"),
    pytest.param("E\n1 passed, 2 errors in 1s\n", dict(passed=1, error=2), id="errors"),
    pytest.param("ImportError: nothing ran\n", {}, id="no-summary"),
])
def test_pytest_counts(output, expected):
    assert check.pytest_counts(output) == {"passed": 0, "failed": 0, "skipped": 0, "error": 0,
                                        **expected}


@pytest.mark.parametrize("oks,status", [
    pytest.param([True, True], "ok", id="all-ok"),
    pytest.param([True, False], "failed: b", id="one-failed"),
    pytest.param([], "ok", id="none-ran"),
])
def test_status_of(oks, status):
    steps = {name: {"ok": ok} for name, ok in zip("ab", oks)}
    assert check.status_of({"steps": steps}) == status


def test_step_records_an_exception_and_goes_on():
    steps: dict = {}

    def boom():
        raise RuntimeError("no ring")

    check.step("parity", boom, steps)
    check.step("doctor", lambda: {"ok": True, "summary": "fine"}, steps)
    assert steps["parity"]["ok"] is False and steps["parity"]["error"] == "RuntimeError: no ring"
    assert steps["doctor"]["ok"] is True and "wall_s" in steps["doctor"]


def fake_result() -> dict:
    rates = {"cuda": [3000.0, 3100.0, 2900.0], "cpu": [1500.0, 1400.0, 1600.0]}
    rows = [{"name": k, "startup_s": 1.25, "images_per_s": check.summarize(v)}
            for k, v in rates.items()]
    kinds = [{"name": "ring .to()", "gb_per_s": check.summarize([24.0, 25.0, 26.0])}]
    steps = {"throughput": {"ok": True, "summary": "cuda / cpu = 2.00x", "rows": rows},
             "copies": {"ok": True, "summary": "ring 25 GB/s", "kinds": kinds},
             "doctor": {"ok": False, "error": "JSONDecodeError: nothing"}}
    result = {"device": "Fake GPU", "torch": "9.9", "wall_s": 42.4, "steps": steps}
    result["status"] = check.status_of(result)
    return result


def test_format_report_on_fake_numbers():
    lines = check.format_report(fake_result()).splitlines()
    assert lines[0] == "gpu_check: failed: doctor  (Fake GPU, torch 9.9, 42 s)"
    assert "[ok  ] throughput: cuda / cpu = 2.00x" in lines
    assert "[FAIL] doctor: JSONDecodeError: nothing" in lines
    cuda = next(ln for ln in lines if ln.strip().startswith("cuda "))
    assert "3000 img/s" in cuda and "spread 6.7%" in cuda and "start-up 1.25 s" in cuda
    assert "noisy" not in cuda
    ring = next(ln for ln in lines if "ring .to()" in ln)
    assert "25.00 GB/s" in ring and "min 24.00" in ring


@pytest.mark.slow  # a pytest run that imports torch and collects test_loader: 10 s
def test_the_cuda_tests_it_runs_are_collected():
    """Each node id of CUDA_TESTS names a test that exists (a rename would
    leave the one GPU run testing less than it says)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "-p", "no:benchmark", *check.CUDA_TESTS],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    collected = [ln for ln in proc.stdout.splitlines() if "::" in ln]
    for node in check.CUDA_TESTS:
        assert any(ln == node or ln.startswith(node + "::") or ln.startswith(node + "[")
                   for ln in collected), node
