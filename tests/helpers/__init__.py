"""Helpers the tests share: the optional shared corpora, generated JPEGs and
ImageFolder trees, byte mutations. Importable as ``helpers`` (pytest puts
``tests/`` on the path through ``pythonpath`` in pyproject.toml)."""
