"""``dataset.samples`` as a list (fastdecode/storage/_samples.py): SamplesView
answers what a list answers, compact or changed (errors, concatenation with
what a list refuses, comparisons with tuples and other lengths, copies);
SampleStore keeps targets and sizes of any range; shared_int_list is
tolist() with one int object per value."""

from __future__ import annotations

import copy
import operator

import numpy as np
import pytest

from fastdecode.storage import _samples
from fastdecode.storage._samples import SampleStore, SamplesView, shared_int_list

PAIRS = [("/d/a/1.jpg", 0), ("/d/a/2.jpg", 0), ("/d/b/3.jpg", 1)]


def _view(state):
    view = SamplesView(SampleStore(PAIRS))
    if state == "changed":
        view[0] = view[0]  # the first change: a real list from now on
        assert not view.compact
    return view


STATES = ["compact", "changed"]


def _outcome(fn, *args):
    try:
        return "ok", fn(*args)
    except Exception as exc:  # noqa: BLE001 - comparing the error with list's
        return type(exc), None  # the message names the type: SamplesView, not list


OPERATIONS = {
    "index-missing": lambda s: s.index(("/nope", 9)),
    "index-in-range": lambda s: s.index(PAIRS[2], 1, 3),
    "index-outside-range": lambda s: s.index(PAIRS[0], 1),
    "add-tuple": lambda s: s + tuple(PAIRS),
    "add-int": lambda s: s + 5,
    "radd-tuple": lambda s: tuple(PAIRS) + s,
    "radd-list": lambda s: [("x", 3)] + s,
    "less-than-int": lambda s: s < 5,
    "equals-tuple": lambda s: s == tuple(PAIRS),
    "not-equals-tuple": lambda s: s != tuple(PAIRS),
    "less-than-tuple": lambda s: s < tuple(PAIRS),
    "equals-shorter": lambda s: s == PAIRS[:2],
    "equals-same": lambda s: s == list(PAIRS),
    "greater-than-shorter": lambda s: s > PAIRS[:2],
    "count": lambda s: s.count(PAIRS[0]),
    "times-two": lambda s: 2 * s,
}


@pytest.mark.parametrize("operation", list(OPERATIONS.values()), ids=list(OPERATIONS))
def test_a_view_answers_as_a_list(operation):
    assert _outcome(operation, _view("compact")) == _outcome(operation, list(PAIRS))


CHANGED = ["index-missing", "add-tuple", "radd-list", "equals-tuple", "equals-shorter",
           "less-than-int"]


@pytest.mark.parametrize("name", CHANGED)
def test_a_changed_view_answers_as_a_list(name):
    operation = OPERATIONS[name]
    assert _outcome(operation, _view("changed")) == _outcome(operation, list(PAIRS))


@pytest.mark.parametrize("state", STATES)
def test_a_deep_copy_is_independent(state):
    view = _view(state)
    clone = copy.deepcopy(view)
    assert clone == view and clone is not view
    clone.append(("/d/c/4.jpg", 2))
    assert len(view) == 3 and len(clone) == 4
    assert clone.compact is False and view.compact is (state == "compact")


@pytest.mark.parametrize("state", STATES)
def test_a_shallow_copy_is_independent(state):
    view = _view(state)
    clone = copy.copy(view)
    del clone[0]
    assert list(view) == PAIRS and list(clone) == PAIRS[1:]


def test_targets_of_any_size_are_kept():
    pairs = [("a.jpg", -(2**40)), ("b.jpg", 70_000), ("c.jpg", 2**40)]
    store = SampleStore(pairs)
    assert [(store.path(i), store.target(i)) for i in range(3)] == pairs
    assert store.target_array.dtype == np.int64


@pytest.mark.parametrize("values, dtype", [([], np.int64), ([0.5], np.int64), ([-1, 5], np.int16),
                                           ([0, 40_000], np.int32), ([0, 2**40], np.int64)],
                         ids=["empty", "floats", "int16", "int32", "int64"])
def test_targets_take_the_smallest_signed_type(values, dtype):
    assert _samples._int_for(values) is dtype


@pytest.mark.parametrize("bound, dtype", [(255, np.uint8), (65_535, np.uint16),
                                          (2**32 - 1, np.uint32), (2**32, np.int64)],
                         ids=["uint8", "uint16", "uint32", "past-uint32"])
def test_offsets_take_the_smallest_unsigned_type(bound, dtype):
    assert _samples._uint_for(bound) is dtype


@pytest.mark.parametrize("values", [
    np.array([], np.int64),
    np.repeat(np.array([1000, 1001, 1005]), 20),  # few runs: a folder listing's targets
    np.array([1000, 1003, 1001, 1000] * 5),  # many runs
], ids=["empty", "few-runs", "many-runs"])
def test_shared_int_list_is_tolist_with_one_object_per_value(values):
    out = shared_int_list(values)
    assert out == values.tolist() and all(type(v) is int for v in out)
    firsts = {}
    for v in out:
        assert firsts.setdefault(v, v) is v  # every 1000 is the same int object


def test_a_view_is_unhashable_as_a_list():
    with pytest.raises(TypeError, match="unhashable"):
        hash(_view("compact"))
    assert operator.eq(_view("compact"), _view("changed"))
