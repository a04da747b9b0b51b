"""A kubeconfig for the simulator: plain HTTP, no auth, context `kubesim`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CONTEXT = "kubesim"


def kubeconfig(url: str, *, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": url}}],
        "users": [{"name": CONTEXT, "user": {}}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(path: str | Path, url: str, *, namespace: str = "default") -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(kubeconfig(url, namespace=namespace), sort_keys=False))
    return target
