"""Fault injection and inspection under `/kubesim/v1/` (API-server side).

* `POST /kubesim/v1/fail` `{"path": regex, "code": int|null, "count": int|null, "latency": s,
  "method": str|null, "retryAfter": s|null}`: matching requests wait `latency` seconds, then
  (if `code`) answer a Status with that code; `retryAfter` adds `details.retryAfterSeconds`
  and a `Retry-After` header (a 429 from NewTooManyRequests, a 503/504 asking to come back);
  `count` null = until cleared; `userAgent` (substring) limits the rule to matching clients
  (a chaos run fails the system under test, not its own driver). `DELETE /kubesim/v1/fail`
  clears.
* `GET /kubesim/v1/flowcontrol`: the request limits (:mod:`kubesim.flowcontrol`), requests in
  flight (current, peak), admitted and rejected counts (by reason and User-Agent).
  `POST` with any of `{"maxRequestsInflight", "maxMutatingRequestsInflight", "rateLimit",
  "rateBurst", "rateScope", "retryAfter", "resetCounters": true}` changes them at run time
  (0 = off); `DELETE` switches every limit off.
* `POST /kubesim/v1/drop-watches`: closes every open watch (clients see EOF).
* `POST /kubesim/v1/compact`: forgets the change ring; older resourceVersions answer 410.
* `GET /kubesim/v1/history?since=RV&limit=N&kind=K&namespace=NS&name=N`: the ordered change
  log `{rv,type,kind,group,resource,namespace,name,uid,time,userAgent,verb,labels,owners,
  terminating,node}` (see :mod:`kubesim.audit`), plus `object` (the body as committed) for the
  kinds ``kubesim serve --audit-objects`` names. It is a separate bounded audit log, so it
  survives compaction (tests compare consumer output with what really happened).
* `GET /kubesim/v1/requests?since=ID&userAgent=SUBSTRING`: the request log
  `{id,started,ended,method,path,verb,userAgent,code,retryAfter,digest}`, oldest first
  (``retryAfter``: of a 429 from the request limits; ``digest``: same for a retry of a request).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from kubesim.audit import RequestLog
from kubesim.flowcontrol import (
    REJECTION_BODY,
    FlowControl,
    FlowControlConfig,
    FlowControlError,
    config_from_json,
)
from kubesim.statuses import ApiError, injected
from kubesim.store import Store


@dataclass(slots=True)
class FailureRule:
    path: re.Pattern[str]
    code: int | None
    remaining: int | None
    latency: float
    method: str | None
    retry_after: int | None = None
    user_agent: str | None = None

    def matches(self, method: str, path: str, user_agent: str = "") -> bool:
        if self.method and self.method.upper() != method.upper():
            return False
        if self.user_agent and self.user_agent not in user_agent:
            return False
        return bool(self.path.search(path))


class FaultInjector:
    """The active failure rules; consulted by the API server for every request."""

    def __init__(self) -> None:
        self.rules: list[FailureRule] = []

    def add(self, spec: dict[str, Any]) -> FailureRule:
        try:
            pattern = re.compile(str(spec.get("path", ".*")))
        except re.error as exc:
            raise ApiError(400, "BadRequest", f"invalid path regex: {exc}") from exc
        code = spec.get("code")
        count = spec.get("count")
        retry = spec.get("retryAfter")
        try:
            rule = FailureRule(
                path=pattern,
                code=int(code) if code is not None else None,
                remaining=int(count) if count is not None else None,
                latency=float(spec.get("latency") or 0.0),
                method=spec.get("method"),
                retry_after=int(retry) if retry is not None else None,
                user_agent=str(spec["userAgent"]) if spec.get("userAgent") else None,
            )
        except (TypeError, ValueError) as exc:
            raise ApiError(400, "BadRequest", f"invalid failure rule: {exc}") from exc
        if rule.code is not None and not 400 <= rule.code <= 599:
            raise ApiError(400, "BadRequest", f"code must be an HTTP error (400-599): {code}")
        if rule.retry_after is not None and rule.retry_after < 1:
            raise ApiError(400, "BadRequest", "retryAfter must be >= 1 second")
        self.rules.append(rule)
        return rule

    def clear(self) -> None:
        self.rules.clear()

    def match(self, method: str, path: str, user_agent: str = "") -> FailureRule | None:
        for rule in list(self.rules):
            if rule.matches(method, path, user_agent):
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self.rules.remove(rule)
                return rule
        return None

    @staticmethod
    def error_for(rule: FailureRule) -> ApiError | None:
        if rule.code is None:
            return None
        return injected(
            rule.code, f"kubesim injected failure ({rule.code})", retry_after=rule.retry_after
        )


def history_entries(store: Store, query: dict[str, str]) -> list[dict[str, Any]]:
    since = int(query.get("since") or 0)
    kind = query.get("kind")
    namespace = query.get("namespace")
    name = query.get("name")
    resource = query.get("resource")
    out: list[dict[str, Any]] = []
    for e in store.audit:
        if e.rev <= since:
            continue
        if kind and e.kind != kind:
            continue
        if resource and e.resource != resource:
            continue
        if namespace is not None and e.namespace != namespace:
            continue
        if name and e.name != name:
            continue
        out.append(e.to_json())
    limit = int(query.get("limit") or 0)
    return out[-limit:] if limit else out


def request_entries(requests: RequestLog, query: dict[str, str]) -> list[dict[str, Any]]:
    since = int(query.get("since") or 0)
    agent = query.get("userAgent") or ""
    return [r.to_json() for r in requests.since(since) if agent in r.user_agent]


def too_many_requests(retry_after: int) -> web.Response:
    """The real max-in-flight / APF rejection: 429, Retry-After, a plain-text body."""
    return web.Response(
        status=429,
        text=REJECTION_BODY,
        content_type="text/plain",
        charset="utf-8",
        headers={"Retry-After": str(retry_after), "X-Content-Type-Options": "nosniff"},
    )


def _admin_error(err: ApiError) -> web.Response:
    return web.json_response(err.status(), status=err.code)


def add_admin_routes(
    app: web.Application,
    *,
    store: Store,
    faults: FaultInjector,
    requests: RequestLog,
    flow: FlowControl,
) -> None:
    async def post_fail(request: web.Request) -> web.Response:
        try:
            body = await request.json()
            faults.add(body if isinstance(body, dict) else {})
        except ValueError:
            return _admin_error(ApiError(400, "BadRequest", "the body is not JSON"))
        except ApiError as err:
            return _admin_error(err)
        return web.json_response({"rules": len(faults.rules)})

    async def get_flow(request: web.Request) -> web.Response:
        return web.json_response(flow.state())

    async def post_flow(request: web.Request) -> web.Response:
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError:
            return _admin_error(ApiError(400, "BadRequest", "the body is not JSON"))
        if not isinstance(body, dict):
            return _admin_error(ApiError(400, "BadRequest", "the body must be a JSON object"))
        try:
            flow.configure(config_from_json(flow.config, body))
        except FlowControlError as exc:
            return _admin_error(ApiError(400, "BadRequest", str(exc)))
        if body.get("resetCounters"):
            flow.reset_counters()
        return web.json_response(flow.state())

    async def delete_flow(request: web.Request) -> web.Response:
        flow.configure(FlowControlConfig())
        return web.json_response(flow.state())

    async def delete_fail(request: web.Request) -> web.Response:
        faults.clear()
        return web.json_response({"rules": 0})

    async def drop_watches(request: web.Request) -> web.Response:
        return web.json_response({"dropped": store.close_watchers()})

    async def compact(request: web.Request) -> web.Response:
        store.compact()
        return web.json_response({"resourceVersion": str(store.rev)})

    async def history(request: web.Request) -> web.Response:
        entries = history_entries(store, dict(request.query))
        return web.json_response({"resourceVersion": str(store.rev), "items": entries})

    async def request_log(request: web.Request) -> web.Response:
        return web.json_response({"items": request_entries(requests, dict(request.query))})

    app.router.add_get("/kubesim/v1/requests", request_log)
    app.router.add_get("/kubesim/v1/flowcontrol", get_flow)
    app.router.add_post("/kubesim/v1/flowcontrol", post_flow)
    app.router.add_delete("/kubesim/v1/flowcontrol", delete_flow)
    app.router.add_post("/kubesim/v1/fail", post_fail)
    app.router.add_delete("/kubesim/v1/fail", delete_fail)
    app.router.add_post("/kubesim/v1/drop-watches", drop_watches)
    app.router.add_post("/kubesim/v1/compact", compact)
    app.router.add_get("/kubesim/v1/history", history)
