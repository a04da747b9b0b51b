"""Request limits (kubesim.flowcontrol) as pure decisions with a fake clock (no server)."""

from __future__ import annotations

import pytest

from kubesim.flowcontrol import (
    FlowControl,
    FlowControlConfig,
    FlowControlError,
    Rejection,
    Slot,
    config_from_json,
)

UA = "clearance-tracker/0.1 (t-1; pid 42)"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def admit(flow: FlowControl, verb: str = "get", agent: str = UA, path: str = "/api/v1/pods"):
    return flow.admit(path=path, verb=verb, user_agent=agent)


def test_without_limits_everything_is_admitted() -> None:
    flow = FlowControl()
    assert all(isinstance(admit(flow, verb), Slot) for verb in ["get", "create"] * 500)


def test_read_only_in_flight_limit_rejects_with_retry_after_1_until_a_slot_is_released() -> None:
    flow = FlowControl(FlowControlConfig(max_requests_inflight=2))
    first, second = admit(flow), admit(flow, "list")
    assert isinstance(first, Slot) and isinstance(second, Slot)
    assert admit(flow) == Rejection("inflight", 1)
    first.release()
    first.release()  # idempotent: one request frees one slot
    assert isinstance(admit(flow), Slot)
    assert admit(flow) == Rejection("inflight", 1)


def test_mutating_and_read_only_requests_have_separate_limits() -> None:
    flow = FlowControl(FlowControlConfig(max_requests_inflight=1, max_mutating_requests_inflight=1))
    assert isinstance(admit(flow, "get"), Slot)
    assert isinstance(admit(flow, "patch"), Slot)
    assert admit(flow, "delete") == Rejection("mutating-inflight", 1)
    assert admit(flow, "list") == Rejection("inflight", 1)


def test_watches_are_long_running_and_never_counted_in_flight() -> None:
    flow = FlowControl(FlowControlConfig(max_requests_inflight=1))
    watches = [admit(flow, "watch") for _ in range(50)]
    assert all(isinstance(w, Slot) for w in watches)
    assert isinstance(admit(flow, "list"), Slot)
    assert flow.state()["inflight"] == {"readOnly": 1, "mutating": 0}


def test_token_bucket_allows_the_burst_then_says_when_the_next_token_is_due() -> None:
    clock = Clock()
    flow = FlowControl(FlowControlConfig(rate_limit=0.5, rate_burst=3), clock=clock)
    for _ in range(3):
        admit(flow).release()
    assert admit(flow) == Rejection("rate", 2)  # one token per 2 s at 0.5 QPS
    clock.now += 1.0
    assert admit(flow) == Rejection("rate", 1)
    clock.now += 1.0
    assert isinstance(admit(flow), Slot)


def test_watch_starts_take_tokens_like_any_request() -> None:
    flow = FlowControl(FlowControlConfig(rate_limit=1, rate_burst=1), clock=Clock())
    assert isinstance(admit(flow, "watch"), Slot)
    assert admit(flow, "watch") == Rejection("rate", 1)


def test_user_agent_scope_gives_every_agent_its_own_bucket() -> None:
    flow = FlowControl(
        FlowControlConfig(rate_limit=1, rate_burst=1, rate_scope="user-agent"), clock=Clock()
    )
    assert isinstance(admit(flow, agent="a"), Slot)
    assert isinstance(admit(flow, agent="b"), Slot)
    assert isinstance(admit(flow, agent="a"), Rejection)
    global_flow = FlowControl(FlowControlConfig(rate_limit=1, rate_burst=1), clock=Clock())
    assert isinstance(admit(global_flow, agent="a"), Slot)
    assert isinstance(admit(global_flow, agent="b"), Rejection)


def test_kubesim_controllers_and_health_probes_are_exempt() -> None:
    flow = FlowControl(FlowControlConfig(max_requests_inflight=1, rate_limit=1, rate_burst=1))
    admit(flow)
    assert isinstance(admit(flow, agent="kubesim-controllers"), Slot)
    assert isinstance(admit(flow, path="/readyz"), Slot)
    assert isinstance(admit(flow), Rejection)


def test_rejections_are_counted_by_reason_and_user_agent() -> None:
    flow = FlowControl(FlowControlConfig(max_requests_inflight=1), clock=Clock())
    admit(flow)
    admit(flow)
    admit(flow, agent="other")
    state = flow.state()
    assert state["rejected"] == {
        "total": 2,
        "byReason": {"inflight": 2},
        "byUserAgent": {UA: 1, "other": 1},
    }
    assert state["admitted"] == 1 and state["peakInflight"]["readOnly"] == 1
    flow.reset_counters()
    assert flow.state()["rejected"]["total"] == 0


def test_runtime_settings_merge_and_bad_ones_are_refused() -> None:
    base = FlowControlConfig(max_requests_inflight=5)
    changed = config_from_json(base, {"rateLimit": 10, "rateBurst": 20, "rateScope": "user-agent"})
    assert changed == FlowControlConfig(
        max_requests_inflight=5, rate_limit=10.0, rate_burst=20, rate_scope="user-agent"
    )
    for bad in (
        {"rateLimit": -1},
        {"maxRequestsInflight": 1.5},
        {"rateScope": "per-pod"},
        {"retryAfter": 0},
        {"maxRequestsInflight": "2"},
        {"qps": 3},
    ):
        with pytest.raises(FlowControlError):
            config_from_json(base, bad)


def test_admitted_requests_are_counted_per_user_agent_verb_and_resource() -> None:
    flow = FlowControl()
    status = "/apis/workload.codeflare.dev/v1beta1/namespaces/d/appwrappers/a/status"
    admit(flow, "patch", path=status)
    admit(flow, "patch", path=status)
    admit(flow, "get", path="/api/v1/namespaces/d/pods/p-0")
    admit(flow, "list", agent="kubesim/1 (controllers)", path="/api/v1/pods")  # exempt
    state = flow.state()
    assert state["admittedByUserAgent"] == {UA: 3}
    assert state["admittedByRequest"] == [
        {"userAgent": UA, "request": "get pods", "count": 1},
        {"userAgent": UA, "request": "patch appwrappers/status", "count": 2},
    ]
