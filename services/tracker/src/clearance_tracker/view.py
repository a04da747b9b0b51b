"""The replica's view of the KV bucket: every record and heartbeat, kept current by a watch.

This module owns the in-memory copy of the bucket that every decision reads first: records
by key (each with the revision it was read at, so a stale copy only costs a CAS conflict),
an index from AppWrapper (namespace, name) to its record keys for routing kube events, and the
last heartbeat of every replica. One `watchall` feeds it; local writes are remembered at
once (a revision never goes backwards), deletions are forgotten. The watch is restarted
when it fails, and on demand when the heartbeat loop notices our own beats stopped coming
back (a watch stuck after a NATS outage). Listeners hear of every newer record
(``on_record``) and every forgotten key (``on_forget``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from datetime import datetime

import msgspec
from nats.js.kv import KeyValue

from clearance import labels
from clearance.tasks import CrashWatch
from clearance_tracker.store import Versioned
from clearance_tracker.teardown import (
    RECORD_PREFIX,
    REPLICA_PREFIX,
    decode_heartbeat,
    decode_record,
)

log = logging.getLogger(__name__)

AppWrapperKey = tuple[str, str]
"""(namespace, name) of an AppWrapper."""


class TeardownView:
    """Records and heartbeats of the bucket, as this replica last saw them."""

    def __init__(
        self,
        kv: KeyValue,
        *,
        on_record: Callable[[Versioned], None] = lambda _version: None,
        on_forget: Callable[[str], None] = lambda _key: None,
        crashes: CrashWatch | None = None,
    ) -> None:
        self.kv = kv
        self.crashes = crashes
        """Where the watch task is watched (a crash ends the process), if anywhere."""
        self.records: dict[str, Versioned] = {}
        self.heartbeats: dict[str, datetime] = {}
        self.synced = asyncio.Event()
        self._by_aw: dict[AppWrapperKey, set[str]] = {}
        self._on_record = on_record
        self._on_forget = on_forget
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------- queries

    def get(self, key: str) -> Versioned | None:
        return self.records.get(key)

    def keys_of(self, namespace: str, names: Iterable[str | None]) -> set[str]:
        """Record keys of the AppWrappers whose label values are `names` in `namespace`."""
        keys: set[str] = set()
        for name in names:
            if name:
                keys |= self._by_aw.get((namespace, name), set())
        return keys

    def open_tracking(self, uids: set[str]) -> set[str]:
        """Keys of open records that track any of `uids` (owners of an unlabelled pod)."""
        return {
            key
            for key, version in self.records.items()
            if not version.record.cleared and uids & version.record.objects.keys()
        }

    # ------------------------------------------------------------------- updates

    def remember(self, version: Versioned) -> None:
        """Keep `version` unless the view already holds this revision or a newer one."""
        key = version.record.key
        cached = self.records.get(key)
        if cached is not None and cached.revision >= version.revision:
            return
        self.records[key] = version
        aw = version.record.appwrapper
        self._by_aw.setdefault((aw.namespace, labels.value_for(aw.name)), set()).add(key)
        self._on_record(version)

    def forget(self, key: str) -> None:
        version = self.records.pop(key, None)
        if version is not None:
            aw = version.record.appwrapper
            by = (aw.namespace, labels.value_for(aw.name))
            keys = self._by_aw.get(by)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_aw[by]
        self._on_forget(key)

    def apply(self, entry: KeyValue.Entry) -> None:
        """One entry of the bucket watch: a record, a heartbeat, or the deletion of either."""
        key = entry.key
        value = entry.value
        deleted = entry.operation in ("DEL", "PURGE") or not value
        if key.startswith(REPLICA_PREFIX + "."):
            replica = key[len(REPLICA_PREFIX) + 1 :]
            if deleted:
                self.heartbeats.pop(replica, None)
            else:
                with contextlib.suppress(msgspec.DecodeError):
                    self.heartbeats[replica] = decode_heartbeat(value or b"").at
            return
        if not key.startswith(RECORD_PREFIX + "."):
            return
        if deleted:
            self.forget(key)
            return
        cached = self.records.get(key)
        if cached is not None and cached.revision >= int(entry.revision or 0):
            return  # the echo of our own write (already remembered): no second decode
        try:
            record = decode_record(value or b"")
        except msgspec.DecodeError as exc:
            log.error("undecodable teardown record ignored", extra={"key": key, "error": str(exc)})
            return
        self.remember(Versioned(record, int(entry.revision or 0)))

    # --------------------------------------------------------------------- watch

    def start(self) -> asyncio.Task[None]:
        self._task = asyncio.create_task(self._watch_loop(), name="tracker:kv-watch")
        if self.crashes is not None:
            self.crashes.watch(self._task)
        return self._task

    def restart(self) -> asyncio.Task[None]:
        """Replace a stalled watch with a new one (the view is refreshed from its replay)."""
        if self._task is not None:
            self._task.cancel()
        return self.start()

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    async def _watch_loop(self) -> None:
        while True:
            watcher: KeyValue.KeyWatcher | None = None
            try:
                watcher = await self.kv.watchall()
                async for entry in watcher:
                    if entry is None:
                        self.synced.set()
                        continue
                    self.apply(entry)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("kv watch failed; restarting it", extra={"error": repr(exc)})
                await asyncio.sleep(0.5)
            finally:
                if watcher is not None:
                    with contextlib.suppress(Exception):
                        await watcher.stop()  # type: ignore[no-untyped-call]
