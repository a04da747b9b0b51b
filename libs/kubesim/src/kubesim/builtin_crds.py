"""CustomResourceDefinitions kubesim ships for the workloads its own controllers run.

`kubesim serve --builtin-crd pytorchjob` (`ClusterConfig.builtin_crds`) registers them at start,
after any `--crd` file: a user's own CRD of the same name wins (the second create is a 409 and
is skipped).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["BUILTIN_CRDS", "builtin_crd_path"]

DATA = Path(__file__).parent / "data"

# name → file under kubesim/data
BUILTIN_CRDS: dict[str, str] = {
    "pytorchjob": "kubeflow.org_pytorchjobs.yaml",
}


def builtin_crd_path(name: str) -> Path:
    """The bundled CRD file for `name`; KeyError names the known ones."""
    try:
        return DATA / BUILTIN_CRDS[name]
    except KeyError:
        known = ", ".join(sorted(BUILTIN_CRDS))
        raise KeyError(f"no built-in CRD {name!r} (known: {known})") from None
