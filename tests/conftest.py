"""Test-wide settings; the shared helpers live in the ``helpers`` package."""
