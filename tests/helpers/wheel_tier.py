"""The wheel tier of `make wheel-test` (and so of .ci/run): the default tier
against the installed wheel, minus the tests named here, each for a reason
that holds on the machine that built the wheel (docs/decisions/wheels.md).

There the wheel differs from the checkout only by packaging: its Python is the
checkout's byte for byte (tests/packaging/test_installed_package.py checks it),
its extension is compiled from the sdist by the same compiler and linked to a
copy of the same libjpeg-turbo, and the venv holds the lock's packages. So the
tier keeps what packaging can break (every test module is collected, so every
import resolves in the wheel; the decoders, the fused transforms, the datasets,
the loaders with forked and spawned workers, the CLI, the stubs) and leaves out
what costs minutes for Python the checkout's run has just tested: tests of the
source tree itself, fault injection, endurance runs, servers and other
frameworks' processes. The wheel job (other platforms, other libjpeg-turbo
builds, other compilers) runs the whole default tier instead.

    python tests/helpers/wheel_tier.py    # pytest's --deselect options

Each entry is a node-id prefix relative to the repository root (a folder, a
module, or module::test), as pytest's ``--deselect`` takes it.
"""

from __future__ import annotations

import sys

LEFT_OUT: dict[str, tuple[str, ...]] = {
    # tests of the source tree, not of the package
    "checkout": (
        "tests/meta/",  # the layout, the lock, the tiers, the test helpers
        "tests/api/test_docs.py::test_docs_build_strict",  # builds docs/ with mkdocs
        # compiles its own sanitized copies of src_c/, not the wheel's extension
        "tests/core/test_readpool.py::test_the_pool_is_clean_under_sanitizers",
    ),
    # processes killed, interrupted or deprived on purpose
    "faults": (
        "tests/data/test_faults.py",
        "tests/data/test_resume_killed.py",
        "tests/data/test_save_state.py::test_a_save_killed_at_any_point_leaves_a_whole_state",
        "tests/cli/test_convert_faults.py",
        "tests/data/test_dataset_errors.py::test_no_permission_cases_without_dac_override",
    ),
    # long runs that look for growth or leaked state
    "endurance": (
        "tests/data/test_soak.py",
        "tests/core/test_leaks.py",
        "tests/core/test_regressions.py::test_fast_crops_after_other_decodes_on_one_thread_are_exact",
    ),
    # servers in a loopback namespace, other frameworks' process groups
    "services": (
        "tests/data/test_remote.py",
        "tests/data/test_frameworks.py",
        "tests/data/test_distributed.py",
        "tests/data/test_ray.py",
        "tests/data/test_webdataset.py",
    ),
}


def prefixes() -> list[str]:
    """Every node-id prefix the wheel tier leaves out."""
    return [p for group in LEFT_OUT.values() for p in group]


def deselect_args() -> list[str]:
    """pytest's command-line options that leave them out."""
    return [f"--deselect={p}" for p in prefixes()]


def main(argv: list[str]) -> int:
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    print(" ".join(deselect_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
