"""AppWrappers generated from the CRD schema, and the judgement of what became of them.

Generation (Hypothesis): valid, boundary and hostile values in every integer field (0, ±1,
2^31, int64 extremes, 30 days ± 1 s), unicode and control characters in every string, names of
up to 253 characters, templates the dispatcher must refuse (no kind, an unserved kind, another
namespace, no name), unparsable quantities and, for one AppWrapper in forty, a huge list of
30-50 generic items. One Hypothesis example is one AppWrapper, so Hypothesis keeps the examples
distinct; the huge ones are placed by index so that a burst never holds more than one.

Judgement (:func:`judge`) uses only kubesim's write history with AppWrapper bodies kept
(``audit_objects``): each AppWrapper's 5 s run from the commit of its creation to the first
commit of it Dispatched, or Failed with a reason. Neither the services nor the test's own
watch can move either end.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

INT64 = (-(2**63), 2**63 - 1)
BOUNDARY = [0, 1, -1, 30 * 86400, 30 * 86400 + 1, 2**31 - 1, 2**31, -(2**31), *INT64]
HUGE_EVERY = 40
"""One AppWrapper in this many carries a huge item list (30-50 items)."""

hostile_int = st.one_of(st.sampled_from(BOUNDARY), st.integers(*INT64), st.integers(0, 600))
short_text = st.text(max_size=12)  # unicode, control characters, empty
dns = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=30).map(
    lambda s: s.strip("-") or "x"
)
key_text = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCZ0123456789-._", min_size=1, max_size=12)
quantity = st.one_of(
    st.sampled_from(
        ["0", "1m", "10m", "lots", "1e400", "1e1000000", "9223372036854775807Ki", "-1", "1.5"]
    ),
    short_text,
    st.integers(-1, 2),
)


def _configmap(name: str) -> st.SearchStrategy[dict[str, Any]]:
    data = st.dictionaries(key_text, st.text(max_size=40), max_size=4)
    return st.builds(
        lambda d: {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": d},
        data,
    )


def _pod(name: str) -> dict[str, Any]:
    container = {
        "name": "c",
        "image": "busybox:1.36",
        "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}},
    }
    spec = {"restartPolicy": "Never", "containers": [container]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _odd(name: str) -> st.SearchStrategy[dict[str, Any]]:
    """Templates the dispatcher must refuse: no kind, unserved kind, another namespace, no name."""
    return st.sampled_from(
        [
            {"apiVersion": "v1", "metadata": {"name": name}},
            {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "x"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "g-"}},
        ]
    )


def _item(name: str) -> st.SearchStrategy[dict[str, Any]]:
    template = st.one_of(
        _configmap(name), _configmap(name), _configmap(name), st.just(_pod(name)), _odd(name)
    )
    resources = st.one_of(
        st.fixed_dictionaries({"replicas": hostile_int, "requests": st.just({"cpu": "0"})}),
        st.fixed_dictionaries(
            {"replicas": st.integers(0, 3), "requests": st.fixed_dictionaries({"cpu": quantity})}
        ),
    )
    return st.fixed_dictionaries(
        {"generictemplate": template},
        optional={
            "custompodresources": st.lists(resources, max_size=3),
            "completionstatus": st.one_of(st.sampled_from(["Complete", "", ","]), short_text),
            "replicas": hostile_int,
        },
    )


def _renamed(item: dict[str, Any], name: str) -> dict[str, Any]:
    template = dict(item["generictemplate"])
    if "name" not in template.get("metadata", {}):  # the nameless template stays nameless
        return item
    template["metadata"] = {**template["metadata"], "name": name}
    return {**item, "generictemplate": template}


_REQUEUING_INTS = (
    "timeInSeconds",
    "initialTimeInSeconds",
    "maxTimeInSeconds",
    "maxNumRequeuings",
    "pauseTimeInSeconds",
    "forceDeletionTimeInSeconds",
    "stuckAlertTimeInSeconds",
)


@st.composite
def appwrappers(draw: st.DrawFn) -> dict[str, Any]:
    """One AppWrapper, with placeholder names (:func:`numbered` makes them unique) and one
    extra item under ``x-huge`` that :func:`numbered` may repeat into a huge list."""
    stem = draw(st.one_of(dns, st.integers(100, 253).map(lambda n: "l" * n)))
    items = [draw(_item("i")) for _ in range(draw(st.integers(0, 3)))]
    huge = (draw(_item("i")), draw(st.integers(30, 50)))
    requeuing = draw(
        st.fixed_dictionaries(
            {},
            optional={key: hostile_int for key in _REQUEUING_INTS}
            | {
                "growthType": st.one_of(
                    st.sampled_from(["exponential", "linear", "none"]), short_text
                ),
                "finalizerRemoval": st.one_of(
                    st.sampled_from(["Never", "AfterForceDeletion"]), short_text
                ),
            },
        )
    )
    scheduling = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "minAvailable": hostile_int,
                "dispatchDuration": st.fixed_dictionaries({}, optional={"limit": hostile_int}),
            },
        )
    )
    scheduling["requeuing"] = requeuing
    spec: dict[str, Any] = {"schedulingSpec": scheduling, "resources": {"GenericItems": items}}
    if draw(st.booleans()):
        spec["priority"] = draw(hostile_int)
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": stem},
        "spec": spec,
        "x-huge": huge,
    }


def numbered(drawn: dict[str, Any], index: int) -> dict[str, Any]:
    """AppWrapper number ``index``: unique names; a huge item list when ``index`` says so."""
    body = {k: v for k, v in drawn.items() if k != "x-huge"}
    body["metadata"] = {"name": f"f{index}-{drawn['metadata']['name']}"[:253].rstrip("-")}
    resources = body["spec"]["resources"]
    if index % HUGE_EVERY == HUGE_EVERY // 2:
        item, count = drawn["x-huge"]
        resources["GenericItems"] = [item] * count
    resources["GenericItems"] = [
        _renamed(item, f"i{index}-{j}") for j, item in enumerate(resources["GenericItems"])
    ]
    return body


def generate(count: int) -> list[dict[str, Any]]:
    """``count`` distinct AppWrappers drawn by Hypothesis (derandomized: the same every run)."""
    drawn: list[dict[str, Any]] = []

    @settings(
        max_examples=count,
        phases=[Phase.generate],
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(st.data())
    def draw(data: st.DataObject) -> None:
        drawn.append(data.draw(appwrappers()))

    draw()
    return [numbered(body, index) for index, body in enumerate(drawn)]


def generate_fresh(count: int) -> list[dict[str, Any]]:
    """:func:`generate` in a fresh interpreter: the same AppWrappers whatever ran before.

    In a pytest worker that ran other tests first, the same derandomized draw came out
    different (91 of 390 refused by the API instead of 75), so the accepted count the fuzz
    test asserts depended on test order."""
    code = (
        "import json, sys\n"
        "from tests.support.fuzz_appwrappers import generate\n"
        "json.dump(generate(int(sys.argv[1])), sys.stdout)\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code, str(count)],
        cwd=root,
        capture_output=True,
        check=True,
        timeout=120,
    )
    drawn: list[dict[str, Any]] = json.loads(done.stdout)
    return drawn


def settled(raw: Mapping[str, Any]) -> str | None:
    """Dispatched, or Failed with its condition and a reason: the outcome, else None."""
    status = raw.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    failed = conditions.get("Failed") or {}
    if status.get("state") == "Failed" and failed.get("status") == "True" and failed.get("reason"):
        return f"Failed/{failed['reason']}"
    if (conditions.get("Dispatched") or {}).get("status") == "True":
        return "Dispatched"
    return None


@dataclass
class Verdict:
    """What became of each AppWrapper, from the API server's commits alone."""

    outcomes: dict[str, int] = field(default_factory=dict)
    """Outcome (``Dispatched``, ``Failed/<reason>``) → AppWrappers."""
    late: dict[str, str] = field(default_factory=dict)
    """Name → what happened instead (never settled, or settled after the bound)."""
    latencies: list[float] = field(default_factory=list)
    """Seconds from creation to settled, of those that settled."""

    def summary(self) -> str:
        ordered = sorted(self.latencies)
        p50 = ordered[len(ordered) // 2] if ordered else 0.0
        worst = ordered[-1] if ordered else 0.0
        return (
            f"{sum(self.outcomes.values())} settled {self.outcomes}; {len(self.late)} late; "
            f"creation → settled p50 {p50:.2f}s max {worst:.2f}s"
        )


def judge(history: Iterable[Mapping[str, Any]], names: Iterable[str], *, within: float) -> Verdict:
    """Each of ``names`` must be settled within ``within`` seconds of its ADDED commit.

    ``history``: ``GET /kubesim/v1/history?kind=AppWrapper`` entries with their ``object``.
    """
    created: dict[str, float] = {}
    settled_at: dict[str, tuple[float, str]] = {}
    last: dict[str, Mapping[str, Any]] = {}
    for entry in sorted(history, key=lambda e: int(e["rv"])):
        name = str(entry["name"])
        if entry["type"] == "ADDED":
            created.setdefault(name, float(entry["time"]))
        body = entry.get("object") or {}
        last[name] = body
        outcome = settled(body)
        if outcome and name not in settled_at:
            settled_at[name] = (float(entry["time"]), outcome)
    verdict = Verdict()
    for name in names:
        if name not in created:
            verdict.late[name] = "no creation in the write history"
            continue
        if name not in settled_at:
            body = last.get(name) or {}
            verdict.late[name] = (
                f"never settled; last status {body.get('status')}; spec {body.get('spec')}"[:2000]
            )
            continue
        at, outcome = settled_at[name]
        verdict.outcomes[outcome] = verdict.outcomes.get(outcome, 0) + 1
        verdict.latencies.append(at - created[name])
        if at - created[name] > within:
            verdict.late[name] = f"{outcome} after {at - created[name]:.2f}s"
    return verdict
