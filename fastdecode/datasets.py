"""Public path of ``fastdecode.data.datasets``: the same module object."""

import sys

from fastdecode.data import datasets as _module

sys.modules[__name__] = _module
