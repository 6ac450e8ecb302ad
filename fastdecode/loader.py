"""Public path of ``fastdecode.data.loader``: the same module object."""

import sys

from fastdecode.data import loader as _module

sys.modules[__name__] = _module
