"""Converting image files: every conversion engine, its writers and its report.

`jobs`: one file (read, decode, shrink, write atomically) and the worker
processes that run many; `output`: the BMP/JPEG writers, the atomic write and
the completeness check; `shards`: an ImageFolder tree as WebDataset tar
shards; `summary`: what a run did, as text and as its ``--json`` file. Used by
``fastdecode convert``, ``fastdecode.ray.run_convert_jobs`` and
``fastdecode.webdataset.write_shards``; imports only the decode core and
storage. Decision record: docs/decisions/cli.md.
"""
