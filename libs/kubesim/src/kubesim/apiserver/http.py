"""The HTTP helpers of the API server: JSON encoding, JSON and `metav1.Status` responses
(with `Warning` headers), duplicate-key detection in request bodies, the collection-path
test, the resolved route of one request, and a `monotonic()` clock for callers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from kubesim.resources import ResourceType
from kubesim.statuses import ApiError

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


def monotonic() -> float:
    return time.monotonic()
