"""The kube client's session reads the environment once, not on every request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clearance.kube import Kube, KubeConfig


async def test_the_kube_session_does_not_read_the_environment_per_request(
    tmp_path: Path, monkeypatch: Any
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'http://api.example:6443'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    kube = await Kube.connect(KubeConfig(kubeconfig=str(kubeconfig)))
    try:
        session = kube._api.rest_client.pool_manager
        assert session.trust_env is False  # no netrc/proxy lookup in a thread per request
        assert kube._api.rest_client.proxy == "http://proxy.example:3128"  # resolved once
    finally:
        await kube.close()
