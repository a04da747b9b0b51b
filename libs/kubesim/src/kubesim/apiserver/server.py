"""The API server itself: its parts (store, registry, faults, flow control, request log),
the route table, start and stop, the middleware that records, limits and fault-injects
every request, discovery and OpenAPI documents, and the dispatch of a resource path to
the registry verb it names.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from aiohttp import web

from kubesim import discovery, openapi
from kubesim.admin import FaultInjector, add_admin_routes, too_many_requests
from kubesim.apiserver.http import (
    _NAMESPACE_SUBRESOURCES,
    Handler,
    _is_collection,
    _json,
    _Route,
    _status_response,
)
from kubesim.apiserver.watching import WatchStreams
from kubesim.audit import (
    Actor,
    RequestLog,
    RequestRecord,
    current_actor,
    request_digest,
    verb_of,
)
from kubesim.flowcontrol import FlowControl, FlowControlConfig, Rejection
from kubesim.kubeconfig import write_kubeconfig
from kubesim.registry import Registry
from kubesim.resources import ResourceRegistry
from kubesim.selectors import SelectorError, parse_bool
from kubesim.statuses import ApiError, method_not_allowed, path_not_found
from kubesim.store import Store


class ApiServer(WatchStreams):
    """In-process Kubernetes API server simulator."""

    def __init__(
        self,
        history_limit: int = 10_000,
        bookmark_interval: float = 60.0,
        *,
        default_toleration_seconds: int = 300,
        watch_timeout: float = 1800.0,
        watch_queue_limit: int = 50_000,
        shutdown_timeout: float = 2.0,
        too_large_rv_wait: float = 3.0,
        flow_control: FlowControlConfig | None = None,
    ) -> None:
        self.store = Store(history_limit=history_limit, watch_queue_limit=watch_queue_limit)
        self.resources = ResourceRegistry()
        self.registry = Registry(
            self.store, self.resources, default_toleration_seconds=default_toleration_seconds
        )
        self.registry.ensure_default_namespaces()
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self.shutdown_timeout = shutdown_timeout
        self.too_large_rv_wait = too_large_rv_wait
        self.faults = FaultInjector()
        self.flow = FlowControl(flow_control)
        self.requests = RequestLog()
        self.openapi = openapi.OpenApiDocuments(self.resources)
        self.app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024**2)
        self._runner: web.AppRunner | None = None
        self.url = ""
        self._stopping = False
        add_admin_routes(
            self.app, store=self.store, faults=self.faults, requests=self.requests, flow=self.flow
        )
        r = self.app.router
        r.add_get("/version", self._version)
        r.add_get("/version/", self._version)
        r.add_get("/api", self._api)
        r.add_get("/api/", self._api)
        r.add_get("/apis", self._apis)
        r.add_get("/apis/", self._apis)
        r.add_get("/openapi/v3", self._openapi_index)
        r.add_get("/openapi/v3/", self._openapi_index)
        r.add_get("/openapi/v3/{path:.*}", self._openapi_doc)
        r.add_get("/healthz", self._ok)
        r.add_get("/readyz", self._ok)
        r.add_get("/livez", self._ok)
        r.add_route("*", "/api/v1", self._core_discovery)
        r.add_route("*", "/api/v1/", self._core_discovery)
        r.add_route("*", "/api/v1/{tail:.+}", self._core_resource)
        r.add_route("*", "/apis/{group}", self._group_discovery)
        r.add_route("*", "/apis/{group}/", self._group_discovery)
        r.add_route("*", "/apis/{group}/{version}", self._gv_discovery)
        r.add_route("*", "/apis/{group}/{version}/", self._gv_discovery)
        r.add_route("*", "/apis/{group}/{version}/{tail:.+}", self._group_resource)

    # ---- lifecycle --------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._runner = web.AppRunner(
            self.app, shutdown_timeout=self.shutdown_timeout, access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        actual = sockets[0].getsockname()[1] if sockets else port
        self.url = f"http://{host}:{actual}"
        return self.url

    async def stop(self) -> None:
        self._stopping = True
        self.store.close_watchers()
        await asyncio.sleep(0)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def write_kubeconfig(self, path: str | Path) -> Path:
        if not self.url:
            raise RuntimeError("start() the server before writing a kubeconfig")
        return write_kubeconfig(path, self.url)

    # ---- middleware -------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/kubesim/"):
            return await self._handle(request, handler)
        watch = request.query.get("watch") in ("1", "true", "True")
        record = RequestRecord(
            id=self.requests.next_id(),
            started=time.time(),
            ended=0.0,
            method=request.method,
            path=request.path,
            verb=verb_of(request.method, collection=_is_collection(request.path), watch=watch),
            user_agent=request.headers.get("User-Agent", ""),
            code=0,
            request_id=request.headers.get("X-Request-Id", ""),
        )
        current_actor.set(Actor(record.user_agent, record.verb, record.id))
        if watch:
            record.ended = record.started
            self.requests.add(record)
        else:
            body = await request.read() if request.can_read_body else b""
            record.digest = request_digest(request.method, request.path_qs, body)
        slot = self.flow.admit(path=request.path, verb=record.verb, user_agent=record.user_agent)
        try:
            if isinstance(slot, Rejection):
                record.retry_after = slot.retry_after
                response: web.StreamResponse = too_many_requests(slot.retry_after)
            else:
                response = await self._handle(request, handler)
            record.code = response.status
            return response
        except BaseException:
            record.code = record.code or 500
            raise
        finally:
            if not isinstance(slot, Rejection):
                slot.release()
            if not watch:
                record.ended = time.time()
                self.requests.add(record)

    async def _handle(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith("/kubesim/"):
            rule = self.faults.match(
                request.method, request.path, request.headers.get("User-Agent", "")
            )
            if rule is not None:
                if rule.latency > 0:
                    await asyncio.sleep(rule.latency)
                err = FaultInjector.error_for(rule)
                if err is not None:
                    return _status_response(err)
        try:
            return await handler(request)
        except ApiError as err:
            return _status_response(err)
        except web.HTTPException as exc:
            if exc.status == 404:
                return _status_response(path_not_found())
            if exc.status == 405:
                return _status_response(method_not_allowed())
            raise

    # ---- discovery --------------------------------------------------------------------

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _version(self, request: web.Request) -> web.Response:
        return _json(discovery.version())

    async def _api(self, request: web.Request) -> web.Response:
        return _json(discovery.core_versions())

    async def _apis(self, request: web.Request) -> web.Response:
        return _json(discovery.group_list(self.resources))

    async def _core_discovery(self, request: web.Request) -> web.Response:
        if request.method != "GET":
            raise method_not_allowed()
        doc = discovery.resource_list(self.resources, "", "v1")
        return _json(doc)

    async def _group_discovery(self, request: web.Request) -> web.Response:
        doc = discovery.group(self.resources, request.match_info["group"])
        if doc is None:
            raise path_not_found()
        return _json(doc)

    async def _gv_discovery(self, request: web.Request) -> web.Response:
        doc = discovery.resource_list(
            self.resources, request.match_info["group"], request.match_info["version"]
        )
        if doc is None:
            raise path_not_found()
        return _json(doc)

    async def _openapi_index(self, request: web.Request) -> web.Response:
        return _json(self.openapi.index())

    async def _openapi_doc(self, request: web.Request) -> web.Response:
        doc = self.openapi.document(request.match_info["path"])
        if doc is None:
            raise path_not_found()
        resp = web.Response(body=doc, content_type="application/json")
        return resp

    # ---- routing ----------------------------------------------------------------------

    async def _core_resource(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.match_info["tail"].split("/") if p]
        return await self._dispatch(request, "", "v1", parts)

    async def _group_resource(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.match_info["tail"].split("/") if p]
        return await self._dispatch(
            request, request.match_info["group"], request.match_info["version"], parts
        )

    def _route(self, group: str, version: str, parts: list[str]) -> _Route:
        lookup = self.resources.lookup
        if not parts:
            raise path_not_found()
        if parts[0] == "namespaces" and len(parts) >= 3 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            rt = lookup(group, version, parts[2])
            if rt is None or not rt.namespaced or len(parts) > 5:
                raise path_not_found()
            name = parts[3] if len(parts) > 3 else None
            sub = parts[4] if len(parts) > 4 else ""
            return _Route(rt, parts[1], name, sub)
        rt = lookup(group, version, parts[0])
        if rt is None or len(parts) > 3:
            raise path_not_found()
        name = parts[1] if len(parts) > 1 else None
        sub = parts[2] if len(parts) > 2 else ""
        if name is not None and rt.namespaced:
            raise path_not_found()
        return _Route(rt, None, name, sub)

    async def _dispatch(
        self, request: web.Request, group: str, version: str, parts: list[str]
    ) -> web.StreamResponse:
        route = self._route(group, version, parts)
        rt = route.rt
        method = request.method
        q = request.query
        if route.subresource and not rt.has_subresource(route.subresource):
            raise path_not_found()
        if route.name is None:
            if method == "GET":
                try:
                    watch = parse_bool(q.get("watch"))
                except SelectorError as exc:
                    raise ApiError(400, "BadRequest", str(exc)) from exc
                if watch:
                    return await self._watch(request, rt, route.namespace)
                return await self._list(request, rt, route.namespace)
            if method == "POST":
                if rt.namespaced and route.namespace is None:
                    raise method_not_allowed()
                body, dupes = await self._body(request)
                result = self.registry.create(
                    rt,
                    route.namespace,
                    body,
                    field_validation=self._field_validation(q),
                    duplicates=dupes,
                    dry_run=bool(q.get("dryRun")),
                )
                return _json(result.obj, result.code, result.warnings)
            if method == "DELETE":
                opts = await self._delete_options(request)
                listing = self.registry.delete_collection(
                    rt,
                    route.namespace,
                    opts,
                    label_selector=q.get("labelSelector", ""),
                    field_selector=q.get("fieldSelector", ""),
                )
                return _json(listing)
            raise method_not_allowed()
        name = route.name
        sub = route.subresource
        if sub == "binding":
            if method != "POST":
                raise method_not_allowed()
            body, _ = await self._body(request)
            return _json(self.registry.bind(route.namespace or "", name, body), 201)
        if sub == "eviction":
            if method != "POST":
                raise method_not_allowed()
            body, _ = await self._body(request)
            return _json(self.registry.evict(route.namespace or "", name, body), 201)
        if method == "GET":
            obj = self.registry.get(rt, route.namespace, name)
            return self._object_response(request, rt, obj)
        if method == "PUT":
            if sub == "finalize" and rt.plural != "namespaces":
                raise method_not_allowed()
            body, dupes = await self._body(request)
            result = self.registry.update(
                rt,
                route.namespace,
                name,
                body,
                subresource=sub,
                field_validation=self._field_validation(q),
                duplicates=dupes,
                dry_run=bool(q.get("dryRun")),
            )
            return _json(result.obj, result.code, result.warnings)
        if method == "PATCH":
            if sub == "finalize":
                raise method_not_allowed()
            raw = await request.read()
            result = self.registry.patch(
                rt,
                route.namespace,
                name,
                raw,
                request.headers.get("Content-Type", ""),
                subresource=sub,
                field_validation=self._field_validation(q),
                dry_run=bool(q.get("dryRun")),
            )
            return _json(result.obj, result.code, result.warnings)
        if method == "DELETE":
            if sub:
                raise method_not_allowed()
            opts = await self._delete_options(request)
            result = self.registry.delete(rt, route.namespace, name, opts)
            return _json(result.obj, result.code)
        raise method_not_allowed()
