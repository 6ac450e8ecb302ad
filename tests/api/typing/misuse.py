# Mistakes mypy must catch (tests/api/test_typing.py counts one error per line marked E).
from __future__ import annotations

import fastdecode as fd

data = b"\xff\xd8"
fd.decode_jpeg(data, crop=(0, 0, 10))  # E
fd.decode_jpeg(data, scale="half")  # E
fd.read_header(data).width.upper()  # E
fd.FastLoader(fd.FastImageFolder("root"), batch_size="8")  # E
fd.read_image("cat.jpg", sizes=(8, 8))  # E
fd.read_image("cat.jpg", max_work_per_byte="lots")  # E
fd.decode_image(data, interpolation=2)  # E
