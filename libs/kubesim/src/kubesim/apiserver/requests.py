"""Request decoding and object responses: the body of a write (JSON, YAML or protobuf,
with strict field validation and its warnings), DeleteOptions from body or query, and
the response to a read, as an object, a list or a `kubectl get` Table.
"""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from kubesim import protobuf, tables
from kubesim.apiserver.http import (
    _decoder,
    _find_duplicates,
    _json,
)
from kubesim.deletion import DeleteOptions
from kubesim.registry import Registry
from kubesim.resources import ResourceType
from kubesim.selectors import SelectorError, parse_bool
from kubesim.statuses import ApiError
from kubesim.store import Store


class RequestHandling:
    """Decodes request bodies and renders objects, lists and tables."""

    store: Store
    registry: Registry
    bookmark_interval: float
    watch_timeout: float
    too_large_rv_wait: float
    _stopping: bool

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
            encoded=not self._wants_table(request),
        )
        if self._wants_table(request):
            return _json(
                tables.table(
                    rt, listing["items"], listing["metadata"], q.get("includeObject", "Object")
                )
            )
        return _json(listing)
