"""torch's CPU draws without torch (fastdecode.transforms.torch_draws): the
words, the uniform and integer draws, every possible aspect-ratio draw of
RandomResizedCrop's default range, the boxes and a detached plan's seeded
rows, against torch; and a fresh process decoding seeded rows without torch."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402

from fastdecode.batching._rows import BatchDecoder  # noqa: E402
from fastdecode.batching._seeding import row_seeds  # noqa: E402
from fastdecode.transforms import draws as tv_draws  # noqa: E402
from fastdecode.transforms import torch_draws  # noqa: E402

from helpers.fusion import CHAINS, MEAN, SAMPLES, STD  # noqa: E402

SEEDS = [0, 7, 2**32 + 7, 2**62 + 123]
DEFAULT_LOG_RATIO = tuple(float(v) for v in torch.log(torch.tensor((3 / 4, 4 / 3))))
RANGES = {"scale-default": (0.08, 1.0), "unit": (0.0, 1.0), "log-ratio-default":
          DEFAULT_LOG_RATIO, "scale-narrow": (0.3, 1.0), "negative": (-2.5, -0.25)}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("bounds", RANGES)
def test_uniform_draws_are_torch_s(bounds, seed):
    a, b = RANGES[bounds]
    assert torch_draws.exact_uniform(a, b)
    torch.manual_seed(seed)
    want = torch.empty(3000).uniform_(a, b).tolist()
    draws = torch_draws.Draws()
    draws.manual_seed(seed)
    r = torch_draws.range_draw(a, b)
    assert [draws.uniform(r) for _ in range(3000)] == want


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [1, 2, 7, 333, 4000, 2**28 - 1])
def test_integer_draws_are_torch_randint(n, seed):
    torch.manual_seed(seed)
    want = [int(torch.randint(0, n, size=(1,)).item()) for _ in range(300)]
    draws = torch_draws.Draws()
    draws.manual_seed(seed)
    assert [draws.randint(n) for _ in range(300)] == want


def test_a_range_whose_sum_needs_more_than_53_bits_is_not_exact():
    assert not torch_draws.exact_uniform(0.999, 1.0)


def test_torch_exp_of_every_default_log_ratio_draw_is_within_the_window():
    """Every float32 value uniform_ can draw in the default log-ratio range:
    torch's exp lies within _EXP_ULPS of the correctly rounded exp, so the
    window's two bounds bracket it."""
    r = torch_draws.range_draw(*DEFAULT_LOG_RATIO)
    x = np.arange(2**24, dtype=np.float64) * 2.0**-24
    values = (x * r.span + r.low).astype(np.float32)
    got = torch.from_numpy(values).exp().numpy()
    nearest = np.exp(values.astype(np.float64)).astype(np.float32)
    ulps = np.abs(got.view(np.int32).astype(np.int64) - nearest.view(np.int32))
    assert ulps.max() <= torch_draws._EXP_ULPS
    # a single-element exp_ (what the draw runs) is the same as the bulk one
    picks = np.arange(0, 2**24, 65_537)
    singles = [torch.tensor([values[k]]).exp_().item() for k in picks]
    assert singles == got[picks].tolist()


@pytest.mark.parametrize("scale, ratio", [((0.08, 1.0), (3 / 4, 4 / 3)),
                                          ((0.5, 1.0), (0.5, 2.0)),
                                          ((0.9, 1.0), (1.0, 1.0))],
                         ids=["default", "wide-ratio", "square"])
@pytest.mark.parametrize("height, width", [(375, 500), (500, 333), (3, 4000), (1, 1)])
def test_boxes_and_rng_state_are_geometry_s(height, width, scale, ratio):
    log_ratio = tuple(float(v) for v in torch.log(torch.tensor(ratio)))
    draws = torch_draws.Draws()
    for seed in range(300):
        torch.manual_seed(seed)
        want = tv_draws.sample_resized_crop(height, width, scale, log_ratio, ratio)
        after = torch.rand(1).item()
        draws.manual_seed(seed)
        got = torch_draws.sample_resized_crop(
            draws, height, width, torch_draws.range_draw(*scale),
            torch_draws.range_draw(*log_ratio), ratio)
        assert got == want and draws.uniform(torch_draws.range_draw(0.0, 1.0)) == after


def _decoder_pair(chain):
    local = BatchDecoder(chain)
    return local, pickle.loads(pickle.dumps(local))


CHAINS_FREE = {**CHAINS, "narrow-scale": lambda: T.Compose([
    T.RandomResizedCrop(48, scale=(0.999, 1.0)), T.ToTensor(), T.Normalize(MEAN, STD)])}


@pytest.mark.parametrize("image", SAMPLES)
@pytest.mark.parametrize("chain", CHAINS_FREE)
def test_seeded_rows_equal_the_fused_transform_s(chain, image):
    local, shipped = _decoder_pair(CHAINS_FREE[chain]())
    assert shipped.fused.torch_free is (chain != "narrow-scale")
    items = [SAMPLES[image]()] * 6
    seeds = row_seeds(11, np.arange(6))
    torch.manual_seed(1)
    before = torch.get_rng_state()
    np.testing.assert_array_equal(shipped.decode(items, seeds), local.decode(items, seeds))
    assert torch.equal(torch.get_rng_state(), before)


def test_an_undecided_exp_asks_torch(monkeypatch):
    """With the window widened every box size is undecided and comes from
    torch's own exp: the rows stay the same."""
    monkeypatch.setattr(torch_draws, "_EXP_ULPS", 200_000)
    local, shipped = _decoder_pair(CHAINS["train-v1"]())
    items = [SAMPLES["jpeg-420-500x375"]()] * 4
    seeds = row_seeds(3, np.arange(4))
    np.testing.assert_array_equal(shipped.decode(items, seeds), local.decode(items, seeds))


@pytest.mark.parametrize("chain", ["train-v1", "eval-v2"])
def test_a_fresh_process_decodes_seeded_rows_without_torch(chain, tmp_path):
    local = BatchDecoder(CHAINS[chain]())
    items = [SAMPLES["jpeg-420-500x375"](), SAMPLES["bmp-300x200"]()]
    seeds = row_seeds(5, np.arange(2))
    blob = tmp_path / "decoder.pkl"
    blob.write_bytes(pickle.dumps((local, items, seeds)))
    want = tmp_path / "want.npy"
    np.save(want, local.decode(items, seeds))
    code = (
        "import pickle, sys, numpy as np\n"
        f"decoder, items, seeds = pickle.loads(open({str(blob)!r}, 'rb').read())\n"
        "batch = decoder.decode(items, seeds)\n"
        f"print(np.array_equal(batch, np.load({str(want)!r})), 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.split() == ["True", "False"]

