"""Pure decision logic of the dispatcher: quantities, validation, queue order, capacity, requeue."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from tests.dispatcher.conftest import job_appwrapper

from clearance import labels
from clearance.events import (
    Condition,
    Container,
    NodeObject,
    NodeSpec,
    NodeStatus,
    ObjectMeta,
    PodObject,
    PodSpec,
    PodStatus,
    ResourceList,
    ResourceRequirements,
    Taint,
)
from clearance_dispatcher import appwrapper as aw_mod
from clearance_dispatcher.appwrapper import AppWrapperSpec, InvalidAppWrapper, parse_appwrapper
from clearance_dispatcher.capacity import (
    QuantityError,
    canonical,
    fits,
    free_capacity,
    parse_quantity,
    reservation,
)
from clearance_dispatcher.dispatching import build_object
from clearance_dispatcher.queueing import Candidate, ordered, plan
from clearance_dispatcher.requeueing import (
    Counts,
    Fail,
    Keep,
    Requeue,
    current_wait,
    decide,
    grown_wait,
)
from clearance_dispatcher.status import with_conditions

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _aw(**kw: Any) -> dict[str, Any]:
    raw = job_appwrapper("aw", "ns", **kw)
    raw["metadata"].update(
        uid="u-1", generation=1, resourceVersion="1", creationTimestamp="2026-01-01T00:00:00Z"
    )
    return raw


# ------------------------------------------------------------------------------ quantities


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        ("1.5Gi", Decimal(1.5 * 2**30)),
        ("64Mi", Decimal(64 * 2**20)),
        ("1k", Decimal(1000)),
        ("2e3", Decimal(2000)),
        ("1E-3", Decimal("0.001")),
        ("100u", Decimal("0.0001")),
        (".5", Decimal("0.5")),
        (3, Decimal(3)),
        (0.25, Decimal("0.25")),
    ],
)
def test_parse_quantity_follows_kubernetes_suffixes(text: Any, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["lots", "1Gb", "", "1.2.3", "Mi", "--1", "1 Gi", True])
def test_parse_quantity_rejects_garbage(text: Any) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_canonical_units_round_up() -> None:
    assert canonical("cpu", "250m") == 250
    assert canonical("cpu", "1.0001") == 1001
    assert canonical("memory", "1Ki") == 1024
    with pytest.raises(QuantityError):
        canonical("cpu", "-1")


# ------------------------------------------------------------------------------ validation


def test_valid_job_appwrapper_requests_are_parallelism_times_pod_requests() -> None:
    spec = parse_appwrapper(_aw(parallelism=3, cpu="500m"))
    assert isinstance(spec, AppWrapperSpec)
    assert spec.requests == {"cpu": 1500, "memory": 3 * 64 * 2**20}
    assert spec.expected_pods == 3
    assert spec.items[0].completion_status == ("Complete",)


def test_custompodresources_win_over_the_template() -> None:
    spec = parse_appwrapper(_aw(parallelism=2, cpu="100m", custom_cpu="2"))
    assert isinstance(spec, AppWrapperSpec)
    assert spec.requests["cpu"] == 4000


def _invalid(raw: dict[str, Any]) -> InvalidAppWrapper:
    result = parse_appwrapper(raw)
    assert isinstance(result, InvalidAppWrapper), result
    return result


def _template(raw: dict[str, Any]) -> dict[str, Any]:
    return raw["spec"]["resources"]["GenericItems"][0]["generictemplate"]  # type: ignore[no-any-return]


def test_no_generic_items_is_invalid() -> None:
    raw = _aw()
    raw["spec"]["resources"]["GenericItems"] = []
    assert _invalid(raw).reason == aw_mod.NO_GENERIC_ITEMS


@pytest.mark.parametrize(
    ("remove", "reason"),
    [("kind", aw_mod.MISSING_KIND), ("apiVersion", aw_mod.MISSING_API_VERSION)],
)
def test_template_without_kind_or_api_version_is_invalid(remove: str, reason: str) -> None:
    raw = _aw()
    del _template(raw)[remove]
    bad = _invalid(raw)
    assert bad.reason == reason
    assert "GenericItems[0].generictemplate" in bad.message


def test_template_without_name_is_invalid() -> None:
    raw = _aw()
    del _template(raw)["metadata"]["name"]
    assert _invalid(raw).reason == aw_mod.MISSING_NAME


def test_negative_min_available_is_invalid() -> None:
    assert _invalid(_aw(min_available=-1)).reason == aw_mod.NEGATIVE_MIN_AVAILABLE


def test_unparsable_quantities_are_invalid_in_template_and_custom_resources() -> None:
    assert _invalid(_aw(cpu="lots")).reason == aw_mod.INVALID_QUANTITY
    bad = _invalid(_aw(custom_cpu="1x"))
    assert bad.reason == aw_mod.INVALID_QUANTITY and "custompodresources[0]" in bad.message


def test_bad_requeuing_fields_are_named() -> None:
    bad = _invalid(_aw(requeuing={"growthType": "cubic", "timeInSeconds": "soon"}))
    assert "growthType" in bad.message and "timeInSeconds" in bad.message


def test_garbage_never_raises() -> None:
    for raw in (
        {},
        {"spec": None},
        {"spec": {"resources": {"GenericItems": [None, 3, "x"]}}},
        {"metadata": [], "spec": {"schedulingSpec": "x"}},
    ):
        assert isinstance(parse_appwrapper(raw), InvalidAppWrapper)


# ---------------------------------------------------------------------------------- objects


def test_build_object_stamps_labels_owner_and_pod_template() -> None:
    spec = parse_appwrapper(_aw())
    assert isinstance(spec, AppWrapperSpec)
    obj = build_object(
        spec.items[0], spec, attempt=3, aw_api_version="workload.codeflare.dev/v1beta1"
    )
    want = labels.stamp(appwrapper="aw", namespace="ns", attempt=3)
    assert want.items() <= obj["metadata"]["labels"].items()
    assert want.items() <= obj["spec"]["template"]["metadata"]["labels"].items()
    assert obj["metadata"]["namespace"] == "ns"
    (owner,) = obj["metadata"]["ownerReferences"]
    assert owner["uid"] == "u-1" and owner["kind"] == "AppWrapper"
    assert "labels" not in spec.items[0].template["metadata"]  # template untouched


# ------------------------------------------------------------------------------ the queue


def _cand(name: str, priority: int, cpu: int, age: int = 0) -> Candidate:
    return Candidate(("ns", name), priority, T0 + timedelta(seconds=age), {"cpu": cpu})


def test_queue_order_is_priority_then_creation_time() -> None:
    names = [
        c.key[1]
        for c in ordered(
            [_cand("old-low", 1, 1, 0), _cand("new-high", 5, 1, 9), _cand("old-high", 5, 1, 1)]
        )
    ]
    assert names == ["old-high", "new-high", "old-low"]


def test_backfill_within_a_priority_never_past_a_blocked_higher_one() -> None:
    cands = [
        _cand("big-high", 5, 10_000),
        _cand("small-high", 5, 500, 1),
        _cand("small-low", 1, 500, 2),
    ]
    result = plan(cands, {"cpu": 2000})
    assert [c.key[1] for c in result.admit] == ["small-high"]
    assert "insufficient capacity" in result.waiting[("ns", "big-high")]
    assert "waiting behind ns/big-high" in result.waiting[("ns", "small-low")]


def test_strict_policy_stops_at_the_first_that_does_not_fit() -> None:
    cands = [_cand("big", 5, 10_000), _cand("small", 5, 500, 1)]
    assert plan(cands, {"cpu": 2000}, policy="strict").admit == ()


def test_admitted_appwrappers_consume_capacity_in_order() -> None:
    cands = [_cand("a", 1, 1500, 0), _cand("b", 1, 1500, 1)]
    assert [c.key[1] for c in plan(cands, {"cpu": 2000}).admit] == ["a"]


# -------------------------------------------------------------------------------- capacity


def _node(
    name: str,
    cpu: str = "4",
    *,
    ready: bool = True,
    taint: str | None = None,
    unschedulable: bool = False,
) -> NodeObject:
    return NodeObject(
        metadata=ObjectMeta(name=name, uid=f"n-{name}", resource_version="1"),
        spec=NodeSpec(
            unschedulable=unschedulable,
            taints=(Taint(key=taint, effect="NoExecute"),) if taint else (),
        ),
        status=NodeStatus(
            conditions=(Condition(type="Ready", status="True" if ready else "False"),),
            allocatable=ResourceList(cpu=cpu, memory="8Gi"),
        ),
    )


def _pod(
    name: str,
    cpu: str,
    *,
    node: str | None = "n1",
    phase: str = "Running",
    terminating: bool = False,
) -> PodObject:
    return PodObject(
        metadata=ObjectMeta(
            name=name,
            uid=f"p-{name}",
            resource_version="1",
            deletion_timestamp=T0 if terminating else None,
        ),
        spec=PodSpec(
            node_name=node,
            containers=(
                Container(name="c", resources=ResourceRequirements(requests=ResourceList(cpu=cpu))),
            ),
        ),
        status=PodStatus(phase=phase),
    )


def test_free_capacity_counts_terminating_pods_but_not_terminal_ones() -> None:
    nodes = [_node("n1"), _node("n2")]
    pods = [
        _pod("run", "1"),
        _pod("dying", "2", terminating=True),
        _pod("done", "3", phase="Succeeded"),
        _pod("failed", "3", phase="Failed"),
        _pod("unbound", "500m", node=None, phase="Pending"),
    ]
    free = free_capacity(nodes, pods)
    assert free["cpu"] == 8000 - 1000 - 2000 - 500


def test_only_ready_schedulable_untainted_nodes_give_capacity() -> None:
    nodes = [
        _node("ok"),
        _node("notready", ready=False),
        _node("cordoned", unschedulable=True),
        _node("lost", taint="node.kubernetes.io/unreachable"),
    ]
    pods = [_pod("on-lost", "4", node="lost", terminating=True)]
    assert free_capacity(nodes, pods)["cpu"] == 4000


def test_reservation_covers_pods_not_created_yet() -> None:
    assert reservation({"cpu": 3000}, {"cpu": 1000}) == {"cpu": 2000}
    assert reservation({"cpu": 3000}, {"cpu": 3000}) == {}
    assert fits({"cpu": 2000, "example.com/foo": 5}, {"cpu": 2000})


# ------------------------------------------------------------------------------- requeuing


def test_exponential_growth_is_capped() -> None:
    rq = aw_mod.Requeuing(time_in_seconds=60, growth_type="exponential", max_time_in_seconds=200)
    waits = [current_wait(None, rq, 300)]
    for _ in range(3):
        waits.append(grown_wait(waits[-1], rq, 300))
    assert waits == [60, 120, 200, 200]


def test_linear_and_none_growth() -> None:
    linear = aw_mod.Requeuing(time_in_seconds=10, growth_type="linear")
    assert grown_wait(grown_wait(10, linear, 300), linear, 300) == 30
    none = aw_mod.Requeuing(time_in_seconds=10, growth_type="none")
    assert grown_wait(10, none, 300) == 10
    assert current_wait(None, aw_mod.Requeuing(), 300) == 300


def _decide(
    counts: Counts,
    *,
    at: float,
    requeues: int = 0,
    limit: int = 0,
    min_available: int = 2,
    dispatch_limit: int | None = None,
) -> Any:
    rq = aw_mod.Requeuing(time_in_seconds=60, max_num_requeuings=limit)
    return decide(
        now=T0 + timedelta(seconds=at),
        dispatched_at=T0,
        first_dispatched_at=T0,
        counts=counts,
        min_available=min_available,
        requeuing=rq,
        wait_seconds=60,
        default_wait=300,
        number_of_requeueings=requeues,
        dispatch_limit_seconds=dispatch_limit,
    )


def test_no_requeue_before_the_wait_and_none_with_enough_pods() -> None:
    early = _decide(Counts(running=0), at=30)
    assert isinstance(early, Keep) and early.recheck_at == T0 + timedelta(seconds=60)
    assert isinstance(_decide(Counts(running=1, succeeded=1), at=90), Keep)


def test_requeue_after_the_wait_with_too_few_pods() -> None:
    verdict = _decide(Counts(running=1, terminating=1), at=61)
    assert isinstance(verdict, Requeue)
    assert verdict.number_of_requeueings == 1 and verdict.next_wait == 120
    assert "minimum=2, running=1" in verdict.message


def test_min_available_zero_still_needs_one_pod() -> None:
    assert isinstance(_decide(Counts(), at=61, min_available=0), Requeue)


def test_max_num_requeuings_fires_after_exactly_that_many_requeues() -> None:
    assert isinstance(_decide(Counts(), at=61, requeues=0, limit=2), Requeue)
    assert isinstance(_decide(Counts(), at=61, requeues=1, limit=2), Requeue)
    verdict = _decide(Counts(), at=61, requeues=2, limit=2)
    assert isinstance(verdict, Fail) and verdict.reason == "MaxNumRequeuingsReached"


def test_dispatch_duration_limit_fails() -> None:
    verdict = _decide(Counts(running=2), at=31, dispatch_limit=30)
    assert isinstance(verdict, Fail) and verdict.reason == "DispatchDeadlineExceeded"


# ------------------------------------------------------------------------------ conditions


def test_conditions_are_upserted_and_unchanged_ones_not_rewritten() -> None:
    raw: dict[str, Any] = {"status": {}}
    first = with_conditions(raw, {"Queueing": (True, "A", "m")}, now=T0)
    assert first is not None and first[0]["lastTransitionMicroTime"].startswith("2026-01-01")
    raw["status"]["conditions"] = first
    assert with_conditions(raw, {"Queueing": (True, "A", "m")}, now=T0) is None
    assert with_conditions(raw, {"Never": (False, "x", "")}, now=T0) is None
    later = with_conditions(
        copy.deepcopy(raw), {"Queueing": (False, "B", "")}, now=T0 + timedelta(seconds=5)
    )
    assert later is not None and len(later) == 1 and later[0]["status"] == "False"
