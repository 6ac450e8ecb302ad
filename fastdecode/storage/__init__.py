"""Where a sample's bytes come from: local files and remote roots (s3://,
gs://, http://, ... through fsspec), folder walking and file lists, the
compact shared sample list, the read-ahead window and the shared cache.

Imports only the decode core (``fastdecode._native``, ``_options``,
``errors``); the datasets, the loader, the integrations and conversion read
files through it. Decision records: docs/decisions/storage.md and
docs/decisions/listing.md.
"""
