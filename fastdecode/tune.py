"""Moved to ``fastdecode.cli.tune``; this old path stays for one release (same module)."""

import sys

from fastdecode.cli import tune as _module

sys.modules[__name__] = _module
