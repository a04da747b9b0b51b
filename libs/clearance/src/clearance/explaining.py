"""Gathering the facts ``clearance explain NAMESPACE/NAME`` decides on (the I/O part).

Everything is read with the user's own access, never the services': the Kubernetes API through
their kubeconfig (kubernetes-asyncio), NATS through ``CLEARANCE_NATS_*`` (the same settings as
``clearance events``; the deploy's read-only ``alerts`` user suffices). Reads, in order:

1. the AppWrapper (GET) — its status and the dispatcher's bookkeeping (``status.clearance`` or
   the ``clearance.dev/bookkeeping`` annotation, :mod:`clearance.appwrapper_status`);
2. its cycle events and alerts: the ``CLEARANCE_CYCLE`` / ``CLEARANCE_ALERTS`` subjects of
   that namespace and name (stream info counts them, an ordered consumer reads them), keeping
   only those of this incarnation (its UID);
3. the objects still carrying its label: pods by a quorum LIST on the label selector, and every
   other kind of the teardown's inventory by GET (same UID = still there);
4. the node of each remaining pod (GET; a user who may not read nodes gets the tracker's last
   diagnosis instead, said as such).

Whatever stops the explanation is an :class:`ExplainError` with one line saying what failed
and why (unknown AppWrapper, no permission, API server or NATS unreachable); the CLI prints it
and exits non-zero. :func:`gather` returns :class:`~clearance.explanation.Facts`;
:func:`clearance.explanation.explain` decides on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
from nats.aio.client import Client as NatsClient
from nats.js import api
from nats.js.errors import NotFoundError

from clearance import bus, events, labels, subjects
from clearance.appwrapper_status import parse_appwrapper
from clearance.blockers import History, NodeFact, NodeUnreadable, PresentObject
from clearance.discovery import Discovery, UnknownKind
from clearance.explanation import Facts
from clearance.kube import NODES, PODS, Kube, KubeConfig, KubeError, Resource, user_agent
from clearance.settings import CommonSettings


class ExplainError(Exception):
    """Why the explanation could not be made, in one line."""


@dataclass(frozen=True, slots=True)
class ExplainRequest:
    namespace: str
    name: str
    settings: CommonSettings
    timeout: float = 10.0
    """Bound of each Kubernetes request and of the first NATS connection (seconds)."""
    kubeconfig: str | None = None
    """Explicit kubeconfig; None: ``$KUBECONFIG``, else ``~/.kube/config``, else in-cluster."""
    context: str | None = None


def parse_target(text: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` → (namespace, name); raises :class:`ValueError` otherwise."""
    namespace, slash, name = text.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise ValueError(f"{text!r} is not NAMESPACE/NAME")
    return namespace, name


def _kube_error(exc: KubeError, *, doing: str, host: str) -> ExplainError:
    if exc.code == 0:
        return ExplainError(f"cannot reach the Kubernetes API server at {host}: {exc.message}")
    if exc.code == 401:
        return ExplainError(f"the API server at {host} refused your credentials: {exc.message}")
    if exc.code == 403:
        return ExplainError(f"no permission to {doing}: {exc.message}")
    return ExplainError(f"{doing} failed: {exc.code} {exc.reason}: {exc.message}")


# ----------------------------------------------------------------------------- Kubernetes


def _max_requeuings(spec: object) -> int:
    scheduling = spec.get("schedulingSpec") if isinstance(spec, dict) else None
    requeuing = scheduling.get("requeuing") if isinstance(scheduling, dict) else None
    value = requeuing.get("maxNumRequeuings") if isinstance(requeuing, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _kubectl_resource(resource: Resource) -> str:
    return (
        "pod"
        if resource == PODS
        else (f"{resource.plural}.{resource.group}" if resource.group else resource.plural)
    )


def _present(
    obj: events.PodObject | events.ItemObject, resource: Resource, namespace: str
) -> PresentObject:
    meta = obj.metadata
    node = obj.spec.node_name if isinstance(obj, events.PodObject) else None
    return PresentObject(
        kind=obj.kind,
        resource=_kubectl_resource(resource),
        namespace=meta.namespace or namespace,
        name=meta.name,
        uid=meta.uid,
        attempt=labels.attempt_of(meta.labels),
        node=node,
        finalizers=meta.finalizers,
        deletion_timestamp=meta.deletion_timestamp,
        deletion_grace_seconds=meta.deletion_grace_period_seconds,
    )


async def _pods(kube: Kube, namespace: str, name: str) -> list[PresentObject]:
    listed = await kube.list(
        PODS, namespace=namespace, label_selector=labels.selector_for(name, namespace=namespace)
    )
    pods = [msgspec.json.decode(raw, type=events.PodObject) for raw in listed.items]
    return [_present(p, PODS, namespace) for p in pods]


async def _items(
    kube: Kube, namespace: str, inventory: Iterable[events.ObjectRef]
) -> list[PresentObject]:
    """The inventory's non-pod objects that still exist under the same UID."""
    discovery = Discovery(kube, preload=(PODS,))
    out = []
    for ref in inventory:
        if ref.kind == "Pod" and ref.api_version == "v1":
            continue  # the pod LIST has them
        try:
            resource = await discovery.resolve(ref.api_version, ref.kind)
            raw = await kube.get(resource, ref.name, namespace=ref.namespace or namespace)
        except UnknownKind:
            continue  # no longer served: nothing of that kind can be left
        except KubeError as exc:
            if exc.not_found:
                continue
            raise
        found = msgspec.json.decode(raw, type=events.ItemObject)
        if found.metadata.uid == ref.uid:
            out.append(_present(found, resource, namespace))
    return out


async def _nodes(kube: Kube, names: Iterable[str]) -> dict[str, NodeFact]:
    out: dict[str, NodeFact] = {}
    for name in sorted(set(names)):
        try:
            out[name] = msgspec.json.decode(await kube.get(NODES, name), type=events.NodeObject)
        except KubeError as exc:
            out[name] = None if exc.not_found else NodeUnreadable(f"{exc.code} {exc.reason}")
    return out


# -------------------------------------------------------------------------------- NATS


async def stored_events(
    nc: NatsClient, *, stream: str, subject_filter: str, timeout: float
) -> list[events.Event]:
    """Every stored event on ``subject_filter`` of ``stream``, oldest first (an undecodable
    message is skipped: ``clearance events`` shows those)."""
    js = nc.jetstream(timeout=timeout)
    info = await js.stream_info(stream, subjects_filter=subject_filter)
    if not sum((info.state.subjects or {}).values()):
        return []
    sub = await js.subscribe(
        subject_filter,
        stream=stream,
        ordered_consumer=True,
        config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL),
    )
    out: list[events.Event] = []
    try:
        while True:
            msg = await sub.next_msg(timeout=timeout)
            with contextlib.suppress(events.EventDecodeError):
                out.append(events.decode(msg.data))
            if msg.metadata.num_pending == 0:
                return out
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


async def read_history(nc: NatsClient, request: ExplainRequest, uid: str) -> tuple[History, ...]:
    """The cycle events and alerts of incarnation ``uid`` of the requested AppWrapper."""
    ns, name = request.namespace, request.name
    reads = (
        (subjects.CYCLE_STREAM, subjects.cycle_filter(namespace=ns, appwrapper=name)),
        (subjects.ALERT_STREAM, subjects.alert_filter(namespace=ns, appwrapper=name)),
    )
    found: list[History] = []
    for stream, subject_filter in reads:
        try:
            stored = await stored_events(
                nc, stream=stream, subject_filter=subject_filter, timeout=request.timeout
            )
        except NotFoundError:
            raise ExplainError(
                f"NATS at {request.settings.nats_url} has no stream {stream} "
                "(no Clearance service has provisioned it there)"
            ) from None
        except TimeoutError:
            last = nc.last_error
            why = f" ({type(last).__name__}: {last})" if last else ""
            raise ExplainError(
                f"NATS did not answer reading {stream} within {request.timeout:g}s: "
                f"no permission to read it, or JetStream is unavailable{why}"
            ) from None
        found.extend(
            e
            for e in stored
            if isinstance(e, events.CycleEvent | events.AlertEvent) and e.appwrapper.uid == uid
        )
    return tuple(found)


# ------------------------------------------------------------------------------ gather


async def _connect_kube(request: ExplainRequest) -> Kube:
    config = KubeConfig(
        kubeconfig=request.kubeconfig,
        context=request.context,
        request_timeout=request.timeout,
        user_agent=user_agent("cli", "explain"),
    )
    try:
        return await Kube.connect(config)
    except Exception as exc:  # kubeconfig missing or invalid: the client's own exceptions
        source = request.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise ExplainError(f"no usable Kubernetes configuration ({source}): {exc}") from None


async def _connect_nats(request: ExplainRequest) -> NatsClient:
    settings = request.settings
    try:
        return await bus.connect(
            settings, name="clearance-explain", first_connect_timeout=request.timeout
        )
    except bus.BusError as exc:
        raise ExplainError(str(exc)) from None


async def gather(request: ExplainRequest, *, now: datetime | None = None) -> Facts:
    """Read everything the explanation needs (see the module docstring)."""
    ns, name = request.namespace, request.name
    settings = request.settings
    appwrappers = Resource(
        settings.appwrapper_group, settings.appwrapper_version, "appwrappers", "AppWrapper"
    )
    what = f"appwrappers.{appwrappers.group} {ns}/{name}"
    kube = await _connect_kube(request)
    try:
        try:
            raw = await kube.get(appwrappers, name, namespace=ns)
        except KubeError as exc:
            if exc.not_found:
                raise ExplainError(
                    f"AppWrapper {ns}/{name} not found ({appwrappers.api_version})"
                ) from None
            raise _kube_error(exc, doing=f"get {what}", host=kube.host) from None
        aw = msgspec.json.decode(raw, type=dict[str, Any])
        uid = str((aw.get("metadata") or {}).get("uid") or "")
        status = parse_appwrapper(aw)
        nc = await _connect_nats(request)
        try:
            history = await read_history(nc, request, uid)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), request.timeout)
        book = status.bookkeeping
        inventory = [
            ref
            for e in history
            if isinstance(e, events.CycleTeardownStarted) and e.attempt == book.tearing_down
            for ref in e.inventory
        ]
        try:
            objects = await _pods(kube, ns, name) + await _items(kube, ns, inventory)
        except KubeError as exc:
            raise _kube_error(
                exc, doing=f"list the objects of {ns}/{name}", host=kube.host
            ) from None
        nodes = await _nodes(kube, (o.node for o in objects if o.node))
    finally:
        await kube.close()
    return Facts(
        namespace=ns,
        name=name,
        uid=uid,
        status=status,
        max_requeuings=_max_requeuings(aw.get("spec")),
        history=history,
        objects=tuple(objects),
        nodes=nodes,
        now=now or datetime.now(UTC),
    )
