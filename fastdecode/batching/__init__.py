"""Batches and their seeds: the batch buffers a dataset decodes into (in
place, in shared memory), the shared slot pool, collate of batch rows, the
rows decoder of the integrations and the per-sample seeding that datasets,
the loader and the integrations all read.

Imports only the decode core and ``fastdecode.transforms``; never a dataset
or the loader. Decision record: docs/decisions/loaders.md.
"""
