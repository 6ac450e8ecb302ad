"""Slow storage for the tests: latencyfs (benchmarks/latencyfs.c), a FUSE
passthrough that adds a delay to every open and counts what reaches it.

Fixtures:

``latencyfs_available`` (session)
    Builds the binary if needed; skips the test with the reason when there is
    no /dev/fuse, no fusermount3, or no gcc / fuse3 headers.

``storage_tree`` (session)
    A small generated ImageFolder tree (2 classes x 12 JPEGs), the source the
    mounts serve. Tests that delete or break a file make their own copy.

``latency_tree`` (function)
    ``storage_tree`` mounted through latencyfs, unmounted when the test ends,
    also when its body raises. A ``LatencyTree(mount_path, stats_reader,
    set_delay, fs)``:

    - ``mount_path``: the ``Path`` to read the tree from (the same relative
      paths as ``storage_tree``);
    - ``stats_reader()``: the daemon's counters as a dict: ``opens``,
      ``reads``, ``bytes``, ``open_errors``, ``getattrs`` (attribute
      requests), ``max_in_flight`` (the most
      opens + reads it served at once), ``delay_ms``, ``cpu_user_s``,
      ``cpu_system_s``, ``pid``. Reading them opens nothing that is counted;
    - ``set_delay(ms)``: the delay of every later open;
    - ``fs``: the ``benchmarks._latencyfs.LatencyFS`` itself, for
      ``fs.reset()`` (zero the counters), ``fs.fail(relative_path)`` (opens
      of that file fail with EIO from then on), ``fs.set_bandwidth(mbps)``.

    The delay starts at 0 ms, or at ``request.param`` when parametrized
    indirectly: ``@pytest.mark.parametrize("latency_tree", [5], indirect=True)``.

``mount_latencyfs`` (function)
    ``mount_latencyfs(source, delay_ms=0)``: any other folder mounted the same
    way (a test's own copy of the tree), unmounted at the test's end; returns
    a ``LatencyTree``.

``own_tree`` (function)
    A copy of ``storage_tree`` in the test's tmp_path, to delete or break.

They are defined in tests/helpers/latency.py; a module elsewhere (tests/cli)
imports the ones it uses from there.
"""

from helpers.latency import (  # noqa: F401  (fixtures)
    LatencyTree,
    latency_tree,
    latencyfs_available,
    mount_latencyfs,
    own_tree,
    storage_tree,
)
