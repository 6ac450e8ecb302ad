"""Public path of ``fastdecode.data.webdataset``: the same module object."""

import sys

from fastdecode.data import webdataset as _module

sys.modules[__name__] = _module
