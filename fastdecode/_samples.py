"""Moved to ``fastdecode.data._samples``; this old path stays for one release (same module)."""

import sys

from fastdecode.data import _samples as _module

sys.modules[__name__] = _module
