"""Where a sample's bytes come from: local files and remote roots (s3://,
gs://, http://, ... through fsspec), folder walking and file lists, the
compact shared sample list, the read-ahead window and the shared cache.

The reader factory (``_readers``) tells a remote path from a local one and
makes the reader of each: a new storage backend is a
:class:`~fastdecode.storage._readers.Reader` it returns for its paths. The
read-ahead window (``_window``; its options ``_readahead``; the window in C
and a dataset's reads ``_reads``) reads through a reader; ``_remote`` reads
fsspec roots (its fetches ``_remote_fetch``, its listing ``_remote_index``);
``_folder`` and ``_listing`` walk trees; ``_samples`` holds the sample list;
``_cache`` is the shared RAM cache.

Imports only the decode core (``fastdecode._native``, ``_options``,
``_system``, ``_atomic``, ``errors``); the datasets, the loader, the
integrations and conversion read files through it. Decision records:
docs/decisions/storage.md (and the records it links) and
docs/decisions/listing.md.
"""
