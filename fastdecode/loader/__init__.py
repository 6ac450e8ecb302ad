"""fastdecode.loader: FastLoader, the zero-copy collate and the worker set-up
that pins threads.

Without CUDA (or without ``device=``) FastLoader is a DataLoader whose
workers decode each batch straight into one shared-memory tensor that
crosses to the main process without a copy (``collate``), with
``pin_memory`` doing the one copy into page-locked memory.

With ``device='cuda'`` the batches land in a ring of shared slots that is
registered once with ``cudaHostRegister``: the workers' writes are already
pinned, the host-to-device copy runs on a side stream, uint8 -> float and
normalization run on the GPU, and a slot is reused only after the CUDA event
of its copy completed.

What FastLoader needs of a dataset is written down in
``loader/_protocol.py``; the package's modules and the direction of their
imports are in docs/architecture.md. Decision records:
docs/decisions/loaders.md, loaders-workers.md, loaders-resume.md.
"""

from fastdecode._lazy import needs_extra

try:
    from fastdecode.batching._buffers import collate
    from fastdecode.loader._loader import FastLoader
    from fastdecode.loader._setup import worker_init_fn
except ModuleNotFoundError as exc:  # without torch: say which extra installs it
    error = needs_extra(exc, "fastdecode.loader")
    if error is None:
        raise
    raise error from exc

__all__ = ["FastLoader", "collate", "worker_init_fn"]
