"""Counts the Python instructions of one fused call (not a test; run by callgrind_count.sh).

Under ``valgrind --tool=callgrind --toggle-collect=builtin_exec``: prepares
20 photos and the chain, prints READY, waits for the go file, then runs
either the fused calls (``fused``) or ``decode_jpeg`` with the same boxes
(``floor``) inside one ``exec``, the only part collected. (fused - floor) / 20
is the Python (and draw) cost of a fused call in instructions.

    python percall_callgrind.py fused|floor|current train|train-flip GO_FILE

``current`` counts ``f.is_current()`` (the chain fingerprint) 20 times.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time

import torch
from torchvision import transforms as T

import fastdecode as fd  # noqa: F401 - used by the exec'd FLOOR code
from fastdecode.transforms import fuse

torch.set_num_threads(1)
variant, chain_name, go = sys.argv[1], sys.argv[2], sys.argv[3]
files = sorted(pathlib.Path("/work/shared/corpus/photos").rglob("*.JPEG"))[:20]
datas = [p.read_bytes() for p in files]
chain = {"train": T.Compose([T.RandomResizedCrop(224), T.PILToTensor()]),
         "train-flip": T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                  T.PILToTensor()])}[chain_name]
f = fuse(chain)
torch.manual_seed(0)
boxes = []
for d in datas:
    f(d)
    boxes.append((f.last_params.crop, f.last_params.flip))
FUSED = "torch.manual_seed(0)\nfor d in datas: f(d)\n"
FLOOR = ("for d, (b, fl) in zip(datas, boxes): "
         "fd.decode_jpeg(d, crop=b, size=(224, 224), layout='CHW', flip=fl, scale=1)\n")
print("READY", flush=True)
while not os.path.exists(go):
    time.sleep(0.2)
CURRENT = "for d in datas: f.is_current()\n"  # the fingerprint check, per item
exec({"fused": FUSED, "floor": FLOOR, "current": CURRENT}[variant])
