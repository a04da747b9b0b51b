"""The aiohttp session under kubernetes-asyncio's client: the environment read once.

kubernetes-asyncio builds its session with ``trust_env=True``; this module resolves an
environment proxy for the API host once at connect and switches the per-request environment
lookups off (:class:`clearance.kube.Kube` calls both when it connects).
"""

from __future__ import annotations

import urllib.parse
import urllib.request

from kubernetes_asyncio import client as k8s_client


def resolve_proxy_once(configuration: k8s_client.Configuration) -> None:
    """Resolve an ``HTTPS_PROXY``/``NO_PROXY`` environment proxy for the API host once."""
    if configuration.proxy:
        return
    parts = urllib.parse.urlsplit(str(configuration.host))
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not (parts.hostname and urllib.request.proxy_bypass(parts.hostname)):
        configuration.proxy = proxy


def distrust_environment(api: k8s_client.ApiClient) -> None:
    """Stop the session from reading the environment on every request.

    kubernetes-asyncio builds its aiohttp session with ``trust_env=True``, which makes every
    request look for a proxy and a ``~/.netrc`` entry in two worker threads: two thread hops
    (and GIL hand-overs) per request, ~15 % of the tracker's CPU in a burst of LISTs. The
    proxy is resolved once instead (:func:`resolve_proxy_once`); netrc credentials never
    applied to the API server (kubeconfig or the service account authenticate).
    """
    session = api.rest_client.pool_manager
    session._trust_env = False
