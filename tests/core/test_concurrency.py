"""Threads: decodes running at once, and a buffer written while it is decoded.

What a caller may rely on (README, "Reliability"): decodes of buffers that
nobody writes give, in any number of threads at once, exactly the
single-threaded result (one decompress object and scratch per thread); a
buffer written by another thread while a decode reads it gives a typed
``FastDecodeError`` or an array of the planned shape whose pixels are
unspecified -- never a crash, a read outside the buffer (the ASan run checks)
or a hang (the binding holds the buffer export for the whole call, so a
bytearray cannot be resized meanwhile: tests/core/test_lint_buffers.py checks
every acquisition is released on every path).
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fastdecode as fd

from helpers.jpeg_samples import encode

THREADS = 8
ROUNDS = 12

FILES = {
    "baseline-420": dict(subsampling="4:2:0"),
    "baseline-444": dict(subsampling="4:4:4"),
    "progressive": dict(subsampling="4:2:0", coding="progressive"),
}
CALLS = {
    "full": {},
    "crop-resize": dict(crop=(5, 7, 40, 50), size=(24, 32), flip=True, layout="CHW"),
    "scaled": dict(scale=0.5),
}


def _jpeg(name: str, seed: int = 0) -> bytes:
    return encode(72, 96, seed=seed, **FILES[name])


@pytest.mark.parametrize("call", CALLS, ids=str)
@pytest.mark.parametrize("name", FILES, ids=str)
def test_threads_decoding_the_same_buffer_agree_with_one_thread(name, call):
    data = _jpeg(name)
    want = fd.decode_jpeg(data, **CALLS[call])
    barrier = threading.Barrier(THREADS)

    def work(_):
        barrier.wait(timeout=30)
        return [fd.decode_jpeg(data, **CALLS[call]) for _ in range(ROUNDS)]

    with ThreadPoolExecutor(THREADS) as pool:
        for results in pool.map(work, range(THREADS)):
            for got in results:
                np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("call", CALLS, ids=str)
def test_threads_decoding_different_buffers_agree_with_one_thread(call):
    files = [_jpeg(name, seed=i) for i, name in enumerate(list(FILES) * 3)][:THREADS]
    wants = [fd.decode_jpeg(f, **CALLS[call]) for f in files]
    barrier = threading.Barrier(THREADS)

    def work(i):
        barrier.wait(timeout=30)
        return i, [fd.decode_jpeg(files[i], **CALLS[call]) for _ in range(ROUNDS)]

    with ThreadPoolExecutor(THREADS) as pool:
        for i, results in pool.map(work, range(THREADS)):
            for got in results:
                np.testing.assert_array_equal(got, wants[i])


@pytest.mark.parametrize("call", CALLS, ids=str)
@pytest.mark.parametrize("name", FILES, ids=str)
def test_a_buffer_written_while_decoded_gives_typed_errors_or_the_planned_shape(name, call):
    """One thread overwrites bytes of a bytearray (past the SOI) while seven
    decode it: each decode ends with a FastDecodeError, the ValueError of a
    crop outside the image the header (as overwritten) describes, or an array
    of the shape the header promised."""
    original = _jpeg(name)
    shape = fd.decode_jpeg(original, **CALLS[call]).shape
    buffer = bytearray(original)
    stop = threading.Event()

    def mutate():
        rng = np.random.default_rng(0)
        while not stop.is_set():
            for pos in rng.integers(2, len(buffer), 64):
                buffer[pos] = int(rng.integers(0, 256))
            buffer[:] = original  # and back: decodes see every mix of the two

    outcomes = {"pixels": 0, "error": 0}

    def decode(_):
        for _ in range(ROUNDS):
            try:
                got = fd.decode_jpeg(buffer, **CALLS[call])
            except fd.FastDecodeError:
                outcomes["error"] += 1
            except ValueError as exc:  # the crop asked for, against a header read mid-write
                assert "crop" in CALLS[call] and re.fullmatch(
                    r"crop \(top=\d+, left=\d+, height=\d+, width=\d+\) is outside the "
                    r"\d+x\d+ image", str(exc)), exc
                outcomes["error"] += 1
            else:
                assert got.shape == shape and got.dtype == np.uint8
                outcomes["pixels"] += 1

    writer = threading.Thread(target=mutate)
    writer.start()
    try:
        with ThreadPoolExecutor(THREADS - 1) as pool:
            list(pool.map(decode, range(THREADS - 1)))
    finally:
        stop.set()
        writer.join(timeout=30)
    assert sum(outcomes.values()) == (THREADS - 1) * ROUNDS
