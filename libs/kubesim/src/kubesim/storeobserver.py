"""What an informer tells a listener that keeps something in step with its cache."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from kubesim.controllers.objects import Obj


class StoreObserver(Protocol):
    """Told of every change to an informer's cache, write-through included
    (:meth:`kubesim.client.Informer.add_observer`)."""

    def replace(self, key: str, old: Obj | None, new: Obj | None) -> None: ...

    def reset(self, items: Iterable[tuple[str, Obj]]) -> None: ...
