"""An in-process API server on its own event-loop thread, for synchronous callers.

Tests that drive kubesim from blocking code (kubectl subprocesses, sync fixtures) or share one
server across tests with different event loops need the server to live on a loop of its own.
:class:`BackgroundApiServer` runs :class:`kubesim.apiserver.ApiServer` on a private thread and
exposes ``url``, ``kubeconfig`` and :meth:`call` to run coroutines on that loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from kubesim.apiserver import ApiServer

T = TypeVar("T")


class BackgroundApiServer:
    """``start()`` → ``url`` and ``kubeconfig`` are usable from any thread; ``stop()`` ends it."""

    def __init__(self, tmp: Path, **options: Any) -> None:
        self.tmp = tmp
        self.options = options
        self.kubeconfig = tmp / "kubeconfig"
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: ApiServer | None = None

    @property
    def server(self) -> ApiServer:
        if self._server is None:
            raise RuntimeError("server not started")
        return self._server

    def call(self, coro: Awaitable[T], timeout: float = 15.0) -> T:
        """Run ``coro`` on the server's loop and wait for its result."""

        async def wrapper() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrapper(), self._loop).result(timeout)

    def start(self) -> BackgroundApiServer:
        self._thread.start()

        async def boot() -> str:
            self._server = ApiServer(**self.options)
            url = await self._server.start(host="127.0.0.1", port=0)
            self._server.write_kubeconfig(self.kubeconfig)
            return url

        self.url = self.call(boot())
        return self

    def stop(self) -> None:
        if self._server is not None:
            with contextlib.suppress(Exception):
                self.call(self._server.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()
