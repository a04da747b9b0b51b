"""A small rack loss judged like the benchmark (issue 16 Acceptance 4); a broken build caught.

8 nodes, 20 AppWrappers x 4 pods, 4 nodes lost at once: every gang that lost a pod is
redispatched ≤ 10 s after its force deadline, no safety violation (S1/S2 over kubesim's write
history), every service within its client rate limit, every 429 answered after its
Retry-After. The same run with the dispatcher ``unmannered`` (``CLEARANCE_TEST_FAULT``: no
client rate limit, 429s retried at once) must fail the manners checks.
"""

from __future__ import annotations

import pytest
from tests.bench.rack_loss import RackConfig, run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SMALL = RackConfig(
    nodes=8,
    appwrappers=20,
    pods=4,
    lost=4,
    force_seconds=3,
    wait_seconds=5,
    qps=50.0,
    burst=50,
    server_qps=45.0,
    server_burst=45,
    settle_timeout=90.0,
)


async def test_a_small_rack_loss_is_redispatched_in_time_safely_and_politely() -> None:
    result = await run(SMALL)
    assert result["failures"] == [], result
    assert result["teardowns"] > 0
    assert result["held_past_force_deadline"] == result["teardowns"]
    assert result["safety_violation_count"] == 0
    assert result["force_deadline_to_last_redispatch_create_s"]["max"] <= 10.0
    for figures in result["api_requests"].values():
        assert figures["peak_per_s"] <= figures["peak_allowed_per_s"]
        assert figures["retried_before_retry_after"] == 0


async def test_a_dispatcher_ignoring_its_rate_limit_and_retry_after_fails_the_check() -> None:
    broken = RackConfig(
        **{
            **SMALL.__dict__,
            "service_env": {"dispatcher": {"CLEARANCE_TEST_FAULT": "unmannered"}},
            "settle_timeout": 45.0,
        }
    )
    result = await run(broken)
    failures = [f for f in result["failures"] if f.startswith("dispatcher:")]
    assert failures, result["failures"]
    dispatcher = result["api_requests"]["dispatcher"]
    assert (
        dispatcher["peak_per_s"] > dispatcher["peak_allowed_per_s"]
        or dispatcher["retried_before_retry_after"] > 0
    )
