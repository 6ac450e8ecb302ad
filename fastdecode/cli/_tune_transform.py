"""The transform ``fastdecode tune`` measures: the standard ImageNet train
chain, or the user's own named ``module:attribute`` (an object, or a
zero-argument callable returning one). Decision record:
docs/decisions/cli.md."""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
from typing import Any, Callable, Optional

__all__ = ["STANDARD_CHAIN", "UsageError", "load_transform", "standard_train_chain"]

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
STANDARD_CHAIN = ("standard ImageNet train chain: RandomResizedCrop(224), RandomHorizontalFlip(), "
                  "ToTensor(), Normalize(ImageNet mean, std)")


class UsageError(Exception):
    """A bad argument: exit status 2."""


def standard_train_chain():
    from torchvision import transforms as T

    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(MEAN, STD)])


def _is_factory(obj: Any) -> bool:
    """A class, function or partial that takes no argument. Transform objects
    (nn.Modules: their __call__ takes *args) are never called here."""
    if not (isinstance(obj, (type, functools.partial)) or inspect.isfunction(obj)
            or inspect.ismethod(obj)):
        return False
    try:
        inspect.signature(obj).bind()
    except (TypeError, ValueError):
        return False
    return True


def load_transform(reference: Optional[str]) -> tuple[Callable, str]:
    """The transform named by ``module:attribute`` (an object, or a
    zero-argument callable returning one) and its description."""
    if reference is None:
        return standard_train_chain(), STANDARD_CHAIN
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"--transform {reference!r}: expected module:attribute, "
                         "e.g. myproject.data:train_transform")
    # as `python -m` does: a module next to where the command runs imports
    path = list(sys.path)
    sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--transform {reference!r}: cannot import {module_name!r}: "
                         f"{exc}") from exc
    finally:
        sys.path[:] = path
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"--transform {reference!r}: {module_name!r} has no attribute "
                             f"{attribute!r}") from None
    if _is_factory(obj):
        try:
            obj = obj()
        except Exception as exc:
            raise UsageError(f"--transform {reference!r}: calling it failed: {exc!r}") from exc
    elif isinstance(obj, type):
        raise UsageError(f"--transform {reference!r} is a class that needs arguments: name an "
                         "instance, or a function that returns one")
    if not callable(obj):
        raise UsageError(f"--transform {reference!r} is not a transform: got "
                         f"{type(obj).__name__} {obj!r:.40}")
    return obj, reference
