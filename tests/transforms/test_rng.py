"""fastdecode._rng: each one-value draw is torch's own call, the same value
and the same generator state afterwards, under float32 and float64 default dtypes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fastdecode import _rng  # noqa: E402

CALLS = {  # name -> (ours, torch's)
    "randint-7": (lambda: _rng.randint(7), lambda: int(torch.randint(0, 7, size=(1,)).item())),
    "randint-2**31": (lambda: _rng.randint(2**31),
                      lambda: int(torch.randint(2**31, ()).item())),
    "rand": (lambda: _rng.uniform(), lambda: torch.rand(1).item()),
    "uniform-0.08-1": (lambda: _rng.uniform(0.08, 1.0),
                       lambda: torch.empty(1).uniform_(0.08, 1.0).item()),
    "exp-of-uniform": (lambda: _rng.exp_of_uniform(-0.2876821, 0.2876821),
                       lambda: torch.exp(torch.empty(1).uniform_(-0.2876821, 0.2876821)).item()),
    # p not a float32: the float32 comparison and the float64 one differ near it
    "below-0.1": (lambda: _rng.below(0.1), lambda: bool(torch.rand(1) < 0.1)),
    "below-0.5": (lambda: _rng.below(0.5), lambda: bool(torch.rand(1) < 0.5)),
}


@pytest.fixture(params=[torch.float32, torch.float64], ids=["float32", "float64"])
def default_dtype(request):
    before = torch.get_default_dtype()
    torch.set_default_dtype(request.param)
    yield request.param
    torch.set_default_dtype(before)


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_a_draw_is_torchs_call(name, seed, default_dtype):
    ours, theirs = CALLS[name]
    torch.manual_seed(seed)
    got = [ours() for _ in range(200)]
    state = torch.get_rng_state()
    torch.manual_seed(seed)
    want = [theirs() for _ in range(200)]
    assert got == want
    assert torch.equal(state, torch.get_rng_state())


class _Drawn:
    """A stand-in scratch tensor whose every draw is ``value``."""

    def __init__(self, value: float, dtype):
        self.value, self.dtype = value, dtype

    def uniform_(self, low=0.0, high=1.0):
        return self

    def item(self) -> float:
        return self.value


@pytest.mark.parametrize("dtype, expected", [(torch.float32, False), (torch.float64, True)],
                         ids=["float32", "float64"])
def test_below_compares_as_torch_does_at_the_edge(monkeypatch, dtype, expected):
    """p = 0.7 rounds down in float32: a draw of exactly float32(0.7) is not
    below p as a float32 tensor compares it (torch.rand(1) < 0.7), and is
    below it in float64."""
    p = 0.7
    edge = _rng.float32(p)
    assert edge < p
    edge_tensor = torch.tensor([edge], dtype=dtype)
    assert bool(edge_tensor < p) == expected  # what torch says of that draw
    monkeypatch.setattr(_rng, "scratch", lambda: (_Drawn(edge, dtype), None))
    assert _rng.below(p) == expected


def test_each_thread_has_its_own_tensors():
    import threading

    mine = _rng.scratch()
    theirs = []
    worker = threading.Thread(target=lambda: theirs.append(_rng.scratch()))
    worker.start()
    worker.join()
    assert theirs[0][0] is not mine[0] and _rng.scratch()[0] is mine[0]
