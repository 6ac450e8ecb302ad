"""Datasets and loaders: FastImageFolder / FastDatasetFolder
(``fastdecode.data.datasets``, public as ``fastdecode.datasets``) and
FastLoader with its collate (``fastdecode.data.loader``, public as
``fastdecode.loader``)."""
