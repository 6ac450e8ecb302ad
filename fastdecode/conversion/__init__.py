"""Converting image files: the per-file job and its workers, the writers.

`jobs`: one file (read, decode, shrink, write atomically) and the worker
processes that run many; `output`: the BMP/JPEG writers, the atomic write and
the completeness check. Shared by ``fastdecode convert``,
``fastdecode.ray.run_convert_jobs`` and ``fastdecode.webdataset.write_shards``;
imports only the decode core.
"""
