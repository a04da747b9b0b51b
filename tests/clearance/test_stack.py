"""The packaged AppWrapper CRD (used by `clearance demo`) is the one deploy/ installs."""

from __future__ import annotations

from pathlib import Path

from clearance.stack import appwrapper_crd

REPO = Path(__file__).resolve().parents[2]


def test_packaged_crd_is_identical_to_the_deployed_crd() -> None:
    deployed = (REPO / "deploy" / "crd" / "appwrapper-crd.yaml").read_text()
    assert appwrapper_crd() == deployed, (
        "copy deploy/crd/appwrapper-crd.yaml to libs/clearance/src/clearance/data/"
    )
