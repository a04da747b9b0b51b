"""Raw-JSON access to the Kubernetes API for every Clearance service.

kubernetes-asyncio gives us what is hard to get right (kubeconfig and in-cluster config, auth
plugins, TLS, an aiohttp session), but its generated model classes are slow and lossy for
arbitrary kinds: generic items of an AppWrapper can be any kind, including custom resources.
So this module uses the client's ``ApiClient`` for transport only and speaks the REST protocol
itself: paths are built from a :class:`Resource`, bodies are plain dicts, responses are bytes
that callers decode with msgspec into the slim structs they need.

Errors come back as :class:`KubeError` carrying the server's ``Status`` (code, reason, message),
so callers branch on ``error.code == 404`` instead of parsing client exceptions.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
import msgspec
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from clearance import apimanners, testfaults
from clearance.fencing import Fenced, Term
from clearance.kubesession import distrust_environment, resolve_proxy_once

JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"


@dataclass(frozen=True, slots=True)
class Resource:
    """One REST resource: where it lives in the URL space and what its objects are called."""

    group: str
    """API group; ``""`` for the core group (served under ``/api``)."""
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, *, namespace: str | None = None, name: str | None = None) -> str:
        """The collection path (``name`` None) or the object path, honouring the scope."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
        return base


PODS: Final = Resource("", "v1", "pods", "Pod")
NODES: Final = Resource("", "v1", "nodes", "Node", namespaced=False)
EVENTS: Final = Resource("", "v1", "events", "Event")
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases", "Lease")
JOBS: Final = Resource("batch", "v1", "jobs", "Job")


class KubeError(Exception):
    """A request the API server answered with an error ``Status`` (or could not answer)."""

    def __init__(self, *, code: int, reason: str, message: str, body: bytes = b"") -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.body = body

    @property
    def not_found(self) -> bool:
        return self.code == 404

    @property
    def conflict(self) -> bool:
        return self.code == 409

    @property
    def expired(self) -> bool:
        return self.code == 410


class FencedWrite(KubeError, Fenced):
    """A write refused before it was sent: this replica's term is not held (DESIGN §5)."""

    def __init__(self, message: str) -> None:
        super().__init__(code=0, reason="Fenced", message=message)


_WRITES: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


REQUEST_ID: Final = "X-Request-Id"
"""Header naming one logical request, the same on each of its retries: an API server's request
log can then tell a retry after a 429 from another request with the same content."""
_REQUEST_IDS = itertools.count(1)


def _is_lease(path: str) -> bool:
    return f"/{LEASES.group}/" in path and f"/{LEASES.plural}" in path


class _Status(msgspec.Struct):
    code: int = 0
    reason: str = ""
    message: str = ""


_STATUS_DECODER: Final = msgspec.json.Decoder(_Status)


def _error_from(status: int, body: bytes, fallback_reason: str) -> KubeError:
    try:
        decoded = _STATUS_DECODER.decode(body)
        return KubeError(
            code=decoded.code or status,
            reason=decoded.reason or fallback_reason,
            message=decoded.message or body.decode("utf-8", "replace")[:500],
            body=body,
        )
    except msgspec.DecodeError:
        text = body.decode("utf-8", "replace")[:500]
        return KubeError(code=status, reason=fallback_reason, message=text, body=body)


class _ListMeta(msgspec.Struct):
    resourceVersion: str = ""  # Kubernetes wire name
    # `continue` is a Python keyword; msgspec renames it on the wire.
    continue_: str = msgspec.field(default="", name="continue")


class _RawList(msgspec.Struct):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[msgspec.Raw] = msgspec.field(default_factory=list)


class ListResult(msgspec.Struct, frozen=True):
    """The items of a (possibly paginated) LIST and the collection's resourceVersion."""

    resource_version: str
    items: list[msgspec.Raw]


class WatchLine(msgspec.Struct):
    """One line of a watch stream; ``object`` stays raw so callers pick the decode type."""

    type: str
    object: msgspec.Raw


_LIST_DECODER: Final = msgspec.json.Decoder(_RawList)
_WATCH_DECODER: Final = msgspec.json.Decoder(WatchLine)


@dataclass(frozen=True, slots=True)
class KubeConfig:
    """How to reach the API server: kubeconfig file and context, else in-cluster."""

    kubeconfig: str | None = None
    context: str | None = None
    request_timeout: float = 30.0
    user_agent: str | None = None
    """``User-Agent`` of every request; see :func:`user_agent`. The API server's audit log
    (and kubesim's write history) names the writing client by it."""
    qps: float = 0.0
    """Client-side rate limit, requests per second (0: none; services pass their settings,
    default :data:`clearance.apimanners.DEFAULT_QPS`)."""
    burst: int = apimanners.DEFAULT_BURST
    max_retries: int = 0
    """Retries after 429 / 5xx (:mod:`clearance.apimanners`; 0: none)."""


def user_agent(service: str, identity: str) -> str:
    """``clearance-<service>/<version> (<identity>; pid <pid>)``: one client per process."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("clearance")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        release = "0"
    return f"clearance-{service}/{release} ({identity}; pid {os.getpid()})"


class Kube:
    """An async Kubernetes client speaking raw JSON; one per service process."""

    def __init__(
        self,
        api: k8s_client.ApiClient,
        *,
        request_timeout: float = 30.0,
        manners: apimanners.Manners | None = None,
    ) -> None:
        self._api = api
        self._timeout = request_timeout
        self.manners = manners
        self._unmannered = testfaults.active("unmannered")
        """Rate limit and 429/5xx retries (:mod:`clearance.apimanners`); None: neither."""
        self.fence: Term | None = None
        """When set, every write except to Leases first checks this term (fencing): a replica
        that lost its lease sends no write. Lease writes are the election's own."""

    @classmethod
    async def connect(cls, config: KubeConfig | None = None) -> Kube:
        """Load configuration: explicit kubeconfig, else ``$KUBECONFIG``, else in-cluster."""
        config = config or KubeConfig()
        configuration = k8s_client.Configuration()
        path = config.kubeconfig or os.environ.get("KUBECONFIG")
        if path or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            await k8s_config.load_kube_config(
                config_file=path, context=config.context, client_configuration=configuration
            )
        else:
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        resolve_proxy_once(configuration)
        api = k8s_client.ApiClient(configuration)
        distrust_environment(api)
        if config.user_agent:
            api.user_agent = config.user_agent
        manners = (
            apimanners.Manners(qps=config.qps, burst=config.burst, max_retries=config.max_retries)
            if config.qps > 0 or config.max_retries > 0
            else None
        )
        return cls(api, request_timeout=config.request_timeout, manners=manners)

    @property
    def host(self) -> str:
        return str(self._api.configuration.host)

    async def close(self) -> None:
        await self._api.close()

    async def __aenter__(self) -> Kube:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _open(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool | None] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: aiohttp.ClientTimeout | float | None = None,
    ) -> aiohttp.ClientResponse:
        if self.fence is not None and method in _WRITES and not _is_lease(path):
            try:
                self.fence.check(f"{method} {path}")
            except Fenced as exc:
                raise FencedWrite(str(exc)) from None
        params = [
            (k, ("true" if v else "false") if isinstance(v, bool) else str(v))
            for k, v in (query or {}).items()
            if v is not None
        ]
        manners = self.manners
        unmannered = self._unmannered
        request_id = f"{os.getpid()}-{next(_REQUEST_IDS)}"
        retry = 0
        while True:
            # Lease requests skip the shared bucket: the election paces itself (one request per
            # retry period), and a renewal queued behind a burst of work would lose the term —
            # controller-runtime gives leader election a client of its own for the same reason.
            if manners is not None and not unmannered and not _is_lease(path):
                await manners.bucket.take()
                if retry and self.fence is not None and method in _WRITES and not _is_lease(path):
                    try:  # the pause may have outlived the lease: check again
                        self.fence.check(f"{method} {path}")
                    except Fenced as exc:
                        raise FencedWrite(str(exc)) from None
            try:
                response: aiohttp.ClientResponse = await self._api.call_api(
                    path,
                    method,
                    query_params=params,
                    header_params={
                        "Accept": JSON,
                        "Content-Type": content_type,
                        REQUEST_ID: request_id,
                    },
                    body=body,
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=timeout if timeout is not None else self._timeout,
                )
            except (aiohttp.ClientError, OSError) as exc:
                raise KubeError(code=0, reason="Unreachable", message=str(exc)) from exc
            if response.status < 400:
                return response
            data = await response.read()
            response.release()
            pause = None
            if manners is not None:
                manners.throttled += response.status == 429
                if retry < manners.max_retries:
                    pause = apimanners.pause_before_retry(
                        status=response.status,
                        method=method,
                        headers=response.headers,
                        retry=retry + 1,
                    )
            if pause is None:
                raise _error_from(response.status, data, response.reason or "Error")
            assert manners is not None
            manners.retried += 1
            retry += 1
            await asyncio.sleep(0.0 if unmannered else pause)

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool | None] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> bytes:
        """One request; returns the response body, raises :class:`KubeError` on failure."""
        response = await self._open(method, path, query=query, body=body, content_type=content_type)
        try:
            return await response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise KubeError(code=0, reason="ReadFailed", message=str(exc)) from exc
        finally:
            response.release()

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
    ) -> ListResult:
        """A consistent LIST (no resourceVersion → quorum read), following ``continue`` tokens."""
        items: list[msgspec.Raw] = []
        token: str | None = None
        resource_version = ""
        while True:
            data = await self.request(
                "GET",
                resource.path(namespace=namespace),
                query={
                    "labelSelector": label_selector,
                    "fieldSelector": field_selector,
                    "limit": page_size,
                    "continue": token,
                },
            )
            page = _LIST_DECODER.decode(data)
            if not resource_version:
                resource_version = page.metadata.resourceVersion
            items.extend(page.items)
            token = page.metadata.continue_ or None
            if token is None:
                return ListResult(resource_version=resource_version, items=items)

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> bytes:
        return await self.request("GET", resource.path(namespace=namespace, name=name))

    async def create(
        self, resource: Resource, body: Mapping[str, Any], *, namespace: str | None = None
    ) -> bytes:
        return await self.request("POST", resource.path(namespace=namespace), body=dict(body))

    async def replace(
        self,
        resource: Resource,
        name: str,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
    ) -> bytes:
        """PUT: optimistic concurrency through ``metadata.resourceVersion`` in ``body``."""
        return await self.request(
            "PUT", resource.path(namespace=namespace, name=name), body=dict(body)
        )

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        content_type: str = MERGE_PATCH,
        subresource: str | None = None,
    ) -> bytes:
        path = resource.path(namespace=namespace, name=name)
        if subresource:
            path += f"/{subresource}"
        return await self.request("PATCH", path, body=patch, content_type=content_type)

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = "Background",
        uid: str | None = None,
    ) -> bytes:
        """DELETE with options in the body (the body wins over query parameters)."""
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        return await self.request(
            "DELETE", resource.path(namespace=namespace, name=name), body=options
        )

    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        inactivity_timeout: float = 90.0,
    ) -> AsyncGenerator[WatchLine, None]:
        """Watch from ``resource_version`` with bookmarks; ends at EOF.

        ``inactivity_timeout`` bounds the wait for one line: with bookmarks every minute a
        silent stream means a dead connection, and the caller should resume.
        """
        response = await self._open(
            "GET",
            resource.path(namespace=namespace),
            query={
                "watch": True,
                "resourceVersion": resource_version,
                "allowWatchBookmarks": True,
                "timeoutSeconds": timeout_seconds,
                "labelSelector": label_selector,
                "fieldSelector": field_selector,
            },
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._timeout),
        )
        try:
            while True:
                line = await read_line(response.content, timeout=inactivity_timeout)
                if not line:
                    return
                if line.strip():
                    yield _WATCH_DECODER.decode(line)
        finally:
            response.close()


async def read_line(content: aiohttp.StreamReader, *, timeout: float) -> bytes:
    """One line of a watch stream, or TimeoutError after ``timeout`` seconds.

    Not ``asyncio.wait_for``: on Python 3.11 it swallows a cancellation that arrives as the
    line does (it returns the line instead), and a cancelled informer then watches on forever
    — a watcher that lost its lease after a freeze kept its pod watch open and ignored SIGTERM.
    """
    async with asyncio.timeout(timeout):
        return await content.readline()


def error_status(line: WatchLine) -> KubeError:
    """The error carried by an ``ERROR`` watch event (410 Expired, usually)."""
    return _error_from(500, bytes(line.object), "WatchError")
