"""API discovery: apiVersion + kind → REST :class:`~clearance.kube.Resource`, for every service.

Generic items of an AppWrapper can be of any kind (Job, PyTorchJob, Service, …), so each service
learns at run time where a kind lives: its plural (the URL segment) and whether it is namespaced.
The API server publishes that per group/version (``GET /api/v1``, ``GET /apis/<group>/<version>``,
an ``APIResourceList``); this module fetches, caches and answers from those documents.

* **Cached per group/version.** One request answers every kind of a group/version. A document is
  fetched again once it is older than ``ttl`` (default: never; kinds do not move).
* **Refreshed on a miss.** A kind missing from the cached document (a CRD registered since) makes
  the next lookup fetch the document again, at most once per ``miss_retry`` seconds per
  group/version, so an AppWrapper naming a bogus kind cannot become a request storm.
  ``miss_retry=0`` asks the server on every miss (the tracker: "not served" lets a teardown finish,
  so it must never be an old answer).
* **A clear answer.** :meth:`Discovery.resolve` raises :class:`UnknownKind` naming the kind and the
  apiVersion when the server does not serve it (a group/version it answers 404 for serves nothing);
  :meth:`Discovery.find` returns None instead. A failure of discovery itself (server unreachable,
  5xx, a document that is not an ``APIResourceList``) is a :class:`~clearance.kube.KubeError`: the
  caller retries later rather than concluding anything.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

import msgspec

from clearance.kube import Kube, KubeError, Resource


class UnknownKind(LookupError):
    """The API server does not serve this kind in this apiVersion."""

    def __init__(self, api_version: str, kind: str) -> None:
        super().__init__(f"the API server does not serve kind {kind} in {api_version}")
        self.api_version = api_version
        self.kind = kind


class _ApiResource(msgspec.Struct, frozen=True):
    name: str
    kind: str = ""
    namespaced: bool = True


class _ApiResourceList(msgspec.Struct, frozen=True):
    resources: list[_ApiResource] = msgspec.field(default_factory=list)


_RESOURCE_LIST: Final = msgspec.json.Decoder(_ApiResourceList)


def split_api_version(api_version: str) -> tuple[str, str]:
    """``batch/v1`` → (``batch``, ``v1``); ``v1`` → (``""``, ``v1``)."""
    group, _, version = api_version.rpartition("/")
    return group, version


def resources_of(api_version: str, document: bytes) -> dict[str, Resource]:
    """kind → Resource from one ``APIResourceList`` (subresources like ``pods/status`` skipped).

    Raises ``msgspec.DecodeError`` when the document is not an ``APIResourceList``.
    """
    group, version = split_api_version(api_version)
    return {
        entry.kind: Resource(group, version, entry.name, entry.kind, namespaced=entry.namespaced)
        for entry in _RESOURCE_LIST.decode(document).resources
        if entry.kind and "/" not in entry.name
    }


@dataclass(frozen=True, slots=True)
class _Document:
    kinds: dict[str, Resource]
    fetched_at: float
    """Monotonic time of the fetch."""


@dataclass
class Discovery:
    """apiVersion + kind → :class:`Resource`, from the API server's discovery documents."""

    kube: Kube
    ttl: float = math.inf
    """A cached group/version document older than this (seconds) is fetched again on use."""
    miss_retry: float = 1.0
    """A kind missing from a cached document refetches it once the document is this old."""
    preload: Iterable[Resource] = ()
    """Resources known without asking (e.g. pods); they never expire."""
    clock: Callable[[], float] = time.monotonic
    requests: int = 0
    """Discovery documents fetched so far (for tests and metrics)."""
    _cache: dict[str, _Document] = field(default_factory=dict)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    _preloaded: dict[tuple[str, str], Resource] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._preloaded = {(r.api_version, r.kind): r for r in self.preload}

    async def resolve(self, api_version: str, kind: str) -> Resource:
        """The resource serving ``kind``; :class:`UnknownKind` when the server does not serve it.

        Raises :class:`KubeError` when discovery itself failed.
        """
        resource = await self.find(api_version, kind)
        if resource is None:
            raise UnknownKind(api_version, kind)
        return resource

    async def find(self, api_version: str, kind: str) -> Resource | None:
        """The resource serving ``kind``, or None when the server does not serve it."""
        _, version = split_api_version(api_version)
        if not version or not kind:
            return None
        preloaded = self._preloaded.get((api_version, kind))
        if preloaded is not None:
            return preloaded
        document = self._cache.get(api_version)
        if document is not None and not self._due(document, hit=kind in document.kinds):
            return document.kinds.get(kind)
        lock = self._locks.setdefault(api_version, asyncio.Lock())
        async with lock:
            document = self._cache.get(api_version)  # fetched meanwhile by another lookup?
            if document is None or self._due(document, hit=kind in document.kinds):
                document = await self._fetch(api_version)
        return document.kinds.get(kind)

    def _due(self, document: _Document, *, hit: bool) -> bool:
        age = self.clock() - document.fetched_at
        return age >= self.ttl or (not hit and age >= self.miss_retry)

    async def _fetch(self, api_version: str) -> _Document:
        group, version = split_api_version(api_version)
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        now = self.clock()
        self.requests += 1
        try:
            kinds = resources_of(api_version, await self.kube.request("GET", path))
        except KubeError as exc:
            if not exc.not_found:
                raise
            kinds = {}  # the server serves nothing under this group/version
        except msgspec.DecodeError as exc:
            raise KubeError(
                code=0,
                reason="BadDiscoveryDocument",
                message=f"GET {path} did not answer an APIResourceList: {exc}",
            ) from exc
        document = _Document(kinds, now)
        self._cache[api_version] = document
        return document
