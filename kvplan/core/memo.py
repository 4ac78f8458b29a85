"""Memoise a pure function of one object by the object's identity (dicts and mutable
dataclasses are not hashable; they are never mutated after construction here)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

R = TypeVar("R")


def by_identity(maxsize: int = 64) -> Callable[[Callable[[Any], R]], Callable[[Any], R]]:
    def deco(fn: Callable[[Any], R]) -> Callable[[Any], R]:
        cache: dict[int, tuple[Any, R]] = {}

        @wraps(fn)
        def wrapper(obj: Any) -> R:
            hit = cache.get(id(obj))
            if hit is not None and hit[0] is obj:
                return hit[1]
            value = fn(obj)
            if len(cache) >= maxsize:
                cache.clear()
            cache[id(obj)] = (obj, value)  # holding obj keeps its id from being reused
            return value

        return wrapper

    return deco
