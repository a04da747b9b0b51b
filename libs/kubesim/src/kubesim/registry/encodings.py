"""LIST items encoded once per stored object version instead of once per LIST.

Stored objects are never changed after commit (:mod:`kubesim.store`), so the JSON of one as a
LIST item is the same every time until the object is replaced. A LIST of 4,000 pods spent most
of its time copying each pod without kind/apiVersion and encoding it again; the services LIST a
whole namespace often. :class:`ItemEncodings` remembers the bytes per (resource, version,
object key) together with the object they were made from, and makes them again when the stored
object is another one; a deleted object's entry is dropped with it. The HTTP answer embeds them
with `msgspec.Raw`, so its bytes are exactly those of encoding the items afresh.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from kubesim.resources import ResourceType
from kubesim.store import Change

__all__ = ["ItemEncodings"]

_encoder = msgspec.json.Encoder()


Slot = tuple[tuple[str, str], tuple[str, str]]  # (resource, (namespace, name))


class ItemEncodings:
    """(resource, object key) → served version → (stored object, its LIST item JSON)."""

    def __init__(self, *, limit: int = 100_000) -> None:
        self._limit = limit
        self._items: dict[Slot, dict[str, tuple[Any, msgspec.Raw]]] = {}

    def on_change(self, change: Change) -> None:
        """A store listener: forget a deleted object's JSON."""
        if change.type == "DELETED":
            self._items.pop((change.resource, (change.namespace, change.name)), None)

    def item(
        self,
        rt: ResourceType,
        key: tuple[str, str],
        obj: dict[str, Any],
        make: Callable[[ResourceType, dict[str, Any]], dict[str, Any]],
    ) -> msgspec.Raw:
        """The JSON of `make(rt, obj)`, remembered while `obj` is the stored version."""
        versions = self._items.get((rt.key, key))
        if versions is None:
            if len(self._items) >= self._limit:
                self._items.clear()  # a bound on what a dropped resource could leave behind
            versions = self._items[(rt.key, key)] = {}
        found = versions.get(rt.api_version)
        if found is not None and found[0] is obj:
            return found[1]
        raw = msgspec.Raw(_encoder.encode(make(rt, obj)))
        versions[rt.api_version] = (obj, raw)
        return raw
