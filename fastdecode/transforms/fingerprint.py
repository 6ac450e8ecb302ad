"""Fingerprint: a cheap snapshot of a chain's parameters, to notice a changed transform.

``fingerprint(transform)`` walks the transform objects (Compose lists,
wrappers, submodules) and records, flat, every attribute that can change what
they do: numbers, strings, enums, sizes, list and tuple contents, the identity
of every object and function reached, and each tensor's identity and version
counter (in-place edits bump it). Two fingerprints compare equal when nothing
a fused plan depends on changed: attributes set (``rrc.size = 160``), list
contents edited (``compose.transforms.append(...)``), objects reassigned.
A call of the chain changes nothing it records: the walk builds no object
whose identity it would record (a dict's keys and values are recorded
flat), classes are leaves (their identity, not their methods), and a dict
subclass (a ``defaultdict`` that grows on lookup) is compared by identity.
See docs/decisions/fused-transforms.md ("Live transforms").
"""

from __future__ import annotations

import enum
import itertools
import types
from typing import Any

import torch

__all__ = ["fingerprint"]

# nn.Module bookkeeping: compared by identity, never walked (hooks, parameter
# dicts), and fastdecode's own cache of a fused plan.
_SKIP = frozenset({
    "_parameters", "_buffers", "_non_persistent_buffers_set", "_backward_pre_hooks",
    "_backward_hooks", "_forward_hooks", "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called", "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs",
    "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks", "_fd_fused",
})
_ATOMS = frozenset({bool, int, float, str, bytes, type(None)})
# identity only: a class (a v2 fill dict may be keyed by tv_tensors classes), a module
_LEAVES = (type, types.ModuleType)
_MAX_OBJECTS = 512  # bounds the walk (deeper than any chain; past it, identity only)


def fingerprint(transform: Any) -> list:
    """A flat list; equal lists (``==``) mean an unchanged chain.

    Per object reached: its identity and a shallow tuple of its attribute
    values (or list items, or a dict's keys and values), compared by value
    for numbers, strings and tuples and by identity for objects, which are
    then walked themselves; a tensor adds its version counter. Its cost is
    measured in docs/decisions/fused-transforms.md ("Live transforms").
    """
    out: list = []
    seen: set[int] = set()
    stack = [transform]
    while stack and len(seen) < _MAX_OBJECTS:
        obj = stack.pop()
        key = id(obj)
        if key in seen:
            continue
        seen.add(key)
        cls = type(obj)
        if cls is list or cls is tuple:
            values: Any = tuple(obj)
        elif cls is dict:
            # flat: an items() tuple is new per walk, and its identity would differ
            values = tuple(itertools.chain.from_iterable(obj.items()))
        elif isinstance(obj, torch.Tensor):
            out.append((key, obj._version))
            continue
        else:
            state = getattr(obj, "__dict__", None)
            if state is None or cls is types.FunctionType or isinstance(obj, _LEAVES):
                out.append(key)
                continue
            values = tuple(state.values())
            if "_fd_fused" in state:
                values = tuple(v for k, v in state.items() if k != "_fd_fused")
            out.append(key)
            out.append(values)
            stack.extend(v for k, v in state.items() if k not in _SKIP
                         and type(v) not in _ATOMS and not isinstance(v, enum.Enum))
            continue
        out.append(key)
        out.append(values)
        stack.extend(v for v in values if type(v) not in _ATOMS and not isinstance(v, enum.Enum))
    return out
