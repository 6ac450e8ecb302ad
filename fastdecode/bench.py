"""Moved to ``fastdecode.cli.bench``; this old path stays for one release (same module)."""

import sys

from fastdecode.cli import bench as _module

sys.modules[__name__] = _module
