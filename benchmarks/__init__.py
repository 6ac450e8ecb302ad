"""The bundled benchmarks (`fastdecode bench`), one package with one import
name, ``benchmarks``: the top-level folder of a checkout (on the path with the
checkout) and the top-level package beside ``fastdecode`` in the wheel. Its
modules import each other relatively. Each section also runs on its own:
``python -m benchmarks.bench_decode`` (likewise bench_transforms, bench_loader).
Why one name, and this one: docs/decisions/benchmarks.md, "One import name".

The benchmarks measure fastdecode through its public names. These internals
are the documented exceptions, each because the benchmark measures or records
something no public name gives:

- ``fastdecode._system`` (``usable_cpus``, ``time_slice_ns``,
  ``one_thread_per_pool``): the machine facts every report records and the
  thread setting of the single-process rows (_common, bench_loader,
  bench_recipes, bench_remote, bench_scaling, bench_storage, gpu_check);
- ``fastdecode.cli.datagen.generate_imagenet_like``: the default data set that
  ``fastdecode datagen`` makes (_common, gpu_check);
- ``fastdecode.api`` and ``fastdecode._native``: bench_floor records the
  decode and resize calls a fused chain makes and replays them;
- ``fastdecode.conversion.output`` (``EncodeOptions``, ``write_bmp``):
  bench_decode's BMP files, written as ``fastdecode convert`` writes them;
- ``fastdecode.storage._window.ReadAhead``, ``fastdecode.storage._reads``
  (the native window, and ``FASTDECODE_NATIVE_READS``, the switch between
  the read pool and Python threads) and
  ``fastdecode.storage._readahead.DEFAULT_DEPTH``: bench_io_ways,
  bench_image_list and bench_listing compare the ways a file is read;
- ``fastdecode.storage._listing.list_images``: the files a Ray read covers
  (bench_ray);
- ``fastdecode.storage._remote_index.cache_dir``: where bench_listing keeps its
  generated tree;
- ``fastdecode.loader._cuda_ring.CudaRing``: gpu_check times the ring's copies.
"""
