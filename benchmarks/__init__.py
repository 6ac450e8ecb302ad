"""The bundled benchmarks (`fastdecode bench`); each script also runs on its own."""
