"""Moved to ``fastdecode.cli.datagen``; this old path stays for one release (same module)."""

import sys

from fastdecode.cli import datagen as _module

sys.modules[__name__] = _module
