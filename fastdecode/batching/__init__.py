"""Batches and their seeds: the batch buffers a dataset decodes into (in
place, in shared memory), the shared slot pool, the zero-copy collate of
batch rows (``fastdecode.collate``), the rows decoder of the integrations
(and the detached plan it sends to Ray's workers), and
the per-sample seeding that datasets, the loader and the integrations all
read.

Imports only the decode core and ``fastdecode.transforms``; never a dataset
or the loader. Decision records: docs/decisions/datasets.md (the buffers,
the pool), loaders-resume.md (the seeding), ray.md (the rows decoder).
"""
