"""``python -m fastdecode``: the command line of ``fastdecode.cli``."""

import sys

from fastdecode.cli.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
