"""Build of the fastdecode extension.

Environment switches (the build is forced when they change):
  FASTDECODE_SANITIZE=1  ASan + UBSan (run Python with libasan preloaded)
  FASTDECODE_DEBUG=1     -O0 -g

libjpeg-turbo is found through pkg-config ('libjpeg'), or, where there is no
pkg-config (Windows) or to choose another copy, through
  FASTDECODE_JPEG_INCLUDE  directories (os.pathsep-separated) with jpeglib.h
                           and jconfig.h
  FASTDECODE_JPEG_LIB      directory with the library to link
  FASTDECODE_JPEG_LIBNAME  its name without prefix/suffix (default: jpeg)

libspng (PNG) and libwebp (WebP) are optional, found through pkg-config
('spng', 'libwebp'); FASTDECODE_NO_PNG=1 / FASTDECODE_NO_WEBP=1 leave one out.
Without one, that format decodes through Pillow.
"""

import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent
C_SOURCES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "src_c").glob("fd_*.c"))


def check_version(version, source):
    parts = [int(p) for p in re.findall(r"\d+", version)[:2]] + [0, 0]
    if tuple(parts[:2]) < (1, 5):
        sys.exit(f"fastdecode needs libjpeg-turbo >= 1.5, {source} found {version}")


def libjpeg_from_env():
    """Settings from FASTDECODE_JPEG_INCLUDE/_LIB, or None when unset."""
    include = os.environ.get("FASTDECODE_JPEG_INCLUDE")
    libdir = os.environ.get("FASTDECODE_JPEG_LIB")
    if not include and not libdir:
        return None
    if not (include and libdir):
        sys.exit("set both FASTDECODE_JPEG_INCLUDE and FASTDECODE_JPEG_LIB (or neither)")
    include_dirs = [d for d in include.split(os.pathsep) if d]
    headers = {
        name: next((Path(d) / name for d in include_dirs if (Path(d) / name).is_file()), None)
        for name in ("jpeglib.h", "jconfig.h")
    }
    missing = [name for name, path in headers.items() if path is None]
    if missing:
        sys.exit(f"FASTDECODE_JPEG_INCLUDE={include}: no {', '.join(missing)} there")
    if not Path(libdir).is_dir():
        sys.exit(f"FASTDECODE_JPEG_LIB={libdir}: not a directory")
    match = re.search(r"#define\s+LIBJPEG_TURBO_VERSION\s+([0-9.]+)",
                      headers["jconfig.h"].read_text())
    if not match:
        sys.exit(f"{headers['jconfig.h']}: not libjpeg-turbo's (no LIBJPEG_TURBO_VERSION)")
    check_version(match.group(1), headers["jconfig.h"])
    return dict(include_dirs=include_dirs, library_dirs=[libdir],
                libraries=[os.environ.get("FASTDECODE_JPEG_LIBNAME", "jpeg")],
                extra_compile_args=[], extra_link_args=[])


def libjpeg_from_pkg_config():
    def run(*args):
        return subprocess.run(["pkg-config", *args, "libjpeg"], capture_output=True, text=True,
                              check=True).stdout

    try:
        version, cflags, libs = run("--modversion").strip(), run("--cflags"), run("--libs")
    except (OSError, subprocess.CalledProcessError):
        return None
    check_version(version, "pkg-config")
    return dict(include_dirs=[], library_dirs=[], libraries=[],
                extra_compile_args=shlex.split(cflags), extra_link_args=shlex.split(libs))


def libjpeg_settings():
    """How to compile and link against libjpeg-turbo's libjpeg API."""
    settings = libjpeg_from_env() or libjpeg_from_pkg_config()
    if settings is None:
        sys.exit(
            "fastdecode needs libjpeg-turbo's development files (pkg-config 'libjpeg').\n"
            "  Debian/Ubuntu: apt-get install libjpeg62-turbo-dev pkg-config\n"
            "  Fedora/RHEL:   dnf install libjpeg-turbo-devel pkgconf\n"
            "  Alpine:        apk add libjpeg-turbo-dev pkgconf\n"
            "  macOS:         brew install jpeg-turbo pkg-config\n"
            "  Windows:       vcpkg install libjpeg-turbo:x64-windows, then set\n"
            "                 FASTDECODE_JPEG_INCLUDE=<vcpkg>\\installed\\x64-windows\\include\n"
            "                 FASTDECODE_JPEG_LIB=<vcpkg>\\installed\\x64-windows\\lib\n"
            "  (those two variables also point any platform at another libjpeg-turbo)"
        )
    return settings


# Optional codecs: (pkg-config names, the macro that makes the format a native
# row in src_c/fd_formats.h). Without one the format goes to Pillow, and
# `fastdecode info` says so (docs/decisions/png-webp.md).
OPTIONAL_CODECS = {
    "png": (("spng",), "FD_HAVE_SPNG"),
    "webp": (("libwebp",), "FD_HAVE_WEBP"),
    # not a format: PNG's IDAT inflated by libdeflate (about twice zlib's speed)
    "libdeflate": (("libdeflate",), "FD_HAVE_LIBDEFLATE"),
}


def optional_codec_settings():
    """Compile and link flags of the optional codecs pkg-config finds
    (FASTDECODE_NO_<NAME>=1 leaves one out), and the names of those it does."""
    macros, cflags, libs, found = [], [], [], []
    for name, (packages, macro) in OPTIONAL_CODECS.items():
        if os.environ.get(f"FASTDECODE_NO_{name.upper()}") == "1":
            continue
        try:
            out = [subprocess.run(["pkg-config", flag, *packages], capture_output=True,
                                  text=True, check=True).stdout for flag in ("--cflags", "--libs")]
        except (OSError, subprocess.CalledProcessError):
            print(f"fastdecode: {'/'.join(packages)} not found by pkg-config: {name.upper()} "
                  f"will decode through Pillow", file=sys.stderr)
            continue
        macros.append((macro, "1"))
        cflags += shlex.split(out[0])
        libs += shlex.split(out[1])
        found.append(name)
    return macros, cflags, libs, found


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
    """Rebuilds everything when the flag set changes (e.g. sanitizers on/off);
    ``-j N`` compiles the extension's sources N at a time (build_ext's own
    -j only spreads whole extensions, and there is one)."""

    def run(self):
        cflags, ldflags = build_flags()
        stamp = Path(self.build_temp) / "fastdecode-flags.txt"
        codecs = optional_codec_settings()[3]  # a codec found or lost: rebuild
        signature = " ".join(cflags + ldflags + codecs)
        if not stamp.exists() or stamp.read_text() != signature:
            self.force = True
        super().run()
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(signature)

    def build_extension(self, ext):
        jobs = self.parallel if isinstance(self.parallel, int) else 1
        if jobs <= 1 or len(ext.sources) <= 1:
            return super().build_extension(ext)
        compile_one = self.compiler.compile

        def compile_sources(sources, **kwargs):
            with ThreadPoolExecutor(jobs) as pool:  # each source: its own gcc
                objects = pool.map(lambda source: compile_one([source], **kwargs), sources)
                return [obj for objs in objects for obj in objs]

        self.compiler.compile = compile_sources
        try:
            return super().build_extension(ext)
        finally:
            del self.compiler.compile  # the class's again


def extensions():
    from Cython.Build import cythonize

    jpeg = libjpeg_settings()
    cflags, ldflags = build_flags()
    codec_macros, codec_cflags, codec_libs, _ = optional_codec_settings()
    ext = Extension(
        "fastdecode._native",
        sources=["fastdecode/_native.pyx"] + C_SOURCES,
        include_dirs=["src_c"] + jpeg["include_dirs"],
        library_dirs=jpeg["library_dirs"],
        libraries=jpeg["libraries"],
        extra_compile_args=cflags + jpeg["extra_compile_args"] + codec_cflags,
        extra_link_args=ldflags + jpeg["extra_link_args"] + codec_libs + ["-lm", "-lpthread"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")] + codec_macros,
    )
    return cythonize(
        [ext],
        compiler_directives={"language_level": "3", "embedsignature": True},
        include_path=["fastdecode"],
        quiet=True,
    )


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt})
