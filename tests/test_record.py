"""kvplan.core.record: dataclass behaviour without per-class compiled methods."""

import dataclasses

import pytest

from kvplan.core.record import record


@record(frozen=True)
class Point:
    x: int
    y: int = 2
    tags: list = dataclasses.field(default_factory=list)


@record
class Box:
    w: int


@record(eq=False)
class Ident:
    v: int


def test_init_defaults_factories_and_errors():
    p = Point(1)
    assert (p.x, p.y, p.tags) == (1, 2, [])
    assert Point(1).tags is not Point(1).tags
    assert Point(1, y=5) == Point(x=1, y=5, tags=[])
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'x'"):
        Point()
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        Point(1, z=3)
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        Point(1, x=3)
    with pytest.raises(TypeError, match="takes from 2 to 4 positional arguments but 5"):
        Point(1, 2, [], 4)


def test_frozen_eq_hash_repr_and_dataclass_helpers():
    p = Point(1, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.x
    assert repr(p) == "Point(x=1, y=3, tags=[])"
    assert Point(1, 3, ()) != Point(1, 4, ()) and hash(Point(1, 3, ())) == hash((1, 3, ()))
    assert dataclasses.replace(p, y=9) == Point(1, 9, [])
    assert dataclasses.asdict(p) == {"x": 1, "y": 3, "tags": []}
    assert [f.name for f in dataclasses.fields(Point)] == ["x", "y", "tags"]
    assert dataclasses.is_dataclass(p) and Point.__match_args__ == ("x", "y", "tags")


def test_mutable_and_identity_records():
    b = Box(1)
    b.w = 2
    assert b == Box(2) and Box.__hash__ is None and repr(b) == "Box(w=2)"
    assert (Box(1) == 1) is False
    i = Ident(1)
    assert i != Ident(1) and hash(i) == object.__hash__(i)


def test_unsupported_features_are_refused():
    with pytest.raises(TypeError, match="__post_init__"):
        @record
        class A:
            x: int

            def __post_init__(self):
                pass
    with pytest.raises(TypeError, match="plain init fields only"):
        @record
        class B:
            x: int = dataclasses.field(default=0, init=False)
    with pytest.raises(TypeError, match="plain init fields only"):
        @record
        class C:
            x: int = dataclasses.field(default=0, repr=False)
    with pytest.raises(TypeError, match=r"its own \['__eq__'"):
        @record
        class D:
            x: int

            def __eq__(self, other):
                return True
    with pytest.raises(TypeError, match="subclassing"):
        @record
        class E(Box):
            y: int = 0
    with pytest.raises(TypeError, match="without a default follows"):
        @record
        class F:
            x: int = 0
            y: int
    with pytest.raises(TypeError, match="InitVar or ClassVar"):
        @record
        class G:
            x: dataclasses.InitVar[int]
