"""Moved to ``fastdecode.cli.convert``; this old path stays for one release (same module)."""

import sys

from fastdecode.cli import convert as _module

sys.modules[__name__] = _module
