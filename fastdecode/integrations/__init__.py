"""Integrations with other frameworks' data code: each module plugs fastdecode
into one framework. Ray Data (``ray``; its face ``fastdecode.ray``),
WebDataset (``webdataset``, its bounded tar reader ``_wds_reader`` and its
``WebDataset`` class ``_wds_dataset``; the face ``fastdecode.webdataset``),
timm (``timm``) and Hugging Face Accelerate (``accelerate``). They import the
datasets, the loader and ``fastdecode.conversion`` (whose engines the faces
also export), never the reverse. Decision records: docs/decisions/ray.md,
docs/decisions/webdataset.md."""
