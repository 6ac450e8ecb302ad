"""ImageFolder trees the dataset and loader tests build in tmp_path."""

from __future__ import annotations

import io
import os
from pathlib import Path

from PIL import Image

from helpers.jpeg_samples import natural_image


def write_image(path: Path, fmt: str, size=(96, 128), seed=0, mode="RGB") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # photo-like grain; heavy white noise is not what DCT scaling is judged on
    im = Image.fromarray(natural_image(*size, seed=seed, noise=0.02)).convert(mode)
    kwargs = {"quality": 90} if fmt == "JPEG" else {}
    im.save(path, fmt, **kwargs)
    return path


def make_tree(root: Path, per_class: int = 4, classes=("cat", "dog", "eel")) -> Path:
    """Mixed formats and sizes, a nested folder, a non-image file."""
    seed = 0
    for c, name in enumerate(classes):
        for i in range(per_class):
            seed += 1
            size = (80 + 13 * i, 100 + 17 * c)
            if i % 4 == 3:
                write_image(root / name / f"img{i}.png", "PNG", size, seed)
            elif i % 4 == 2:
                write_image(root / name / "nested" / f"img{i}.jpeg", "JPEG", size, seed, "L")
            else:
                write_image(root / name / f"img{i}.jpg", "JPEG", size, seed)
        (root / name / "notes.txt").write_text("not an image")
    return root


def corrupt_file(path: Path) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    return path


def encoded_jpeg(size=(64, 64), seed=0) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(natural_image(*size, seed=seed)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def symlink_class(root: Path, target: Path, name: str) -> None:
    os.symlink(target, root / name, target_is_directory=True)


def random_files(root: Path, sizes) -> list[str]:
    """Files of random bytes in ``root``, one per size (``f0000.bin``, ...),
    their paths as strings, in order."""
    paths = []
    for i, size in enumerate(sizes):
        path = Path(root) / f"f{i:04d}.bin"
        path.write_bytes(os.urandom(size))
        paths.append(str(path))
    return paths
