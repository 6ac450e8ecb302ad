"""Per-image cost of timm's default training chain: fused vs timm's PIL chain
(not a test; the commands and numbers are in DESIGN.md, "Colour steps").

    python jitter_cost.py callgrind fused|pil GO_FILE   # under callgrind_count.sh (20 photos)
    python jitter_cost.py time fused|pil ROUNDS         # prints the min us/image

``fused``: ``fuse(create_transform(224, is_training=True))(data)``;
``pil``: the chain on ``Image.open(data).convert('RGB')`` (what ImageFolder
runs). 20 photos of the shared corpus, the same seed for both.
"""

from __future__ import annotations

import io
import os
import pathlib
import sys
import time

import torch
from PIL import Image
from timm.data import create_transform

from fastdecode.transforms import fuse

torch.set_num_threads(1)
mode, variant = sys.argv[1], sys.argv[2]
files = sorted(pathlib.Path("/work/shared/corpus/photos").rglob("*.JPEG"))[:20]
datas = [p.read_bytes() for p in files]
chain = create_transform(224, is_training=True)
f = fuse(chain)


def pil(d):
    with Image.open(io.BytesIO(d)) as im:
        return chain(im.convert("RGB"))


run = f if variant == "fused" else pil
for d in datas:  # warm: plans, tables, scratch
    run(d)
CODE = "torch.manual_seed(0)\nfor d in datas: run(d)\n"
if mode == "callgrind":
    print("READY", flush=True)
    while not os.path.exists(sys.argv[3]):
        time.sleep(0.2)
    exec(CODE)
else:
    best = float("inf")
    for _ in range(int(sys.argv[3])):
        t0 = time.perf_counter()
        exec(CODE)
        best = min(best, time.perf_counter() - t0)
    print(f"{variant} {best / len(datas) * 1e6:.0f} us/image")
