"""The latencyfs fixtures (tests/helpers/latency.py, documented in
tests/storage/conftest.py) for the doctor's storage tests."""

from helpers.latency import (  # noqa: F401  (fixtures)
    latency_tree,
    latencyfs_available,
    mount_latencyfs,
    storage_tree,
)
