"""Public path of ``fastdecode.data.ray``: the same module object."""

import sys

from fastdecode.data import ray as _module

sys.modules[__name__] = _module
