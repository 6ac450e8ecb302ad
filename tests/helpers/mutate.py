"""Byte-level mutations of encoded images."""

from __future__ import annotations


def flip_bits(data: bytes, rng, count: int) -> bytes:
    """A copy of `data` with `count` random bits flipped, past its first two
    bytes (the magic, so the format is still recognised)."""
    corrupt = bytearray(data)
    for pos in rng.integers(2, len(data), count):
        corrupt[pos] ^= 1 << int(rng.integers(0, 8))
    return bytes(corrupt)
