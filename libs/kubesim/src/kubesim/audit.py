"""Who wrote what, and when: the API server's own history, for judging clients from outside.

A real API server's audit log records, per request, the user, the user agent, the verb and the
object; etcd records each commit's revision. Tests and the chaos checker need both, so kubesim
keeps two bounded logs beside the store:

* :class:`AuditEntry` — one per **committed** change (ADDED / MODIFIED / DELETED), with the
  commit's wall-clock time, the resourceVersion, the writing client's ``User-Agent`` and verb,
  and the object's labels, owner UIDs and terminating flag at that commit. Reading it answers
  "was an attempt-2 pod created while an attempt-1 pod still existed?" by commit order, and
  "did the frozen leader write after it woke?" by user agent.
* :class:`RequestRecord` — one per API request (reads and writes, failed ones included), with
  its start and end times and the answered code, for request rates and rate-limit manners.

The writing client is known through :data:`current_actor`, a context variable the HTTP layer
sets for each request (aiohttp runs every request in its own task, so it never leaks between
requests). Writes made with no request in flight (kubesim's in-process setup) are attributed
to ``kubesim``.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import time
from collections import deque
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

_HTTP_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True, slots=True)
class Actor:
    """The client and verb behind the writes of one request."""

    user_agent: str
    verb: str
    request_id: int = 0


SYSTEM = Actor(user_agent="kubesim", verb="system")
current_actor: ContextVar[Actor] = ContextVar("kubesim_actor", default=SYSTEM)


def verb_of(method: str, *, collection: bool, watch: bool) -> str:
    """The Kubernetes audit verb of an HTTP request (get, list, watch, create, …)."""
    if method == "GET":
        return "watch" if watch else ("list" if collection else "get")
    verb = _HTTP_VERBS.get(method, method.lower())
    return "deletecollection" if verb == "delete" and collection else verb


@dataclass(frozen=True, slots=True)
class AuditEntry:
    rev: int
    type: str
    group: str
    resource: str
    namespace: str
    name: str
    uid: str
    kind: str
    time: float
    """Commit time, seconds since the epoch (this machine's wall clock)."""
    user_agent: str
    verb: str
    labels: Mapping[str, str]
    owners: tuple[str, ...]
    """UIDs of the object's ownerReferences at this commit."""
    terminating: bool
    """The object carried a deletionTimestamp at this commit (always true for DELETED
    of a gracefully deleted object; false for an object removed at once)."""
    node: str
    """``spec.nodeName`` for pods, else ``""``."""
    object: Mapping[str, Any] | None = None
    """The body as committed, for the kinds the server was told to keep (``--audit-objects``)."""

    def to_json(self) -> dict[str, Any]:
        extra = {} if self.object is None else {"object": self.object}
        return {
            "rv": str(self.rev),
            "type": self.type,
            "kind": self.kind,
            "group": self.group,
            "resource": self.resource,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "time": self.time,
            "userAgent": self.user_agent,
            "verb": self.verb,
            "labels": dict(self.labels),
            "owners": list(self.owners),
            "terminating": self.terminating,
            "node": self.node,
            **extra,
        }


def entry_for(
    *,
    rev: int,
    type_: str,
    resource: tuple[str, str],
    namespace: str,
    name: str,
    obj: Mapping[str, Any],
    kind: str,
    keep_object: bool = False,
) -> AuditEntry:
    meta = obj.get("metadata") or {}
    actor = current_actor.get()
    spec = obj.get("spec") if kind == "Pod" else None
    return AuditEntry(
        rev=rev,
        type=type_,
        group=resource[0],
        resource=resource[1],
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid", "")),
        kind=kind,
        time=time.time(),
        user_agent=actor.user_agent,
        verb=actor.verb,
        labels=dict(meta.get("labels") or {}),
        owners=tuple(
            str(ref.get("uid", ""))
            for ref in meta.get("ownerReferences") or ()
            if isinstance(ref, Mapping)
        ),
        terminating=bool(meta.get("deletionTimestamp")),
        node=str((spec or {}).get("nodeName") or "") if isinstance(spec, Mapping) else "",
        object=copy.deepcopy(dict(obj)) if keep_object else None,
    )


@dataclass(slots=True)
class RequestRecord:
    id: int
    started: float
    ended: float
    method: str
    path: str
    verb: str
    user_agent: str
    code: int
    retry_after: int = 0
    """``Retry-After`` seconds of a 429 answered by the request limits (0: none)."""
    request_id: str = ""
    """The client's ``X-Request-Id`` header (Clearance sends one per logical request, the same
    on every retry of it); empty when the client sent none."""
    digest: str = ""
    """Method, path with query, and body, hashed: a client's retry of a request has the same
    digest, two different creates on one path do not (rate-limit manners are judged by it)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "started": self.started,
            "ended": self.ended,
            "method": self.method,
            "path": self.path,
            "verb": self.verb,
            "userAgent": self.user_agent,
            "code": self.code,
            "retryAfter": self.retry_after,
            "digest": self.digest,
            "requestId": self.request_id,
        }


def request_digest(method: str, path_qs: str, body: bytes) -> str:
    """16 hex digits identifying one request's content (see :attr:`RequestRecord.digest`)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(method.encode())
    h.update(b" ")
    h.update(path_qs.encode())
    h.update(b"\n")
    h.update(body)
    return h.hexdigest()


class RequestLog:
    """Bounded log of API requests (not ``/kubesim/`` admin calls)."""

    def __init__(self, limit: int = 200_000) -> None:
        self.records: deque[RequestRecord] = deque(maxlen=limit)
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        return next(self._ids)

    def add(self, record: RequestRecord) -> None:
        self.records.append(record)

    def since(self, request_id: int) -> Iterable[RequestRecord]:
        return (r for r in self.records if r.id > request_id)
