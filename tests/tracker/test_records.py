"""The KV record codec, settings validation and restart-proof span ids (no servers)."""

from __future__ import annotations

import gc

import msgspec
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tracker_builders import at, record, tracked

from clearance.settings import SettingsError
from clearance.telemetry import setup_tracing
from clearance_tracker import spans
from clearance_tracker.settings import TrackerSettings
from clearance_tracker.store import bucket_spec
from clearance_tracker.teardown import Clearing, decode_record, encode, record_key


def test_record_round_trips_through_its_json_encoding() -> None:
    rec = msgspec.structs.replace(
        record(tracked("w-0", "u1", confirmed=True), tracked("j", "u2", kind="Job")),
        clearing=Clearing(cleared_at=at(5), by="r1"),
        cycle_traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    )
    assert decode_record(encode(rec)) == rec
    assert rec.key == record_key("aw-uid-1", 1) == "td.aw-uid-1.1"


def test_a_decoded_record_and_its_objects_are_out_of_the_garbage_collector_s_walks() -> None:
    # 80,000 tracked objects at 10,000 teardowns: each full collection walked all of them
    # (tracker growth x1.18-1.3 with them tracked, x1.14 without; docs/DECISIONS.md).
    rec = decode_record(encode(record(tracked("w-0", "u1"), tracked("w-1", "u2"))))
    assert not gc.is_tracked(rec)
    assert not any(gc.is_tracked(obj) for obj in rec.objects.values())


def test_settings_defaults_are_the_operator_defaults() -> None:
    s = TrackerSettings.from_env({})
    assert (s.stuck_alert_time, s.force_deletion_time, s.finalizer_removal) == (
        60.0,
        570.0,
        "Never",
    )
    assert s.identity


@pytest.mark.parametrize(
    "env",
    [
        {"CLEARANCE_CLAIM_TIMEOUT": "2m"},
        {"CLEARANCE_HEARTBEAT_INTERVAL": "30s", "CLEARANCE_OWNER_TIMEOUT": "10s"},
        {"CLEARANCE_REPLICA_ID": "has space"},
        {"CLEARANCE_FINALIZER_REMOVAL": "Sometimes"},
        {"CLEARANCE_CONSUMER_CONCURRENCY": "0"},
    ],
)
def test_invalid_settings_are_rejected(env: dict[str, str]) -> None:
    with pytest.raises(SettingsError):
        TrackerSettings.from_env(env)


def test_the_tracker_declares_its_own_bucket_with_the_stream_replicas() -> None:
    spec = bucket_spec(TrackerSettings.from_env({"CLEARANCE_STREAM_REPLICAS": "3"}))
    assert (spec.bucket, spec.history, spec.ttl, spec.replicas) == (
        "clearance-teardowns",
        5,
        None,
        3,
    )
    renamed = bucket_spec(TrackerSettings.from_env({"CLEARANCE_KV_BUCKET": "td-staging"}))
    assert (renamed.bucket, renamed.replicas) == ("td-staging", 1)


def test_operator_default_durations_beyond_30_days_are_refused_at_start_naming_the_range() -> None:
    # Was: clamped to a century into the record; issue 13 Build 1 wants absurd settings refused.
    with pytest.raises(SettingsError, match=r"CLEARANCE_STUCK_ALERT_TIME.*0s\.\.30d"):
        TrackerSettings.from_env({"CLEARANCE_STUCK_ALERT_TIME": "99999999999999999999h"})
    policy = TrackerSettings.from_env({"CLEARANCE_STUCK_ALERT_TIME": "30d"}).default_policy()
    assert policy.stuck_alert_seconds == 30 * 86400
    msgspec.json.encode(policy)  # fits the record's 64-bit integers


def test_a_span_can_be_created_with_a_reserved_id_in_any_process() -> None:
    exporter = InMemorySpanExporter()
    provider = setup_tracing("t", exporter=exporter, environ={})
    spans.install(provider)
    tracer = provider.get_tracer("t")
    trace_id, reserved = spans.new_trace_id(), spans.new_span_id()
    child = tracer.start_span("child", context=spans.context_of(trace_id, reserved))
    child.end()
    with spans.preset_span_id(reserved):
        parent = tracer.start_span("parent", context=None)
        other = tracer.start_span("other")  # only the first span takes the preset id
    parent.end()
    other.end()
    finished = {s.name: s for s in exporter.get_finished_spans()}
    assert f"{finished['parent'].context.span_id:016x}" == reserved
    assert finished["child"].parent is not None
    assert f"{finished['child'].parent.span_id:016x}" == reserved
    assert f"{finished['other'].context.span_id:016x}" != reserved
    provider.shutdown()
