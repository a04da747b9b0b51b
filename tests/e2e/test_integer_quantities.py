"""Issue 19 acceptance 1: quantities written as numbers never make a job invisible.

MCAD's own examples write ``nvidia.com/gpu: 0`` as an integer in a Job's pod template. A real
API server stores it canonicalized (``"0"``), kubesim may keep the integer; either way the
three services must see the Job's pod run and succeed, and the AppWrapper must complete.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import Launch, appwrapper, condition, eventually, requeuing

from clearance import events

pytestmark = pytest.mark.slow


def gpu_job(name: str) -> dict[str, Any]:
    gpu = {"requests": {"cpu": "100m", "nvidia.com/gpu": 0}, "limits": {"nvidia.com/gpu": 0}}
    return {
        "completionstatus": "Complete",
        "replicas": 1,
        "generictemplate": {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "completions": 1,
                "parallelism": 1,
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {"name": "main", "image": "registry.example/t:1", "resources": gpu}
                        ],
                    }
                },
            },
        },
    }


async def test_job_appwrapper_with_integer_gpu_quantities_reaches_completed(
    launch: Launch,
) -> None:
    scenario = await launch(kubesim_flags=("--pod-run-time", "2s"))
    await scenario.submit(
        appwrapper("int-gpu", [gpu_job("int-gpu")], min_available=1, requeue=requeuing(wait=20))
    )

    async def completed() -> dict[str, Any] | None:
        status = await scenario.status("int-gpu")
        return status if status.get("state") == "Completed" else None

    status = await eventually(completed, timeout=45, what="the AppWrapper to complete")
    done = condition(status, "Completed")
    assert done is not None and done.get("status") == "True"
    assert status.get("Succeeded") == 1  # the dispatcher counted the pod it saw succeed
    assert not scenario.log.of(events.CycleRequeued)
    assert await scenario.safety_violations() == []
