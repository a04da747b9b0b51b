"""What can still be said about an object that does not decode whole into its snapshot.

The API server stores objects the snapshot structs reject: a wrong type a CRD without a
schema accepted, a quantity written as a number, an ownerReference uid that is not
subject-safe. Dropping such an object would blind every consumer to it (issue 19: a pod
nobody counts stays Running forever), so the watcher publishes what *does* decode:

* every field is decoded on its own, with the same strict rules as the whole object;
* a field that fails is decoded *partially* when it is a struct (its good fields kept), a
  sequence of structs (its good entries kept) or a string map (its good entries kept);
  anything else that fails is left at its default and its path recorded as *dropped*;
* a path listed in ``atomic`` is never partial: it decodes whole or is dropped whole
  (an AppWrapper's ``$.spec`` — half a spec must never be dispatched);
* a required field that cannot be decoded makes its struct unsalvageable; when that is the
  object itself (no valid ``metadata.name``/``uid``/``resourceVersion``) nothing can be
  published about it and :func:`salvage` raises :class:`Unsalvageable`.

This is the cold path (only objects that failed the one-shot decode come here), so every
field is decoded through a JSON round trip: exactly the rules of the hot path, no second
set of rules to keep in step.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable
from typing import Any, Final, TypeVar

import msgspec

S = TypeVar("S", bound=msgspec.Struct)

_NOTHING: Final = object()


class Unsalvageable(ValueError):
    """A required value at ``path`` does not decode: the struct holding it cannot be built."""

    def __init__(self, path: str) -> None:
        super().__init__(f"required value at {path} does not decode")
        self.path = path


def salvage(
    data: Any, cls: type[S], *, path: str = "$", atomic: Iterable[str] = ()
) -> tuple[S, tuple[str, ...]]:
    """``data`` (decoded JSON) as ``cls``, keeping every field that decodes.

    Returns the struct and the paths left at their defaults; raises :class:`Unsalvageable`.
    """
    dropped: list[str] = []
    value = _struct(data, cls, path, dropped, frozenset(atomic))
    return value, tuple(dropped)


def _strict(value: Any, tp: Any) -> Any:
    return msgspec.json.decode(msgspec.json.encode(value), type=tp)


def _struct(data: Any, cls: type[S], path: str, dropped: list[str], atomic: frozenset[str]) -> S:
    if not isinstance(data, dict):
        raise Unsalvageable(path)
    kwargs: dict[str, Any] = {}
    for info in msgspec.structs.fields(cls):
        sub = f"{path}.{info.encode_name}"
        if info.encode_name not in data:
            if info.required:
                raise Unsalvageable(sub)
            continue
        value = data[info.encode_name]
        try:
            kwargs[info.name] = _strict(value, info.type)
            continue
        except msgspec.ValidationError:
            pass
        partial = _NOTHING if sub in atomic else _partial(value, info.type, sub, dropped, atomic)
        if partial is not _NOTHING:
            kwargs[info.name] = partial
        elif info.required:
            raise Unsalvageable(sub)
        else:
            dropped.append(sub)
    return cls(**kwargs)


def _arms(tp: Any) -> list[Any]:
    """The alternatives of a (possibly Annotated, possibly Optional) type, Annotated removed."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return [arm for member in typing.get_args(tp) for arm in _arms(member)]
    return [tp]


def _partial(value: Any, tp: Any, path: str, dropped: list[str], atomic: frozenset[str]) -> Any:
    """The part of ``value`` that decodes as ``tp``, or ``_NOTHING``."""
    for arm in _arms(tp):
        if isinstance(arm, type) and issubclass(arm, msgspec.Struct):
            local: list[str] = []
            try:
                built = _struct(value, arm, path, local, atomic)
            except Unsalvageable:
                continue
            dropped.extend(local)
            return built
        origin, args = typing.get_origin(arm), typing.get_args(arm)
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis and isinstance(value, list):
            return tuple(_entries(value, args[0], path, dropped, atomic))
        if origin is dict and isinstance(value, dict):
            kept: dict[str, Any] = {}
            for key, entry in value.items():
                try:
                    kept[_strict(key, args[0])] = _strict(entry, args[1])
                except msgspec.ValidationError:
                    dropped.append(f"{path}.{key}")
            return kept
    return _NOTHING


def _entries(
    values: list[Any], tp: Any, path: str, dropped: list[str], atomic: frozenset[str]
) -> list[Any]:
    kept: list[Any] = []
    for index, value in enumerate(values):
        sub = f"{path}[{index}]"
        try:
            kept.append(_strict(value, tp))
            continue
        except msgspec.ValidationError:
            pass
        partial = _partial(value, tp, sub, dropped, atomic)
        if partial is _NOTHING:
            dropped.append(sub)
        else:
            kept.append(partial)
    return kept
