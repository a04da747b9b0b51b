"""apiVersion + kind → REST resource, by API discovery (generic items can be any kind).

The tracker GETs, LISTs and force-deletes objects of kinds it learns at run time (Job,
PyTorchJob, Service, …). Discovery documents (`/api/v1`, `/apis/<group>/<version>`) name the
plural of each kind; they are cached per group/version. A group/version the server does not
serve (404) resolves to None: objects of a kind that is not served cannot exist, which is
what lets a teardown of an item whose CRD was removed finish (appwrapper #276).
"""

from __future__ import annotations

import asyncio
from typing import Final

import msgspec

from clearance.kube import PODS, Kube, KubeError, Resource


class _ApiResource(msgspec.Struct, frozen=True):
    name: str
    kind: str
    namespaced: bool = True


class _ResourceList(msgspec.Struct, frozen=True):
    resources: list[_ApiResource] = msgspec.field(default_factory=list)


_DECODER: Final = msgspec.json.Decoder(_ResourceList)


class Resolver:
    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._cache: dict[str, dict[str, Resource]] = {"v1": {"Pod": PODS}}
        self._lock = asyncio.Lock()

    async def resolve(self, api_version: str, kind: str) -> Resource | None:
        """The resource serving `kind`, None when the server does not serve it.

        Raises :class:`KubeError` when discovery itself failed (not a 404): the caller
        retries later rather than concluding anything.
        """
        known = self._cache.get(api_version)
        if known is not None and kind in known:
            return known[kind]
        async with self._lock:
            known = await self._discover(api_version)
        return known.get(kind)

    async def _discover(self, api_version: str) -> dict[str, Resource]:
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            data = await self._kube.request("GET", path)
        except KubeError as exc:
            if exc.not_found:
                return {}
            raise
        found: dict[str, Resource] = {}
        for res in _DECODER.decode(data).resources:
            if "/" in res.name:
                continue  # subresources
            found[res.kind] = Resource(group, version, res.name, res.kind, res.namespaced)
        self._cache[api_version] = {**self._cache.get(api_version, {}), **found}
        return self._cache[api_version]
