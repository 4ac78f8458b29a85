"""`record`: a dataclass that compiles nothing at import.

Python 3.10-3.12's `dataclasses.dataclass` builds `__init__`, `__repr__`, `__eq__` (and, for
frozen classes, `__setattr__`, `__delattr__` and `__hash__`) by compiling source text for
every class at import: the core's classes cost 140 compiles, about 25 ms of the ~150 ms a
`kvplan size` run may take (benchmarks/speed.py). `record` keeps dataclasses' field
machinery, so `dataclasses.fields`, `replace`, `asdict` and `is_dataclass` work unchanged,
shares generic `__repr__`, `__eq__`, `__hash__` and frozen guards among all classes, and
compiles a class's `__init__` when its first instance is made (hot loops keep a compiled
`__init__`; classes a run never builds cost nothing). Supported: plain defaults and
`default_factory`; refused at decoration: `field()` options other than defaults, `kw_only`,
InitVar/ClassVar, a class body's own dunders that `record` sets or `__post_init__`, and
subclassing a record or dataclass.
"""

from __future__ import annotations

import dataclasses
from operator import attrgetter
from typing import Any, TypeVar

T = TypeVar("T")
_MISSING = dataclasses.MISSING
_FACTORY = object()  # the parameter default of a default_factory field


def _compile_init(cls: type) -> Any:
    """The class's own `__init__`, compiled from source as dataclasses would build it."""
    names: tuple[str, ...] = cls.__record_names__  # type: ignore[attr-defined]
    defaults = cls.__record_defaults__  # type: ignore[attr-defined]
    factories = dict(cls.__record_factories__)  # type: ignore[attr-defined]
    scope: dict[str, Any] = {"_record_factory": _FACTORY}
    params, body = [], []
    for i, n in enumerate(names):
        if n in defaults:
            scope[f"_record_d{i}"] = defaults[n]
            params.append(f"{n}=_record_d{i}")
        elif n in factories:
            scope[f"_record_f{i}"] = factories[n]
            params.append(f"{n}=_record_factory")
            body.append(f"    if {n} is _record_factory: {n} = _record_f{i}()")
        else:
            params.append(n)
    fields = ", ".join(f"{n!r}: {n}" for n in names)
    source = (f"def __init__(self, {', '.join(params)}):\n" + "".join(f"{b}\n" for b in body)
              + f"    self.__dict__.update({{{fields}}})\n")
    exec(source, scope)  # noqa: S102 - our own generated text, as dataclasses does
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    """First instance: compile the class's `__init__` (one compile, and only for classes
    that are used) and install it."""
    cls = type(self)
    cls.__init__ = init = _compile_init(cls)  # type: ignore[misc]
    init(self, *args, **kwargs)


def _repr(self: Any) -> str:
    inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in type(self).__record_names__)
    return f"{type(self).__qualname__}({inner})"


def _eq(self: Any, other: Any) -> Any:
    cls = self.__class__
    if other.__class__ is cls:
        get = cls.__record_values__
        return get(self) == get(other)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(type(self).__record_values__(self))


def _frozen_set(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_del(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def record(cls: type[T] | None = None, /, *, frozen: bool = False, eq: bool = True) -> Any:
    """`@record` / `@record(frozen=True)` / `@record(eq=False)`: as `@dataclass` with the same
    arguments (frozen and eq classes hash by value; eq classes that are not frozen are
    unhashable)."""

    def wrap(c: type[T]) -> type[T]:
        own = {"__post_init__", "__init__", "__repr__", "__eq__", "__hash__", "__setattr__",
               "__delattr__"} & set(c.__dict__)
        if own:
            raise TypeError(f"{c.__name__}: record does not support its own {sorted(own)}")
        if any(hasattr(b, "__record_names__") or dataclasses.is_dataclass(b)
               for b in c.__mro__[1:]):
            raise TypeError(f"{c.__name__}: record does not support subclassing a record")
        if not c.__dict__.get("__doc__"):
            c.__doc__ = c.__name__  # dataclass would build one with inspect.signature
        c = dataclasses.dataclass(c, init=False, repr=False, eq=False)
        fields = dataclasses.fields(c)
        if len(fields) != len(c.__dataclass_fields__):  # type: ignore[attr-defined]
            raise TypeError(f"{c.__name__}: record does not support InitVar or ClassVar fields")
        defaulted = False
        for f in fields:
            if not (f.init and f.repr and f.compare and f.hash is None and not f.kw_only):
                raise TypeError(f"{c.__name__}.{f.name}: record supports plain init fields "
                                "only (no init/repr/compare/hash/kw_only options)")
            has = f.default is not _MISSING or f.default_factory is not _MISSING
            if defaulted and not has:
                raise TypeError(f"{c.__name__}.{f.name}: a field without a default follows "
                                "one with a default")
            defaulted |= has
        names = tuple(f.name for f in fields)
        c.__record_names__ = names  # type: ignore[attr-defined]
        c.__record_defaults__ = {  # type: ignore[attr-defined]
            f.name: f.default for f in fields if f.default is not _MISSING}
        c.__record_factories__ = tuple(  # type: ignore[attr-defined]
            (f.name, f.default_factory) for f in fields if f.default_factory is not _MISSING)
        get = attrgetter(*names) if names else (lambda _: ())
        c.__record_values__ = (  # type: ignore[attr-defined]
            get if len(names) != 1 else (lambda o: (get(o),)))
        c.__init__ = _init  # type: ignore[misc]
        c.__repr__ = _repr  # type: ignore[assignment]
        if eq:
            c.__eq__ = _eq  # type: ignore[assignment]
            c.__hash__ = _hash if frozen else None  # type: ignore[assignment]
        if frozen:
            c.__setattr__ = _frozen_set  # type: ignore[assignment]
            c.__delattr__ = _frozen_del  # type: ignore[assignment]
        return c

    return wrap if cls is None else wrap(cls)
