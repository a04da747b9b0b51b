"""Connecting to NATS (reconnect forever, every connection event logged) and shutting down."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import nats.errors
from nats.aio.client import Client as NatsClient

from clearance.bus.backoff import DEFAULT_PUBLISH_RETRY
from clearance.bus.errors import BusError
from clearance.bus.publishing import set_publish_retry
from clearance.settings import CommonSettings

if TYPE_CHECKING:
    from clearance.bus.consuming import Consumer

log = logging.getLogger(__name__)

_RECONNECT_LISTENERS: weakref.WeakKeyDictionary[NatsClient, list[Callable[[], None]]] = (
    weakref.WeakKeyDictionary()
)


def on_reconnect(nc: NatsClient, listener: Callable[[], None]) -> Callable[[], None]:
    """Call ``listener`` each time ``nc`` (made by :func:`connect`) has reconnected; returns
    the call that stops it (its owner's close: the registry must not keep it alive).

    A request sent before the connection broke may never get its reply (the server that
    held it may be gone): a publisher waiting for PubAcks uses this to send those again
    at once, under the same Msg-Id, instead of waiting out its ack timeout."""
    listeners = _RECONNECT_LISTENERS.setdefault(nc, [])
    listeners.append(listener)

    def remove() -> None:
        with contextlib.suppress(ValueError):
            listeners.remove(listener)

    return remove


def _tls_context(settings: CommonSettings) -> ssl.SSLContext | None:
    wants_tls = any(url.startswith("tls://") for url in settings.nats_servers)
    if settings.nats_tls_ca is None and settings.nats_tls_cert is None and not wants_tls:
        return None
    ctx = ssl.create_default_context(
        cafile=str(settings.nats_tls_ca) if settings.nats_tls_ca is not None else None
    )
    if settings.nats_tls_cert is not None and settings.nats_tls_key is not None:
        ctx.load_cert_chain(str(settings.nats_tls_cert), str(settings.nats_tls_key))
    return ctx


async def connect(
    settings: CommonSettings,
    *,
    name: str,
    drain_timeout: float = 10.0,
    ping_interval: float = 20.0,
    first_connect_timeout: float | None = 60.0,
) -> NatsClient:
    """Connect with reconnect-forever and logged connection events.

    Once connected, the client reconnects forever. The *first* connection is bounded
    by ``first_connect_timeout`` (None: wait forever), because nats-py would otherwise
    retry a wrong URL silently for ever; a service then exits and its supervisor
    restarts it, which is visible.

    Authentication comes from the settings: a creds file, an nkey seed file, or
    user/password; TLS when a CA/client certificate is configured or a ``tls://`` URL
    is used.
    """
    nc = NatsClient()

    async def on_error(exc: Exception) -> None:
        # Failed reconnect attempts repeat every reconnect_wait during an outage that
        # was already reported as a disconnect: keep them out of the warnings.
        level = logging.INFO if nc.is_reconnecting else logging.WARNING
        log.log(level, "nats error: %s: %s", type(exc).__name__, exc, extra={"nats_client": name})

    async def on_disconnected() -> None:
        # Closing/draining also disconnects; only an unplanned loss deserves a warning.
        level = logging.INFO if nc.is_closed or nc.is_draining else logging.WARNING
        log.log(level, "nats disconnected", extra={"nats_client": name})

    async def on_reconnected() -> None:
        url = nc.connected_url
        log.info(
            "nats reconnected",
            extra={"nats_client": name, "server": url.netloc if url else None},
        )
        for listener in _RECONNECT_LISTENERS.get(nc, ()):
            try:
                listener()
            except Exception:
                log.exception("reconnect listener failed", extra={"nats_client": name})

    async def on_closed() -> None:
        log.info("nats connection closed", extra={"nats_client": name})

    options: dict[str, Any] = {
        "servers": settings.nats_servers,
        "name": name,
        "error_cb": on_error,
        "disconnected_cb": on_disconnected,
        "reconnected_cb": on_reconnected,
        "closed_cb": on_closed,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": settings.nats_reconnect_wait,
        "connect_timeout": settings.nats_connect_timeout,
        "drain_timeout": drain_timeout,
        "ping_interval": ping_interval,
    }
    if settings.nats_creds is not None:
        options["user_credentials"] = str(settings.nats_creds)
    if settings.nats_nkey_seed is not None:
        options["nkeys_seed"] = str(settings.nats_nkey_seed)
    if settings.nats_user is not None:
        options["user"] = settings.nats_user
        options["password"] = settings.nats_password
    tls = _tls_context(settings)
    if tls is not None:
        options["tls"] = tls
    try:
        await asyncio.wait_for(nc.connect(**options), first_connect_timeout)
    except TimeoutError as exc:
        last = nc.last_error
        with contextlib.suppress(Exception):
            await nc.close()
        raise BusError(
            f"could not connect to NATS at {settings.nats_url} within {first_connect_timeout}s"
            + (f" (last error: {type(last).__name__}: {last})" if last else "")
        ) from exc
    set_publish_retry(nc, replace(DEFAULT_PUBLISH_RETRY, deadline=settings.publish_retry_deadline))
    url = nc.connected_url
    log.info("nats connected", extra={"nats_client": name, "server": url.netloc if url else None})
    return nc


async def shutdown(
    nc: NatsClient,
    consumers: Sequence[Consumer[Any]] = (),
    *,
    timeout: float = 10.0,
) -> None:
    """The shutdown order that never hangs: stop consumers (unsubscribe), then drain."""
    await asyncio.gather(*(c.stop(timeout=timeout) for c in consumers))
    if nc.is_closed:
        return
    try:
        await nc.drain()
    except (nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError):
        await nc.close()
