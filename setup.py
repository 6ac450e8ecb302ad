"""Build of the fastdecode extension.

Environment switches (the build is forced when they change):
  FASTDECODE_SANITIZE=1  ASan + UBSan (run Python with libasan preloaded)
  FASTDECODE_DEBUG=1     -O0 -g
"""

import os
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent
C_SOURCES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "src_c").glob("fd_*.c"))


def libjpeg_flags():
    """Compile and link flags for libjpeg-turbo's libjpeg API, via pkg-config."""
    try:
        version = subprocess.run(
            ["pkg-config", "--modversion", "libjpeg"], capture_output=True, text=True, check=True
        ).stdout.strip()
        cflags = subprocess.run(
            ["pkg-config", "--cflags", "libjpeg"], capture_output=True, text=True, check=True
        ).stdout
        libs = subprocess.run(
            ["pkg-config", "--libs", "libjpeg"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        sys.exit(
            "fastdecode needs libjpeg-turbo's development files (pkg-config 'libjpeg').\n"
            "  Debian/Ubuntu: apt-get install libjpeg62-turbo-dev pkg-config\n"
            "  Fedora/RHEL:   dnf install libjpeg-turbo-devel pkgconf\n"
            "  macOS:         brew install jpeg-turbo pkg-config"
        )
    major = int(version.split(".")[0] or 0)
    if major < 1 or version.startswith("1.") and int(version.split(".")[1]) < 5:
        sys.exit(f"fastdecode needs libjpeg-turbo >= 1.5, pkg-config found {version}")
    return shlex.split(cflags), shlex.split(libs)


def build_flags():
    cflags = ["-std=c99", "-Wall", "-Wextra", "-Wno-unused-function"]
    ldflags = []
    if os.environ.get("FASTDECODE_SANITIZE") == "1":
        san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
        cflags += san + ["-O1", "-g"]
        ldflags += san
    elif os.environ.get("FASTDECODE_DEBUG") == "1":
        cflags += ["-O0", "-g"]
    else:
        cflags += ["-O3"]
    return cflags, ldflags


class BuildExt(build_ext):
    """Rebuilds everything when the flag set changes (e.g. sanitizers on/off)."""

    def run(self):
        cflags, ldflags = build_flags()
        stamp = Path(self.build_temp) / "fastdecode-flags.txt"
        signature = " ".join(cflags + ldflags)
        if not stamp.exists() or stamp.read_text() != signature:
            self.force = True
        super().run()
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(signature)


def extensions():
    from Cython.Build import cythonize

    jpeg_cflags, jpeg_libs = libjpeg_flags()
    cflags, ldflags = build_flags()
    ext = Extension(
        "fastdecode._native",
        sources=["fastdecode/_native.pyx"] + C_SOURCES,
        include_dirs=["src_c"],
        extra_compile_args=cflags + jpeg_cflags,
        extra_link_args=ldflags + jpeg_libs + ["-lm", "-lpthread"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )
    return cythonize(
        [ext],
        compiler_directives={"language_level": "3", "embedsignature": True},
        include_path=["fastdecode"],
        quiet=True,
    )


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt})
