"""The bundled benchmarks (`fastdecode bench`), one package: ``benchmarks`` in
a checkout, ``fastdecode.benchmarks`` in the wheel. Each section also runs on
its own: ``python -m benchmarks.bench_decode`` (likewise bench_transforms,
bench_loader) from the checkout."""
