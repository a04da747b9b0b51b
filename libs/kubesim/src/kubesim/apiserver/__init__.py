"""The kubesim HTTP API server (aiohttp): routing, request decoding, responses, watch streams.

Decisions live in :mod:`kubesim.registry` (REST semantics), :mod:`kubesim.store` (revisions,
history, fan-out) and the pure helper modules; this module only translates HTTP.

Public interface (other components rely on it)::

    server = ApiServer(history_limit=10_000, bookmark_interval=60.0)
    server.app                      # add routes before start()
    url = await server.start(host="127.0.0.1", port=0)
    server.write_kubeconfig(path)
    await server.stop()
    server.store

The modules: HTTP helpers (:mod:`.http`), request decoding and object responses
(:mod:`.requests`), watch streams (:mod:`.watching`) and the server with its routes and
middleware (:mod:`.server`).
"""

from __future__ import annotations

from kubesim.apiserver.http import Handler, encode, monotonic
from kubesim.apiserver.server import ApiServer

__all__ = ["ApiServer", "Handler", "encode", "monotonic"]
