"""Moved to ``fastdecode.cli.doctor``; this old path stays for one release (same module)."""

import sys

from fastdecode.cli import doctor as _module

sys.modules[__name__] = _module
