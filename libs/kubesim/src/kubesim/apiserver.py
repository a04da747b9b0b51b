"""The kubesim HTTP API server (aiohttp): routing, request decoding, responses, watch streams.

Decisions live in :mod:`kubesim.registry` (REST semantics), :mod:`kubesim.store` (revisions,
history, fan-out) and the pure helper modules; this module only translates HTTP.

Public interface (other components rely on it)::

    server = ApiServer(history_limit=10_000, bookmark_interval=60.0)
    server.app                      # add routes before start()
    url = await server.start(host="127.0.0.1", port=0)
    server.write_kubeconfig(path)
    await server.stop()
    server.store
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from kubesim import discovery, openapi, protobuf, tables
from kubesim.admin import FaultInjector, add_admin_routes, too_many_requests
from kubesim.audit import Actor, RequestLog, RequestRecord, current_actor, verb_of
from kubesim.deletion import DeleteOptions
from kubesim.flowcontrol import FlowControl, FlowControlConfig, Rejection
from kubesim.kubeconfig import write_kubeconfig
from kubesim.registry import Registry
from kubesim.resources import ResourceRegistry, ResourceType
from kubesim.selectors import SelectorError, parse_bool
from kubesim.statuses import ApiError, method_not_allowed, path_not_found, too_old_resource_version
from kubesim.store import Store, Watcher, WatchEvent

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_NAMESPACE_SUBRESOURCES = ("status", "finalize")


def encode(obj: Any) -> bytes:
    return _encoder.encode(obj)


def _json(obj: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    resp = web.Response(body=encode(obj), status=status, content_type="application/json")
    for w in warnings or []:
        escaped = w.replace("\\", "\\\\").replace('"', '\\"')
        resp.headers.add("Warning", f'299 - "{escaped}"')
    return resp


def _status_response(err: ApiError) -> web.Response:
    resp = _json(err.status(), err.code, err.warnings)
    # responsewriters.ErrorNegotiated: a Status with retryAfterSeconds also says Retry-After.
    retry = (err.details or {}).get("retryAfterSeconds")
    if isinstance(retry, int) and retry > 0:
        resp.headers["Retry-After"] = str(retry)
    return resp


def _find_duplicates(body: bytes) -> list[str]:
    """Duplicate JSON keys (strict decoding reports them); only scanned when asked."""
    dupes: list[str] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                dupes.append(k)
            seen.add(k)
        return dict(pairs)

    try:
        json.loads(body, object_pairs_hook=hook)
    except ValueError:
        return []
    return dupes


def _is_collection(path: str) -> bool:
    """True for a collection path (``…/pods``), false for an object (``…/pods/p``)."""
    parts = [p for p in path.split("/") if p]
    # /api/v1/<plural>[/<name>...] or /apis/<g>/<v>/<plural>[/<name>...], with namespaces/<ns>
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        rest = rest[2:]
    return len(rest) <= 1


class _Route:
    __slots__ = ("name", "namespace", "rt", "subresource")

    def __init__(
        self, rt: ResourceType, namespace: str | None, name: str | None, subresource: str
    ) -> None:
        self.rt = rt
        self.namespace = namespace
        self.name = name
        self.subresource = subresource


class ApiServer:
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
        )
        current_actor.set(Actor(record.user_agent, record.verb, record.id))
        if watch:
            record.ended = record.started
            self.requests.add(record)
        slot = self.flow.admit(path=request.path, verb=record.verb, user_agent=record.user_agent)
        try:
            if isinstance(slot, Rejection):
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

    # ---- request decoding -------------------------------------------------------------

    @staticmethod
    def _field_validation(q: Any) -> str:
        value = q.get("fieldValidation") or "Warn"
        if value not in ("Strict", "Warn", "Ignore"):
            raise ApiError(
                400,
                "BadRequest",
                f"fieldValidation parameter unsupported: {value}. Valid values: Ignore, Warn, "
                "Strict",
            )
        return str(value)

    async def _body(self, request: web.Request) -> tuple[Any, list[str]]:
        raw = await request.read()
        ctype = request.headers.get("Content-Type", "application/json").split(";")[0].strip()
        if ctype in ("application/yaml", "application/apply-patch+yaml"):
            import yaml

            try:
                return yaml.safe_load(raw), []
            except yaml.YAMLError as exc:
                raise ApiError(400, "BadRequest", f"error decoding YAML: {exc}") from exc
        if ctype == protobuf.CONTENT_TYPE:
            try:
                return protobuf.decode(raw), []
            except protobuf.ProtobufError as exc:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types "
                    f"include: application/json, application/yaml ({exc})",
                    {},
                ) from exc
        if ctype not in ("application/json", "", "*/*"):
            raise ApiError(
                415,
                "UnsupportedMediaType",
                # kubesim decodes JSON and YAML only (no protobuf/CBOR), so it says so.
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json, application/yaml",
                {},
            )
        try:
            body = _decoder.decode(raw) if raw else None
        except msgspec.DecodeError as exc:
            raise ApiError(400, "BadRequest", f"error decoding request body: {exc}") from exc
        # Duplicate keys are only looked for under Strict (kubectl's mode): the scan costs a
        # second JSON parse, and Warn would merely add a header.
        validation = request.query.get("fieldValidation")
        dupes = _find_duplicates(raw) if validation == "Strict" else []
        return body, dupes

    async def _delete_options(self, request: web.Request) -> DeleteOptions:
        q = request.query
        raw = await request.read()
        body: Any = None
        if raw.strip():
            try:
                body = _decoder.decode(raw)
            except msgspec.DecodeError as exc:
                raise ApiError(400, "BadRequest", f"error decoding DeleteOptions: {exc}") from exc
        opts = DeleteOptions()
        if isinstance(body, dict) and body:
            grace = body.get("gracePeriodSeconds")
            opts.grace_period_seconds = int(grace) if grace is not None else None
            opts.propagation_policy = body.get("propagationPolicy")
            opts.orphan_dependents = body.get("orphanDependents")
            pre = body.get("preconditions") or {}
            opts.precondition_uid = pre.get("uid")
            opts.precondition_rv = pre.get("resourceVersion")
            opts.dry_run = bool(body.get("dryRun"))
            return opts
        try:
            if "gracePeriodSeconds" in q:
                opts.grace_period_seconds = int(q["gracePeriodSeconds"])
            opts.propagation_policy = q.get("propagationPolicy") or None
            if "orphanDependents" in q:
                opts.orphan_dependents = parse_bool(q["orphanDependents"])
        except (ValueError, SelectorError) as exc:
            raise ApiError(400, "BadRequest", str(exc)) from exc
        opts.dry_run = bool(q.get("dryRun"))
        return opts

    # ---- responses --------------------------------------------------------------------

    @staticmethod
    def _wants_table(request: web.Request) -> bool:
        return "as=Table" in request.headers.get("Accept", "")

    def _object_response(
        self, request: web.Request, rt: ResourceType, obj: dict[str, Any]
    ) -> web.Response:
        if self._wants_table(request):
            return _json(
                tables.table(
                    rt,
                    [obj],
                    {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                    request.query.get("includeObject", "Object"),
                )
            )
        return _json(obj)

    async def _list(
        self, request: web.Request, rt: ResourceType, namespace: str | None
    ) -> web.Response:
        q = request.query
        try:
            limit = int(q.get("limit") or 0)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"invalid limit: {q.get('limit')}") from exc
        requested = q.get("resourceVersion", "")
        if requested.isdigit() and int(requested) > self.store.rev and not q.get("continue"):
            # Like the watch cache: wait a while for the revision before answering 504.
            await self.store.wait_for_rev(int(requested), self.too_large_rv_wait)
        listing = self.registry.list_objects(
            rt,
            namespace,
            label_selector=q.get("labelSelector", ""),
            field_selector=q.get("fieldSelector", ""),
            limit=max(limit, 0),
            continue_token=q.get("continue", ""),
            resource_version=q.get("resourceVersion", ""),
            resource_version_match=q.get("resourceVersionMatch", ""),
        )
        if self._wants_table(request):
            return _json(
                tables.table(
                    rt, listing["items"], listing["metadata"], q.get("includeObject", "Object")
                )
            )
        return _json(listing)

    # ---- watch ------------------------------------------------------------------------

    @staticmethod
    def _event_line(event_type: str, obj: dict[str, Any]) -> bytes:
        return _encoder.encode({"type": event_type, "object": obj}) + b"\n"

    async def _watch(
        self, request: web.Request, rt: ResourceType, namespace: str | None
    ) -> web.StreamResponse:
        q = request.query
        match = self.registry.matcher(rt, q.get("labelSelector", ""), q.get("fieldSelector", ""))
        try:
            bookmarks = bool(parse_bool(q.get("allowWatchBookmarks")))
            send_initial = parse_bool(q.get("sendInitialEvents"))
            timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else self.watch_timeout
        except (ValueError, SelectorError) as exc:
            raise ApiError(400, "BadRequest", str(exc)) from exc
        if self._wants_table(request):
            include = q.get("includeObject", "Object")

            def present(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
                meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
                return tables.table(rt, [obj], meta, include)
        else:
            present = self.registry.present
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        try:
            initial, watcher = self.registry.start_watch(
                rt, namespace, match, q.get("resourceVersion", ""), send_initial_events=send_initial
            )
        except ApiError as err:
            if err.code != 410:
                raise
            await resp.prepare(request)
            await resp.write(self._event_line("ERROR", err.status()))
            await resp.write_eof()
            return resp
        try:
            await resp.prepare(request)
            if initial:
                await resp.write(
                    b"".join(self._event_line(e.type, present(rt, e.obj)) for e in initial)
                )
            if send_initial and bookmarks:
                await resp.write(self._bookmark(rt, initial_done=True))
            await self._pump(
                resp, rt, watcher, timeout=timeout, bookmarks=bookmarks, present=present
            )
        except ConnectionResetError:
            # The client went away mid-stream: an ordinary end of a watch.
            return resp
        finally:
            self.store.remove_watcher(watcher)
        with contextlib.suppress(ConnectionResetError):
            await resp.write_eof()
        return resp

    def _bookmark(self, rt: ResourceType, *, initial_done: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rev)}
        if initial_done:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return self._event_line(
            "BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}
        )

    async def _pump(
        self,
        resp: web.StreamResponse,
        rt: ResourceType,
        watcher: Watcher,
        *,
        timeout: float,
        bookmarks: bool,
        present: Callable[[ResourceType, dict[str, Any]], dict[str, Any]],
    ) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + timeout
        pretimeout = deadline - 2.0

        def next_bookmark(now: float) -> float | None:
            if not bookmarks:
                return None
            at = now + self.bookmark_interval
            if pretimeout < at:
                at = pretimeout
            return at if at >= now else None

        bookmark_at = next_bookmark(start)
        # Encoded lines are shared between watchers only for the plain presentation.
        shareable = present == self.registry.present
        line = self._event_line
        while True:
            if watcher.queue:
                batch: list[WatchEvent] = [*watcher.queue]
                watcher.queue.clear()
                chunks: list[bytes] = []
                for e in batch:
                    if not shareable:
                        chunks.append(line(e.type, present(rt, e.obj)))
                        continue
                    if e.line is None or e.obj.get("apiVersion") != rt.api_version:
                        encoded = line(e.type, present(rt, e.obj))
                        if e.obj.get("apiVersion") == rt.api_version:
                            e.line = encoded
                        chunks.append(encoded)
                    else:
                        chunks.append(e.line)
                await resp.write(b"".join(chunks))
                continue
            if watcher.overflowed:
                err = too_old_resource_version(0, self.store.horizon + 1)
                err.message = (
                    "watch closed: the client is too slow to keep up with events; "
                    "too old resource version"
                )
                await resp.write(self._event_line("ERROR", err.status()))
                return
            if watcher.closed or self._stopping:
                return
            now = loop.time()
            if now >= deadline:
                return
            if bookmark_at is not None and now >= bookmark_at:
                await resp.write(self._bookmark(rt))
                bookmark_at = next_bookmark(loop.time())
                continue
            wake = deadline if bookmark_at is None else min(deadline, bookmark_at)
            watcher.wakeup.clear()
            if watcher.queue or watcher.closed or watcher.overflowed:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watcher.wakeup.wait(), timeout=max(wake - now, 0.0))


def monotonic() -> float:
    return time.monotonic()
