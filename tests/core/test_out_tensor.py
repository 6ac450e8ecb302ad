"""``out=`` takes a CPU uint8 torch tensor: the decoders write its memory
through its numpy view and return the tensor; a tensor they cannot write
(another dtype, not contiguous, sparse, another device) is a
ValueError naming the reason. Every native decoder and the Pillow fallback."""

from __future__ import annotations

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from PIL import Image  # noqa: E402

import fastdecode as fd  # noqa: E402

from helpers.jpeg_samples import encode, natural_image  # noqa: E402

H, W = 61, 93


def _pil(fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(natural_image(H, W, 5)).save(buf, fmt)
    return buf.getvalue()


DATA = {
    "jpeg": lambda: encode(H, W, seed=5),
    "bmp": lambda: _pil("BMP"),
    "png-fallback": lambda: _pil("PNG"),
}
DECODERS = {
    "decode_jpeg": (fd.decode_jpeg, "jpeg"),
    "decode_bmp": (fd.decode_bmp, "bmp"),
    "decode_image-jpeg": (fd.decode_image, "jpeg"),
    "decode_image-png": (fd.decode_image, "png-fallback"),
}
OPTIONS = {
    "HWC": ({}, (H, W, 3)),
    "CHW": ({"layout": "CHW"}, (3, H, W)),
    "crop-size-CHW": ({"crop": (3, 5, 40, 50), "size": (24, 32), "layout": "CHW"}, (3, 24, 32)),
    "L-flip": ({"mode": "L", "flip": True}, (H, W, 1)),
}


@pytest.mark.parametrize("options", list(OPTIONS))
@pytest.mark.parametrize("decoder", list(DECODERS))
def test_a_batch_slot_is_filled_in_place(decoder, options):
    decode, fmt = DECODERS[decoder]
    kwargs, shape = OPTIONS[options]
    data = DATA[fmt]()
    batch = torch.zeros((3, *shape), dtype=torch.uint8)
    got = decode(data, out=batch[1], **kwargs)
    assert isinstance(got, torch.Tensor) and got.data_ptr() == batch[1].data_ptr()
    np.testing.assert_array_equal(batch[1].numpy(), decode(data, **kwargs))
    assert not batch[0].any() and not batch[2].any()


def test_a_flat_tensor_of_the_output_size_is_filled():
    data = DATA["jpeg"]()
    flat = torch.zeros(H * W * 3, dtype=torch.uint8)
    fd.decode_jpeg(data, out=flat)
    assert flat.numpy().tobytes() == fd.decode_jpeg(data).tobytes()


# torchvision imports triton (through torch._dynamo), which aborts under the
# ASan preload of make test-sanitize
@pytest.mark.no_sanitize
def test_a_tensor_subclass_is_filled():
    tv_tensors = pytest.importorskip("torchvision.tv_tensors")
    data = DATA["jpeg"]()
    image = tv_tensors.Image(torch.zeros((3, H, W), dtype=torch.uint8))
    assert fd.decode_jpeg(data, out=image, layout="CHW") is image
    np.testing.assert_array_equal(image.as_subclass(torch.Tensor).numpy(),
                                  fd.decode_jpeg(data, layout="CHW"))


def _channels_last():
    return torch.zeros((1, 3, H, W), dtype=torch.uint8).to(memory_format=torch.channels_last)[0]


BAD = {
    "float32": (lambda: torch.zeros((H, W, 3)), r"out is a torch\.float32 tensor; it must be "
                r"torch\.uint8"),
    "int8": (lambda: torch.zeros((H, W, 3), dtype=torch.int8), r"torch\.int8 tensor"),
    "transposed": (lambda: torch.zeros((W, H, 3), dtype=torch.uint8).transpose(0, 1),
                   r"out is a non-contiguous tensor \(shape \(61, 93, 3\)"),
    "sliced-columns": (lambda: torch.zeros((H, 2 * W, 3), dtype=torch.uint8)[:, ::2],
                       "non-contiguous"),
    "channels-last-CHW": (_channels_last, "non-contiguous"),
    "meta-device": (lambda: torch.zeros((H, W, 3), dtype=torch.uint8, device="meta"),
                    r"out is a tensor on meta: decoders write CPU memory"),
    "sparse": (lambda: torch.zeros((H, W, 3), dtype=torch.uint8).to_sparse(),
               r"out is a torch\.sparse_coo tensor; it must be a dense"),
    "wrong-shape": (lambda: torch.zeros((W, H, 3), dtype=torch.uint8),
                    r"out has shape \(93, 61, 3\), expected \(61, 93, 3\)"),
    "wrong-size": (lambda: torch.zeros((H, W, 4), dtype=torch.uint8), "out has 22692 bytes"),
}


@pytest.mark.parametrize("decoder", list(DECODERS))
@pytest.mark.parametrize("case", list(BAD))
def test_a_tensor_the_decoder_cannot_write_is_refused_with_the_reason(case, decoder):
    decode, fmt = DECODERS[decoder]
    make, match = BAD[case]
    out = make()
    layout = {"layout": "CHW"} if case == "channels-last-CHW" else {}
    with pytest.raises(ValueError, match=match):
        decode(DATA[fmt](), out=out, **layout)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_tensor_is_refused():
    out = torch.zeros((H, W, 3), dtype=torch.uint8, device="cuda")
    with pytest.raises(ValueError, match=r"out is a tensor on cuda:0: decoders write CPU memory"):
        fd.decode_jpeg(DATA["jpeg"](), out=out)


def test_not_a_buffer_says_what_out_may_be():
    with pytest.raises(TypeError, match=r"a CPU uint8 torch tensor or another object with the "
                                        r"writable buffer protocol.*got list"):
        fd.decode_jpeg(DATA["jpeg"](), out=[0] * (H * W * 3))
