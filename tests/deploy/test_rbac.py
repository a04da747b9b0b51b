"""Acceptance 3 of issue #8: the RBAC table in deploy/README.md and the rendered Roles agree,
exactly, for both overlays, and no service holds a verb outside its documented need.

Rules are compared as expanded grants (service, scope, apiGroup, resource, resourceName, verb),
collected through the bindings of each service's ServiceAccount, so a Role that is not bound, or
bound to the wrong account, does not count.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import pytest
from deploy_support import DEPLOY, OVERLAYS, SERVICES, Obj, render

APPWRAPPER_GROUPS = {"workload.codeflare.dev", "mcad.ibm.com"}
NEVER_VERBS = {"*", "deletecollection", "escalate", "bind", "impersonate", "approve", "sign"}


class Grant(NamedTuple):
    service: str
    scope: str  # "cluster" or "namespace"
    group: str  # "" is the core group
    resource: str
    name: str  # resourceName, "" for any
    verb: str


def cells(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def documented_grants() -> tuple[set[Grant], dict[Grant, str]]:
    """Grants of the README's RBAC table, with the `why` of each."""
    text = (DEPLOY / "README.md").read_text()
    section = text.split("## Least privilege (RBAC)", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert header == ["service", "scope", "apiGroups", "resources", "resourceNames", "verbs", "why"]
    grants: set[Grant] = set()
    why: dict[Grant, str] = {}
    for row in rows[2:]:
        service, scope, groups, resources, names, verbs, reason = (
            c.strip() for c in row.strip("|").split("|")
        )
        assert reason, f"row without a reason: {row}"
        groups_ = ["" if g == "core" else g for g in cells(groups)]
        for group, resource, name, verb in itertools.product(
            groups_, cells(resources), cells(names) or [""], cells(verbs)
        ):
            grant = Grant(service, scope, group, resource, name, verb)
            assert grant not in grants, f"documented twice: {grant}"
            grants.add(grant)
            why[grant] = reason
    return grants, why


def rendered_grants(objs: list[Obj]) -> set[Grant]:
    roles = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
        for o in objs
        if o["kind"] in ("Role", "ClusterRole")
    }
    grants: set[Grant] = set()
    for binding in objs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
        role = roles[(ref["kind"], namespace, ref["name"])]
        scope = "cluster" if binding["kind"] == "ClusterRoleBinding" else "namespace"
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount" and subject["namespace"] == "clearance"
            service = subject["name"].removeprefix("clearance-")
            assert service in SERVICES, f"binding to an unexpected account: {subject}"
            for rule in role["rules"]:
                assert "nonResourceURLs" not in rule
                for group, resource, name, verb in itertools.product(
                    rule["apiGroups"],
                    rule["resources"],
                    rule.get("resourceNames") or [""],
                    rule["verbs"],
                ):
                    grants.add(Grant(service, scope, group, resource, name, verb))
    return grants


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_readme_rbac_table_equals_the_rendered_roles(overlay: str) -> None:
    documented, _ = documented_grants()
    rendered = rendered_grants(render(f"overlays/{overlay}"))
    assert rendered - documented == set(), "granted but not documented"
    assert documented - rendered == set(), "documented but not granted"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_role_is_bound_to_exactly_its_service(overlay: str) -> None:
    objs = render(f"overlays/{overlay}")
    roles = {o["metadata"]["name"] for o in objs if o["kind"] in ("Role", "ClusterRole")}
    bound = {
        o["roleRef"]["name"] for o in objs if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
    }
    assert roles == bound
    for binding in (o for o in objs if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        [subject] = binding["subjects"]
        assert binding["roleRef"]["name"].startswith(subject["name"])


def test_nobody_holds_wildcards_secrets_or_escalation_verbs() -> None:
    for grant in rendered_grants(render("overlays/prod")):
        assert grant.verb not in NEVER_VERBS, grant
        assert "*" not in (grant.group, grant.resource), grant
        assert grant.resource not in ("secrets", "serviceaccounts/token", "roles", "clusterroles")


def test_watcher_only_reads_besides_its_own_lease() -> None:
    for grant in rendered_grants(render("overlays/prod")):
        if grant.service != "watcher":
            continue
        if grant.resource == "leases":
            assert grant.scope == "namespace"
            assert grant.verb == "create" or grant.name == "clearance-watcher", grant
        else:
            assert grant.verb in ("list", "watch"), grant


def test_tracker_never_writes_appwrappers_never_watches_and_creates_only_events() -> None:
    for grant in rendered_grants(render("overlays/prod")):
        if grant.service != "tracker":
            continue
        assert grant.group not in APPWRAPPER_GROUPS, grant
        assert grant.resource != "leases", grant
        assert grant.verb != "watch", grant
        if grant.verb == "create":
            assert grant.resource == "events", grant
        if grant.verb in ("delete", "patch"):
            assert grant.resource in (
                *("pods", "services", "configmaps", "jobs", "pytorchjobs"),
                *("deployments", "statefulsets", "replicasets"),
            ), grant


def test_dispatcher_writes_appwrappers_only_through_status_and_owner_finalizers() -> None:
    for grant in rendered_grants(render("overlays/prod")):
        if grant.service != "dispatcher":
            continue
        if grant.group in APPWRAPPER_GROUPS:
            allowed = {
                # patch: the bookkeeping annotation (issue 17), never spec
                "appwrappers": {"get", "list", "patch"},
                "appwrappers/status": {"patch"},
                "appwrappers/finalizers": {"update"},
            }
            assert grant.verb in allowed[grant.resource], grant
        if grant.resource == "leases":
            assert grant.verb == "create" or grant.name == "clearance-dispatcher", grant


def test_only_the_lease_holders_have_lease_rules_and_they_match_the_lease_names() -> None:
    objs = render("overlays/prod")
    leases = {g for g in rendered_grants(objs) if g.resource == "leases"}
    assert {g.service for g in leases} == {"watcher", "dispatcher"}
    for service in ("watcher", "dispatcher"):
        [deployment] = [
            o
            for o in objs
            if o["kind"] == "Deployment" and o["metadata"]["name"] == f"clearance-{service}"
        ]
        env = {
            e["name"]: e.get("value")
            for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env["CLEARANCE_LEASE_NAME"] == f"clearance-{service}"
        assert env["CLEARANCE_LEASE_NAMESPACE"] == "$(POD_NAMESPACE)"  # the Role's namespace
        names = {g.name for g in leases if g.service == service and g.verb in ("get", "update")}
        assert names == {env["CLEARANCE_LEASE_NAME"]}


def test_every_documented_grant_says_why() -> None:
    _, why = documented_grants()
    assert all(len(reason) > 10 for reason in why.values())
