"""The bookkeeping kept in an annotation (CRDs that prune ``status.clearance``), pure parts:
one commit patch, a status mirror that is repaired, the schema check, policy by annotation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from tests.dispatcher.test_clearance_status import statuses
from tests.dispatcher.unit_support import T0

from clearance.bookkeeping import BOOKKEEPING_ANNOTATION, ClearanceStatus
from clearance_dispatcher import crdschema
from clearance_dispatcher.appwrapper import AppWrapperSpec, InvalidAppWrapper, parse_appwrapper
from clearance_dispatcher.status import Patch, observe
from clearance_dispatcher.status import render as render_patch
from clearance_dispatcher.storage import AnnotationStorage, Bookkeeping

REPO = Path(__file__).resolve().parents[2]


def _apply(raw: dict[str, Any], writes: Any) -> dict[str, Any]:
    """The object after the patches, as a server that keeps metadata and status would."""
    out = json.loads(json.dumps(raw))
    for write in writes:
        if write.subresource == "status":
            status = out.setdefault("status", {})
            for key, value in write.body["status"].items():
                if value is None:
                    status.pop(key, None)
                else:
                    status[key] = value
        else:
            out.setdefault("metadata", {}).setdefault("annotations", {}).update(
                write.body["metadata"]["annotations"]
            )
    return out


@given(statuses)
def test_bookkeeping_written_to_the_annotation_reads_back_equal(status: ClearanceStatus) -> None:
    storage = AnnotationStorage()
    raw: dict[str, Any] = {"metadata": {"name": "aw"}}
    raw = _apply(raw, storage.writes({"state": "Pending"}, status, raw=raw))
    assert storage.read(raw) == status


def test_the_commit_is_one_metadata_patch_carrying_bookkeeping_and_status_mirror() -> None:
    storage = AnnotationStorage()
    clearance = ClearanceStatus().queued()
    commit, mirror = storage.writes({"state": "Pending"}, clearance, raw={"metadata": {}})
    assert commit.subresource is None and list(commit.body) == ["metadata"]
    document = json.loads(commit.body["metadata"]["annotations"][BOOKKEEPING_ANNOTATION])
    assert document["clearance"]["phase"] == "Queued"
    assert document["status"] == {"state": "Pending"}
    assert mirror.subresource == "status" and mirror.body == {"status": {"state": "Pending"}}


def test_a_status_left_behind_by_a_crash_is_rewritten_by_a_later_write_with_nothing_to_do() -> None:
    storage = AnnotationStorage()
    raw: dict[str, Any] = {"metadata": {}, "status": {"state": "Running"}}
    commit, _ = storage.writes({"numberOfRequeueings": 1, "state": "Pending"}, ClearanceStatus())
    crashed = _apply(raw, [commit])  # the /status write never happened
    observed = observe(crashed, storage)
    assert observed.number_of_requeueings == 1  # decisions read the committed mirror
    (repair,) = storage.writes({}, None, raw=crashed)
    assert repair.body == {"status": {"numberOfRequeueings": 1, "state": "Pending"}}
    assert storage.writes({}, None, raw=_apply(crashed, [repair])) == ()


def test_a_field_the_schema_prunes_is_not_resent_once_learnt() -> None:
    storage = AnnotationStorage()
    raw = _apply({"metadata": {}}, storage.writes({"extra": 1, "state": "Pending"}, None))
    raw["status"].pop("extra")
    assert storage.writes({}, None, raw=raw)[0].body == {"status": {"extra": 1}}
    storage.learn_pruned({"extra"})
    assert storage.writes({}, None, raw=raw) == ()


def test_switching_storage_keeps_what_the_other_place_holds() -> None:
    book = Bookkeeping("annotations")
    clearance = ClearanceStatus().queued()
    raw = _apply({"metadata": {}}, book.writes({}, clearance, raw={"metadata": {}}))
    book.use("status")
    assert book.read(raw) == clearance
    in_status = {"metadata": {}, "status": {"clearance": {"version": 2, "phase": "Queued"}}}
    book.use("annotations")
    assert book.read(in_status).phase == "Queued"


def test_observed_conditions_come_from_the_mirror() -> None:
    storage = AnnotationStorage()
    patch = Patch(at=T0, conditions={"Queueing": (True, "AwaitingHeadOfLine", "waiting")})
    fields, clearance = render_patch(observe({}, storage), patch)
    raw = _apply({"metadata": {}}, storage.writes(fields, clearance, raw={"metadata": {}})[:1])
    assert observe(raw, storage).condition("Queueing") is not None


# ---------------------------------------------------------------------------- CRD schemas


def _schema(path: Path) -> dict[str, Any]:
    crd = yaml.safe_load(path.read_text())
    schema = crdschema.version_schema(crd, "v1beta1")
    assert schema is not None
    return dict(schema)


def test_the_upstream_mcad_crd_drops_the_bookkeeping_and_every_teardown_field() -> None:
    dropped = crdschema.dropped(_schema(REPO / "tests/data/crds/mcad-v1-appwrapper-crd.yaml"))
    assert [d.path for d in dropped] == [
        "status.clearance",
        "spec.schedulingSpec.requeuing.pauseTimeInSeconds",
        "spec.schedulingSpec.requeuing.forceDeletionTimeInSeconds",
        "spec.schedulingSpec.requeuing.stuckAlertTimeInSeconds",
        "spec.schedulingSpec.requeuing.finalizerRemoval",
    ]
    line = crdschema.summary(dropped)
    assert "kubectl apply -k deploy/crd" in line and "clearance.dev/bookkeeping" in line


def test_the_project_crd_keeps_every_clearance_field() -> None:
    assert crdschema.dropped(_schema(REPO / "deploy/crd/appwrapper-crd.yaml")) == []


def test_preserve_unknown_fields_on_status_keeps_the_bookkeeping() -> None:
    schema = {
        "properties": {"status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    }
    assert crdschema.bookkeeping_kept(schema)
    assert not crdschema.bookkeeping_kept({"properties": {"status": {"type": "object"}}})


# --------------------------------------------------------------------- policy annotations


def _aw(
    annotations: dict[str, str], requeuing: dict[str, Any]
) -> AppWrapperSpec | InvalidAppWrapper:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    return parse_appwrapper(
        {
            "metadata": {"name": "a", "namespace": "n", "uid": "u", "annotations": annotations},
            "spec": {
                "schedulingSpec": {"requeuing": requeuing},
                "resources": {"GenericItems": [{"generictemplate": pod}]},
            },
        }
    )


def test_policy_annotations_fill_the_teardown_fields_the_spec_lacks() -> None:
    spec = _aw(
        {
            "clearance.dev/stuck-alert-time-in-seconds": "7",
            "clearance.dev/force-deletion-time-in-seconds": "11",
            "clearance.dev/pause-time-in-seconds": "3",
            "clearance.dev/finalizer-removal": "AfterForceDeletion",
        },
        {"timeInSeconds": 300},
    )
    assert isinstance(spec, AppWrapperSpec)
    r = spec.requeuing
    assert (r.stuck_alert_time_in_seconds, r.force_deletion_time_in_seconds) == (7, 11)
    assert (r.pause_time_in_seconds, r.finalizer_removal) == (3, "AfterForceDeletion")


def test_a_spec_field_wins_over_its_annotation() -> None:
    spec = _aw({"clearance.dev/stuck-alert-time-in-seconds": "7"}, {"stuckAlertTimeInSeconds": 9})
    assert isinstance(spec, AppWrapperSpec) and spec.requeuing.stuck_alert_time_in_seconds == 9


def test_an_out_of_range_or_malformed_annotation_is_refused_naming_it() -> None:
    refused = _aw(
        {
            "clearance.dev/stuck-alert-time-in-seconds": "99999999",
            "clearance.dev/pause-time-in-seconds": "soon",
        },
        {},
    )
    assert isinstance(refused, InvalidAppWrapper)
    assert "clearance.dev/stuck-alert-time-in-seconds]: 1157d9h46m39s is outside 0s..30d" in (
        refused.message
    )
    assert "clearance.dev/pause-time-in-seconds]: expected whole seconds" in refused.message
