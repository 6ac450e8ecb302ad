"""FastLoader's persistent workers when drawing the next epoch ahead fails
part-way (fastdecode/loader/_workers.py, WorkerIter._next_index): the epoch
ends as it would have, the failure is said once, the draw made so far is
dropped at the next iter() and that epoch is DataLoader's. (A prediction
that cannot even start: test_loader.py.)"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torchvision import transforms as T  # noqa: E402

import fastdecode as fd  # noqa: E402
from fastdecode.loader import (
    _next_epoch,  # noqa: E402
    _workers,  # noqa: E402
)

from helpers.fork_warning import ignore_fork_warning  # noqa: E402
from helpers.trees import make_tree  # noqa: E402

FIXED = T.Compose([T.Resize(24), T.CenterCrop(16), T.PILToTensor()])


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("ahead"), per_class=3)


def _epochs(loader, n):
    return [[(x.clone(), y.clone()) for x, y in loader] for _ in range(n)]


def test_a_draw_ahead_failing_part_way_ends_the_epoch_and_is_dropped(tree, monkeypatch):
    monkeypatch.setattr(_workers, "_warned_unpredicted", False)
    monkeypatch.setattr(_workers, "_warned_dropped", False)
    ds = fd.FastImageFolder(tree, FIXED)
    expected = _epochs(torch.utils.data.DataLoader(
        ds, batch_size=2, shuffle=True, num_workers=1, persistent_workers=True,
        generator=torch.Generator().manual_seed(5), collate_fn=fd.collate), 2)

    real_pull = _next_epoch.NextEpoch.pull

    def pull(self):
        if len(self.items) == 1:  # the second batch drawn ahead
            raise MemoryError("no room to draw ahead")
        return real_pull(self)
    monkeypatch.setattr(_next_epoch.NextEpoch, "pull", pull)
    loader = fd.FastLoader(ds, batch_size=2, shuffle=True, num_workers=1, pin_memory=False,
                           persistent_workers=True, generator=torch.Generator().manual_seed(5))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ignore_fork_warning()
        got = _epochs(loader, 2)
    said = [str(w.message) for w in record]
    assert len(said) == 2  # each once
    assert said[0].startswith("FastLoader could not draw the next epoch's batches ahead "
                              "(MemoryError('no room to draw ahead'))")
    assert said[1].startswith("FastLoader dropped the next epoch's batches it had drawn ahead")
    assert [len(e) for e in got] == [len(e) for e in expected] == [5, 5]
    for a, b in zip(got, expected, strict=True):
        for (x, y), (u, v) in zip(a, b, strict=True):
            assert torch.equal(x, u) and torch.equal(y, v)
    it = (loader._ring_loader or loader)._iterator
    assert it.ahead_dropped == 1 and it.ahead_kept == 0 and loader.made_ahead == 0
