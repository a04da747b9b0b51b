"""Idempotent provisioning: create streams, consumers and buckets, or correct their drift.

Safe to call from every replica at start-up and again whenever the server turns out
to have lost its state.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

import nats.js.errors
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from clearance.bus.errors import ConsumerDriftError
from clearance.bus.topology import ConsumerSpec, KvSpec, StreamSpec, default_streams

log = logging.getLogger(__name__)

# JetStream API error code for "stream name already in use with a different configuration".
_STREAM_CONFIG_CONFLICT: Final = 10058


async def ensure_stream(js: JetStreamContext, spec: StreamSpec) -> api.StreamInfo:
    """Create the stream, or update it when its configuration drifted from ``spec``."""
    config = spec.to_config()
    try:
        return await js.add_stream(config)
    except nats.js.errors.BadRequestError as exc:
        if exc.err_code != _STREAM_CONFIG_CONFLICT:
            raise
    info = await js.update_stream(config)
    log.info("stream config drift corrected", extra={"stream": spec.name})
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
    if current.max_msgs_per_subject != spec.history or (current.max_age or 0.0) != wanted_age:
        current.max_msgs_per_subject = spec.history
        current.max_age = wanted_age
        if spec.description is not None:
            current.description = spec.description
        await js.update_stream(current)
        log.info("kv bucket config drift corrected", extra={"bucket": spec.bucket})
    return kv


async def ensure_topology(
    js: JetStreamContext,
    *,
    streams: Sequence[StreamSpec] | None = None,
    buckets: Sequence[KvSpec] = (),
    replicas: int = 1,
) -> None:
    """Ensure the streams (default: DESIGN §3) and the given KV buckets (a service owns its own)."""
    for spec in default_streams(replicas=replicas) if streams is None else streams:
        await ensure_stream(js, spec)
    for kv in buckets:
        await ensure_kv(js, kv)
