"""A small async Kubernetes REST client over aiohttp, for kubesim's own controllers.

The fake cluster's controllers talk to the API server over HTTP exactly like real controllers
do: list + watch with resourceVersion and bookmarks, relist on 410, reconnect on EOF, writes
with resourceVersion/UID preconditions, status through the `/status` subresource. Objects stay
raw JSON dicts (no client models) because the simulator must stay cheap at thousands of pods.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from kubesim.controllers.objects import Obj, key_of, rv_int
from kubesim.storeobserver import StoreObserver

__all__ = [
    "CONFIGMAPS",
    "CRDS",
    "EVENTS",
    "JOBS",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "PODS",
    "ApiError",
    "Informer",
    "KubeClient",
    "Resource",
    "StoreObserver",
]

log = logging.getLogger(__name__)

PatchType = Literal["merge", "json", "strategic"]
_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


@dataclass(frozen=True, slots=True)
class Resource:
    """One REST resource: `group`/`version`/`plural`, namespaced or cluster-scoped."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """`/api/v1/namespaces/ns/pods/name/status` and friends; no namespace = all namespaces."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base

    def path_of(self, obj: Mapping[str, Any], *, subresource: str | None = None) -> str:
        meta = obj.get("metadata") or {}
        return self.path(
            namespace=meta.get("namespace"), name=str(meta.get("name")), subresource=subresource
        )


PODS = Resource("", "v1", "pods", True, "Pod")
NODES = Resource("", "v1", "nodes", False, "Node")
EVENTS = Resource("", "v1", "events", True, "Event")
NAMESPACES = Resource("", "v1", "namespaces", False, "Namespace")
CONFIGMAPS = Resource("", "v1", "configmaps", True, "ConfigMap")
LEASES = Resource("coordination.k8s.io", "v1", "leases", True, "Lease")
JOBS = Resource("batch", "v1", "jobs", True, "Job")
CRDS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
)


class ApiError(Exception):
    """A non-2xx answer, carrying the server's `Status` object."""

    def __init__(self, status: int, body: Mapping[str, Any] | None, *, method: str, path: str):
        self.status = status
        self.body: Obj = dict(body or {})
        self.reason = str(self.body.get("reason") or "")
        self.message = str(self.body.get("message") or "")
        self.method = method
        self.path = path
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409


class KubeClient:
    """Async REST client; one aiohttp session, JSON in and out."""

    def __init__(
        self,
        base_url: str,
        *,
        user_agent: str = "kubesim-controllers",
        request_timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._user_agent = user_agent
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=256),
                headers={"User-Agent": self._user_agent, "Accept": "application/json"},
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Obj:
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self.session.request(
            method,
            self.base_url + path,
            params=params,
            data=data,
            headers=headers,
            timeout=self._timeout,
        ) as resp:
            text = await resp.text()
            payload: Any
            try:
                payload = json.loads(text) if text else {}
            except ValueError:
                payload = {"message": text}
            if resp.status >= 300:
                raise ApiError(
                    resp.status,
                    payload if isinstance(payload, dict) else None,
                    method=method,
                    path=path,
                )
            return payload if isinstance(payload, dict) else {"items": payload}

    async def get(self, path: str) -> Obj:
        return await self.request("GET", path)

    async def list(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
    ) -> Obj:
        """A full list (follows `continue` tokens when `limit` is given)."""
        params = _selectors(label_selector, field_selector)
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if limit is None:
            return await self.request("GET", path, params=params)
        params["limit"] = str(limit)
        first = await self.request("GET", path, params=params)
        items = list(first.get("items") or [])
        token = (first.get("metadata") or {}).get("continue")
        while token:
            page = await self.request("GET", path, params={**params, "continue": token})
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
        first["items"] = items
        return first

    async def watch(
        self,
        path: str,
        *,
        resource_version: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
    ) -> AsyncIterator[Obj]:
        """Yield watch events (`{"type", "object"}`) until the server closes the stream."""
        params = _selectors(label_selector, field_selector)
        params["watch"] = "true"
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if allow_bookmarks:
            params["allowWatchBookmarks"] = "true"
        if timeout_seconds is not None:
            params["timeoutSeconds"] = str(timeout_seconds)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None)
        async with self.session.get(self.base_url + path, params=params, timeout=timeout) as resp:
            if resp.status >= 300:
                text = await resp.text()
                try:
                    body = json.loads(text)
                except ValueError:
                    body = {"message": text}
                raise ApiError(resp.status, body, method="WATCH", path=path)
            # Split on newlines ourselves: StreamReader.readline caps line length, and one watch
            # event (a CRD with a large schema) can exceed it.
            buffer = b""
            async for chunk in resp.content.iter_any():
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
            if buffer.strip():
                yield json.loads(buffer)

    async def create(self, path: str, body: Mapping[str, Any]) -> Obj:
        return await self.request("POST", path, body=body)

    async def replace(self, path: str, body: Mapping[str, Any]) -> Obj:
        return await self.request("PUT", path, body=body)

    async def patch(self, path: str, body: Any, *, patch_type: PatchType = "merge") -> Obj:
        return await self.request(
            "PATCH", path, body=body, content_type=_PATCH_CONTENT_TYPES[patch_type]
        )

    async def get_status(self, path: str) -> Obj:
        """GET `<path>/status` (the whole object, as the real status subresource returns)."""
        return await self.get(f"{path}/status")

    async def replace_status(self, path: str, body: Mapping[str, Any]) -> Obj:
        """PUT `<path>/status`: only `status` changes; `metadata.resourceVersion` is checked."""
        return await self.replace(f"{path}/status", body)

    async def patch_status(self, path: str, body: Any, *, patch_type: PatchType = "merge") -> Obj:
        return await self.patch(f"{path}/status", body, patch_type=patch_type)

    async def delete(
        self,
        path: str,
        *,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> Obj:
        """DELETE with a `DeleteOptions` body (grace, propagation, UID/RV preconditions)."""
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        preconditions: Obj = {}
        if uid is not None:
            preconditions["uid"] = uid
        if resource_version is not None:
            preconditions["resourceVersion"] = resource_version
        if preconditions:
            options["preconditions"] = preconditions
        return await self.request("DELETE", path, body=options)


def _selectors(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    params: dict[str, str] = {}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    return params


Handler = Callable[[str, Obj], None]


class Informer:
    """List + watch one resource into a local cache, like client-go's reflector + store.

    Relists on `410 Expired` (HTTP or in-stream ERROR), resumes from the last seen
    resourceVersion (bookmarks included) when the stream ends, and backs off on connection
    errors or injected 5xx faults. Handlers run synchronously for each change; they should only
    wake a reconciler up.
    """

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout: int = 300,
    ) -> None:
        self.client = client
        self.resource = resource
        self._path = resource.path(namespace=namespace)
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._watch_timeout = watch_timeout
        self.store: dict[str, Obj] = {}
        self.synced = asyncio.Event()
        self.resource_version: str | None = None
        self._handlers: list[Handler] = []
        self._indexers: dict[str, Callable[[Obj], list[str]]] = {}
        self._indices: dict[str, dict[str, dict[str, Obj]]] = {}
        self._observers: list[StoreObserver] = []
        self.relists = 0

    def add_indexer(self, name: str, index_fn: Callable[[Obj], list[str]]) -> None:
        """Maintain an index (e.g. pods by `spec.nodeName`) alongside the cache."""
        self._indexers[name] = index_fn
        index: dict[str, dict[str, Obj]] = {}
        for key, obj in self.store.items():
            for value in index_fn(obj):
                index.setdefault(value, {})[key] = obj
        self._indices[name] = index

    def by_index(self, name: str, value: str) -> list[Obj]:
        return list(self._indices[name].get(value, {}).values())

    def index_values(self, name: str) -> list[str]:
        return [v for v, objs in self._indices[name].items() if objs]

    def add_observer(self, observer: StoreObserver) -> None:
        """Keep `observer` in step with the cache (a running total, say), from its contents now."""
        self._observers.append(observer)
        observer.reset(self.store.items())

    def _put(self, key: str, obj: Obj | None) -> None:
        old = self.store.get(key)
        if obj is None:
            self.store.pop(key, None)
        else:
            self.store[key] = obj
        for observer in self._observers:
            observer.replace(key, old, obj)
        for name, index_fn in self._indexers.items():
            index = self._indices[name]
            if old is not None:
                for value in index_fn(old):
                    bucket = index.get(value)
                    if bucket is not None:
                        bucket.pop(key, None)
                        if not bucket:
                            del index[value]
            if obj is not None:
                for value in index_fn(obj):
                    index.setdefault(value, {})[key] = obj

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def items(self) -> list[Obj]:
        return list(self.store.values())

    def get(self, key: str) -> Obj | None:
        return self.store.get(key)

    def observe(self, obj: Mapping[str, Any]) -> None:
        """Write-through: put the object returned by our own write into the cache.

        Keeps a controller from acting twice on a stale cache before the watch catches up (the
        role client-go's "expectations" and mutation cache play).
        """
        key = key_of(obj)
        current = self.store.get(key)
        if current is None or rv_int(obj) > rv_int(current):
            self._put(key, dict(obj))

    def _emit(self, kind: str, obj: Obj) -> None:
        for handler in self._handlers:
            try:
                handler(kind, obj)
            except Exception:  # a handler bug must not kill the watch
                log.exception("informer handler failed for %s", self.resource.plural)

    async def _relist(self) -> None:
        listing = await self.client.list(
            self._path, label_selector=self._label_selector, field_selector=self._field_selector
        )
        self.relists += 1
        fresh = {key_of(item): item for item in listing.get("items") or []}
        old = self.store
        self.store = fresh
        for name in self._indexers:
            self.add_indexer(name, self._indexers[name])
        for observer in self._observers:
            observer.reset(fresh.items())
        self.resource_version = str((listing.get("metadata") or {}).get("resourceVersion") or "0")
        for key, obj in old.items():
            if key not in fresh:
                self._emit("DELETED", obj)
        for key, obj in fresh.items():
            self._emit("MODIFIED" if key in old else "ADDED", obj)
        self.synced.set()

    def _apply(self, kind: str, obj: Obj) -> None:
        key = key_of(obj)
        if kind == "DELETED":
            self._put(key, None)
        else:
            current = self.store.get(key)
            if current is not None and rv_int(current) > rv_int(obj):
                return  # our own write-through already holds something newer
            self._put(key, obj)
        self._emit(kind, obj)

    async def run(self) -> None:
        backoff = 0.05
        while True:
            try:
                if self.resource_version is None:
                    await self._relist()
                async for event in self.client.watch(
                    self._path,
                    resource_version=self.resource_version,
                    label_selector=self._label_selector,
                    field_selector=self._field_selector,
                    timeout_seconds=self._watch_timeout,
                ):
                    kind = event.get("type")
                    obj = event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") in (410,) or obj.get("reason") in ("Expired", "Gone"):
                            self.resource_version = None  # too old: relist
                            break
                        raise ApiError(int(obj.get("code") or 500), obj, method="WATCH", path="")
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        self.resource_version = str(rv)
                    if kind == "BOOKMARK":
                        continue
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self._apply(kind, obj)
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                if exc.status == 410:
                    self.resource_version = None
                    continue
                log.debug("informer %s: %s", self.resource.plural, exc)
                await asyncio.sleep(backoff * (1 + random.random()))
                backoff = min(backoff * 2, 2.0)
            except (aiohttp.ClientError, TimeoutError, ConnectionError, ValueError) as exc:
                log.debug("informer %s: %r", self.resource.plural, exc)
                await asyncio.sleep(backoff * (1 + random.random()))
                backoff = min(backoff * 2, 2.0)


async def cancel_tasks(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel background tasks and wait for them to finish."""
    pending = {t for t in tasks if not t.done()}
    for _ in range(3):  # re-cancel: a task may absorb one cancellation while it is cleaning up
        if not pending:
            break
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=2.0)
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # mark retrieved: failures were logged where they happened
