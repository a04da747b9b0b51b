"""Idempotent provisioning: create streams, consumers and buckets, or correct their drift.

Safe to call from every replica at start-up and again whenever the server turns out
to have lost its state.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Final, TypeVar

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from clearance import testfaults
from clearance.bus.drift import StreamPlan, plan_stream
from clearance.bus.errors import ConsumerDriftError, StreamUnavailableError
from clearance.bus.placement import note_placement
from clearance.bus.topology import ConsumerSpec, KvSpec, StreamSpec, default_streams

T = TypeVar("T")

log = logging.getLogger(__name__)

# JetStream API error code for "stream name already in use with a different configuration".
_STREAM_CONFIG_CONFLICT: Final = 10058


# JetStream API error code for "stream not found".
_STREAM_NOT_FOUND: Final = 10059

_UNAVAILABLE: Final = (
    TimeoutError,
    nats.errors.NoRespondersError,
    nats.js.errors.ServiceUnavailableError,
    nats.errors.ConnectionReconnectingError,
)
"""Answers that say nothing about whether a stream exists (no leader, no meta leader, …)."""

_DECLARED: weakref.WeakKeyDictionary[object, dict[str, int]] = weakref.WeakKeyDictionary()
"""Per connection: the highest replica count declared for each stream or bucket."""


def declared(js: JetStreamContext, spec: StreamSpec) -> StreamSpec:
    """``spec`` with the highest replica count declared for it on this connection.

    A service declares its topology once (:func:`ensure_topology` with its configured
    replicas); every later path that names the same stream with a default spec (a
    consumer's re-provisioning, a publish's no-stream recovery) gets that count, not 1.
    """
    if testfaults.active("r1-streams"):
        return replace(spec, replicas=1)
    seen = _DECLARED.setdefault(js._nc, {})
    replicas = max(spec.replicas, seen.get(spec.name, 1))
    seen[spec.name] = replicas
    return spec if replicas == spec.replicas else replace(spec, replicas=replicas)


async def find_stream(js: JetStreamContext, name: str) -> api.StreamInfo | None:
    """The stream's info, None if the server says it does not exist.

    Raises :class:`StreamUnavailableError` when the answer is neither (no leader, timeout).
    """
    try:
        return await js.stream_info(name)
    except nats.js.errors.NotFoundError as exc:
        if exc.err_code in (_STREAM_NOT_FOUND, None):
            return None
        raise
    except _UNAVAILABLE as exc:
        raise StreamUnavailableError(
            f"stream {name!r}: no answer from its leader ({type(exc).__name__}: {exc})"
        ) from exc


async def ensure_stream(js: JetStreamContext, spec: StreamSpec) -> api.StreamInfo:
    """Create the stream if the server has none; else bring it toward ``spec`` (never down).

    Drift is corrected only toward the declared config (:func:`clearance.bus.drift.plan_stream`):
    replicas are never reduced, immutable fields are reported and left. A stream whose state
    cannot be read (no leader) raises :class:`StreamUnavailableError` and nothing is sent.
    """
    spec = declared(js, spec)
    info = await find_stream(js, spec.name)
    if info is None:
        try:
            info = await js.add_stream(spec.to_config())
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code != _STREAM_CONFIG_CONFLICT:
                raise
            found = await find_stream(js, spec.name)  # another service created it meanwhile
            if found is None:
                raise
            info = found
        except _UNAVAILABLE as exc:
            raise StreamUnavailableError(
                f"stream {spec.name!r} could not be created now ({type(exc).__name__}: {exc})"
            ) from exc
        else:
            log.info("stream created", extra={"stream": spec.name, "replicas": spec.replicas})
            note_placement(info)
            return info
    plan = plan_stream(spec, info.config)
    if testfaults.active("r1-streams") and (info.config.num_replicas or 1) > 1:
        plan = StreamPlan(replace(info.config, num_replicas=1), ("num_replicas: -> 1",))
    if plan.kept:
        log.warning(
            "stream config differs from the declared one; left as found",
            extra={"stream": spec.name, "kept": list(plan.kept)},
        )
    if plan.update is not None:
        try:
            info = await js.update_stream(plan.update)
        except _UNAVAILABLE as exc:
            raise StreamUnavailableError(
                f"stream {spec.name!r} could not be updated now ({type(exc).__name__}: {exc})"
            ) from exc
        log.warning(
            "stream config drift corrected toward the declared config",
            extra={"stream": spec.name, "corrected": list(plan.corrected)},
        )
    note_placement(info)
    return info


async def ensure_consumer(js: JetStreamContext, spec: ConsumerSpec) -> api.ConsumerInfo:
    """Create the durable consumer or update it to ``spec`` (create-or-update request).

    Fields the server cannot change in place (e.g. ``deliver_policy``) raise
    :class:`ConsumerDriftError` instead of silently deleting the consumer, which
    would lose its ack position.
    """
    try:
        return await js.add_consumer(spec.stream.name, spec.to_config())
    except nats.js.errors.APIError as exc:
        # The server answers 400, or 500 with err_code 10012 ("... can not be updated").
        if not isinstance(exc, nats.js.errors.BadRequestError) and exc.err_code != 10012:
            raise
        raise ConsumerDriftError(
            f"consumer {spec.durable!r} on {spec.stream.name!r} cannot be updated to the "
            f"requested configuration: {exc.description}"
        ) from exc


async def ensure_kv(js: JetStreamContext, spec: KvSpec) -> KeyValue:
    """Create the bucket, or correct history/ttl of an existing one."""
    try:
        kv = await js.key_value(spec.bucket)
    except nats.js.errors.BucketNotFoundError:
        try:
            return await js.create_key_value(
                bucket=spec.bucket,
                history=spec.history,
                ttl=spec.ttl,
                storage=spec.storage,
                description=spec.description,
                replicas=spec.replicas,
            )
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code != _STREAM_CONFIG_CONFLICT:
                raise
            kv = await js.key_value(spec.bucket)  # another replica won the race
    stream = f"KV_{spec.bucket}"
    info = await js.stream_info(stream)
    current = info.config
    wanted_age = spec.ttl or 0.0
    found_replicas = current.num_replicas or 1
    if (
        current.max_msgs_per_subject != spec.history
        or (current.max_age or 0.0) != wanted_age
        or found_replicas < spec.replicas
    ):
        current.max_msgs_per_subject = spec.history
        current.max_age = wanted_age
        current.num_replicas = max(found_replicas, spec.replicas)  # never scaled down
        if spec.description is not None:
            current.description = spec.description
        info = await js.update_stream(current)
        log.warning("kv bucket config drift corrected", extra={"bucket": spec.bucket})
    elif found_replicas > spec.replicas:
        log.warning(
            "kv bucket has more replicas than declared; left as found",
            extra={"bucket": spec.bucket, "replicas": found_replicas, "declared": spec.replicas},
        )
    note_placement(info)
    return kv


async def ensure_topology(
    js: JetStreamContext,
    *,
    streams: Sequence[StreamSpec] | None = None,
    buckets: Sequence[KvSpec] = (),
    replicas: int = 1,
    unavailable_for: float = 60.0,
) -> None:
    """Ensure the streams (default: DESIGN §3) and the given KV buckets (a service owns its own).

    The replica counts given here are this connection's declaration (:func:`declared`). A
    stream that exists but has no leader yet (just created by another service on a cluster, or
    electing after a node loss) is waited for, up to ``unavailable_for`` seconds, since a
    service starting beside its peers meets exactly that; after it the error is raised.
    """
    for spec in default_streams(replicas=replicas) if streams is None else streams:
        await while_unavailable(partial(ensure_stream, js, spec), spec.name, unavailable_for)
    for kv in buckets:
        await while_unavailable(partial(ensure_kv, js, kv), kv.bucket, unavailable_for)


async def while_unavailable(
    step: Callable[[], Awaitable[T]], name: str, unavailable_for: float
) -> T:
    """Run ``step`` (provisioning of ``name``) again while its stream has no leader, with
    backoff, for at most ``unavailable_for`` seconds, and return what it returns; then the
    last error is raised."""
    deadline = time.monotonic() + unavailable_for
    pause = 0.1
    while True:
        try:
            return await step()
        except (StreamUnavailableError, *_UNAVAILABLE) as exc:
            if time.monotonic() + pause > deadline:
                raise
            log.info(
                "stream has no leader yet; waiting",
                extra={"stream": name, "error": str(exc), "retry_in": pause},
            )
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)
