"""Benchmark 1 (and 5): clearance latency of real requeue cycles, plus the 5 s polling baseline.

The whole system as deployed: :class:`~clearance.stack.LocalStack` runs nats-server,
``kubesim serve`` and the three services as separate processes. ``--appwrappers`` AppWrappers
cycle in parallel, each wrapping one Pod (minAvailable 1, requeue wait 1 s, pause 0) whose
container exits 1 shortly after it starts (kubesim's ``run-time``/``exit-code`` annotations):
the dispatcher requeues it after the wait, deletes the pod, the tracker confirms it gone,
publishes ``cleared``, and the dispatcher creates the next attempt's pod - for ever, until
enough cycles were measured.

Per cycle (AppWrapper, attempt N), on the servers' clocks (``tests.support.serverclock``):

* **removed** - commit time of the DELETED of the last attempt-N pod (kubesim write history);
* **cleared** - JetStream store time of ``cycle.cleared`` for attempt N;
* **created** - commit time of the ADDED of the first attempt-N+1 pod (write history);
* the dispatcher's status writes between the two commits (write history, by User-Agent).

Baseline: :class:`PollingConfirmer` does what MCAD v2 and the AppWrapper controller do - after
issuing the deletions, LIST the AppWrapper's objects, and if anything is left, look again
5 s later. It runs for real, beside Clearance, on the first ``--baseline-cycles`` teardowns
(starting at each ``teardown.started``), so it confirms the very same deletions. Its latency
is also derived analytically: a poll every P from the teardown start confirms P - d after a
deletion that took d, for d < P.

The services' idle and loaded footprint (benchmark 5) is read from ``/proc`` in the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
from tests.support.serverclock import (
    API_COMMIT,
    CLIENT_RECEIPT,
    JETSTREAM_STORED,
    Commit,
    CycleCommits,
    Intervals,
    commit_interval,
    cycle_commits,
    interval,
    removed_to_created,
    removed_to_stored,
    stored_to_created,
    writes_between,
)

from clearance import bus, events, labels, subjects
from clearance.kube import PODS, Kube, KubeConfig, Resource
from clearance.settings import CommonSettings
from clearance.stack import LocalStack, StackConfig

from .common import CpuWindow, MiB, distribution, percentile, progress, rss_bytes
from .hops import hops, pod_filter
from .observing import CycleFollower, RequestRates, Seen, cycle_filter, fetch_history
from .profiling import ProfiledStack, hot_functions, hot_subtrees

DISPATCHER_AGENT = "clearance-dispatcher/"

APPWRAPPERS = Resource("workload.codeflare.dev", "v1beta1", "appwrappers", "AppWrapper")
NAMESPACE = "default"
POLL_PERIOD = 5.0
STALL_SECONDS = 30.0
"""No cycle completing for this long ends the wait (the report says so)."""
WARMUP_CYCLES = 2
"""Each AppWrapper's first cycles are warm-up, not measured: they run right after every process
started, with all the gangs in exact lockstep (created together). They are reported on their
own (``warmup_*``), and every cycle together (``all_cycles_*``), beside the steady-state
figures the targets are judged on (docs/DECISIONS.md, "Collector pauses, lanes of LISTs, and
the benchmark's warm-up")."""

SERVER_RATE_LIMIT = 300
SERVER_RATE_BURST = 600
CLIENT_QPS = 200
"""Each service's client-side limit in this benchmark. 8 gangs cycling every ~1.6 s make the
dispatcher send ~20 requests per cycle, ~100/s: its default (100/s) would be the bottleneck,
so the benchmark sets the limit for its load, as an operator would, and shows it stays
below the API server's per-client limit."""
CLIENT_BURST = 400
KUBESIM_FLAGS: tuple[str, ...] = (
    "--pod-start-delay", "50ms",
    "--kubelet-termination-delay", "300ms",
    "--heartbeat-interval", "1s",
    "--scheduler-retry", "200ms",
    "--bookmark-interval", "10s",
    "--node-cpu", "32",
    # The API server's per-client limit (API Priority and Fairness stands in as a token
    # bucket per User-Agent = per service process): above it kubesim answers 429 with
    # Retry-After. The services run with an explicit client-side limit below it
    # (SERVICE_ENV); the report counts each service's requests, its peak rate and the 429s
    # it got.
    "--rate-limit", str(SERVER_RATE_LIMIT),
    "--rate-burst", str(SERVER_RATE_BURST),
    "--rate-limit-scope", "user-agent",
)  # fmt: skip

SERVICE_ENV: dict[str, str] = {
    # Production log level; INFO logs a line per step and would be part of what we measure.
    "CLEARANCE_LOG_LEVEL": "WARNING",
    "CLEARANCE_LEASE_DURATION": "3s",
    "CLEARANCE_LEASE_RETRY_PERIOD": "500ms",
    "CLEARANCE_LEASE_RETRY": "500ms",
    "CLEARANCE_NATS_RECONNECT_WAIT": "250ms",
    # Only periodic safety nets; the measured path is event-driven.
    "CLEARANCE_VERIFY_INTERVAL": "10s",
    "CLEARANCE_SCAN_INTERVAL": "1s",
    "CLEARANCE_MONITOR_INTERVAL": "5s",
    "CLEARANCE_QUEUE_SCAN_INTERVAL": "5s",
    "CLEARANCE_KUBE_QPS": str(CLIENT_QPS),
    "CLEARANCE_KUBE_BURST": str(CLIENT_BURST),
}


def _pod(name: str, *, node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "main",
                "image": "registry.example/trainer:1.0",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def appwrapper(name: str) -> dict[str, Any]:
    """A gang of two pods (minAvailable 2) of which one can never be scheduled.

    The first pod runs; the second waits for a node that does not exist. After the 1 s wait
    the dispatcher requeues, deletes both (the running one terminates gracefully, which takes
    kubesim's ``--kubelet-termination-delay``), and the cycle repeats.
    """
    items = [
        _pod(f"{name}-0"),
        _pod(f"{name}-1", node_selector={"kubernetes.io/hostname": "no-such-node"}),
    ]
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "priority": 5,
            "schedulingSpec": {
                "minAvailable": 2,
                "requeuing": {
                    "timeInSeconds": 1,
                    "growthType": "none",
                    "maxNumRequeuings": 0,
                    "pauseTimeInSeconds": 0,
                    "stuckAlertTimeInSeconds": 60,
                    "forceDeletionTimeInSeconds": 120,
                },
            },
            "resources": {
                "GenericItems": [
                    {
                        "replicas": 1,
                        "generictemplate": item,
                        "custompodresources": [
                            {"replicas": 1, "requests": {"cpu": "100m", "memory": "64Mi"}}
                        ],
                    }
                    for item in items
                ]
            },
        },
    }


class PollingConfirmer:
    """The baseline: confirm a teardown by LISTing every ``period`` seconds from its start."""

    def __init__(self, kube: Kube, *, period: float, limit: int) -> None:
        self.kube = kube
        self.period = period
        self.limit = limit
        self.started = 0
        self.confirmed: dict[tuple[str, int], tuple[float, float, int]] = {}
        """(aw, attempt) → (teardown start, confirmation time, polls)."""
        self._tasks: set[asyncio.Task[None]] = set()

    def on_event(self, seen: Seen) -> None:
        event = seen.event
        if isinstance(event, events.CycleTeardownStarted) and self.started < self.limit:
            self.started += 1
            task = asyncio.create_task(self._poll(event.appwrapper.name, event.attempt))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _poll(self, aw: str, attempt: int) -> None:
        began = time.time()
        polls = 0
        while True:
            polls += 1
            listed = await self.kube.list(
                PODS, namespace=NAMESPACE, label_selector=labels.selector_for(aw)
            )
            old = [
                raw
                for raw in listed.items
                if (a := labels.attempt_of(_labels(raw))) is not None and a <= attempt
            ]
            if not old:
                self.confirmed[(aw, attempt)] = (began, time.time(), polls)
                return
            await asyncio.sleep(self.period)

    @property
    def pending(self) -> int:
        return len(self._tasks)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _close(nc: Any) -> None:
    """Drain, bounded: a drain must never hold the benchmark up."""
    try:
        await asyncio.wait_for(nc.drain(), 5)
    except Exception:
        with contextlib.suppress(Exception):
            await nc.close()


async def _diagnose(kube: Kube, stack: LocalStack) -> dict[str, Any]:
    """Phases of the AppWrappers and liveness of each process, when the cycles stalled."""
    out: dict[str, Any] = {
        "processes_running": {
            name: proc.running
            for name, proc in {**stack.services, "kubesim": stack.kubesim}.items()
            if proc is not None
        }
    }
    with contextlib.suppress(Exception):
        listed = await asyncio.wait_for(kube.list(APPWRAPPERS, namespace=NAMESPACE), 10)
        phases: dict[str, int] = {}
        for raw in listed.items:
            status = msgspec.json.decode(raw).get("status") or {}
            phase = (status.get("clearance") or {}).get("phase") or "None"
            phases[phase] = phases.get(phase, 0) + 1
        out["appwrapper_phases"] = phases
    return out


class _LabelsMeta(msgspec.Struct):
    labels: dict[str, str] = {}


class _Labelled(msgspec.Struct):
    metadata: _LabelsMeta


_LABELLED = msgspec.json.Decoder(_Labelled)


def _labels(raw: Any) -> dict[str, str]:
    return _LABELLED.decode(raw).metadata.labels


class Sampler:
    """RSS peak and CPU of each service process while the load runs."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.peak: dict[str, int] = dict.fromkeys(pids, 0)
        self.windows: dict[str, CpuWindow] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> Sampler:
        self.windows = {name: CpuWindow(pid).start() for name, pid in self.pids.items()}
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        while True:
            for name, pid in self.pids.items():
                with contextlib.suppress(OSError):
                    self.peak[name] = max(self.peak[name], rss_bytes(pid))
            await asyncio.sleep(0.25)

    async def stop(self) -> dict[str, dict[str, float]]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return {
            name: {
                "rss_peak_mib": round(self.peak[name] / MiB, 1),
                "cpu_percent_of_core": round(self.windows[name].percent(), 1),
            }
            for name in self.pids
        }


async def idle_footprint(pids: dict[str, int], *, seconds: float) -> dict[str, dict[str, float]]:
    windows = {name: CpuWindow(pid).start() for name, pid in pids.items()}
    await asyncio.sleep(seconds)
    return {
        name: {
            "rss_mib": round(rss_bytes(pid) / MiB, 1),
            "cpu_percent_of_core": round(windows[name].percent(), 2),
        }
        for name, pid in pids.items()
    }


async def run(
    *,
    cycles: int,
    appwrappers: int,
    baseline_cycles: int,
    profile: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One measured run; ``profile`` names services to run under pyinstrument instead;
    ``env`` overrides service settings (an experiment, e.g. more dispatcher workers)."""
    workdir = Path(tempfile.mkdtemp(prefix="clearance-bench-"))
    config = StackConfig(
        workdir=workdir,
        nodes=2,
        kubesim_flags=KUBESIM_FLAGS,
        env={**SERVICE_ENV, **(env or {})},
        traces=False,
    )
    stack = (
        ProfiledStack(config, profiled=profile, outdir=workdir / "profiles")
        if profile
        else LocalStack(config)
    )
    what = f" ({', '.join(profile)} under pyinstrument)" if profile else ""
    progress(f"clearance: starting nats-server, kubesim and the three services{what}")
    async with stack:
        pids = {name: proc.pid for name, proc in stack.services.items() if proc.pid}
        assert stack.kubesim is not None and stack.kubesim.pid and stack.nats and stack.nats.pid
        others = {"kubesim": stack.kubesim.pid, "nats-server": stack.nats.pid}
        await asyncio.sleep(2.0)  # let start-up work (first LISTs, provisioning) settle
        progress("clearance: measuring idle footprint (5 s)")
        idle = await idle_footprint({**pids, **others}, seconds=5.0)

        kube = await Kube.connect(KubeConfig(kubeconfig=str(stack.kubeconfig)))
        nc = await bus.connect(
            CommonSettings(nats_url=stack.nats_url), name="bench", first_connect_timeout=10
        )
        poller = PollingConfirmer(kube, period=POLL_PERIOD, limit=baseline_cycles)
        follower = await CycleFollower(
            nc, cycle_filter(NAMESPACE), on_event=poller.on_event
        ).start()
        pod_events = await CycleFollower(
            nc, pod_filter(NAMESPACE), stream=subjects.KUBE_STREAM
        ).start()
        names = [f"cycle-{i:02d}" for i in range(appwrappers)]
        warmup_cycles = appwrappers * WARMUP_CYCLES
        sampler = Sampler({**pids, **others}).start()
        rates = await RequestRates(stack.kubesim_url).start()
        diagnostics: dict[str, Any] = {}
        api_requests: dict[str, Any] = {}
        started = time.monotonic()
        try:
            for name in names:
                await kube.create(APPWRAPPERS, appwrapper(name), namespace=NAMESPACE)
            progress(f"clearance: {appwrappers} AppWrappers cycling; waiting for {cycles} cycles")
            last_report = 0
            last_count, last_change = 0, time.monotonic()
            stalled = False

            def done() -> bool:
                nonlocal last_report, last_count, last_change, stalled
                n = len(follower.of(events.CycleRedispatched))
                if n >= last_report + 50:
                    last_report = n - n % 50
                    progress(
                        f"clearance: {n}/{cycles + warmup_cycles} cycles ({warmup_cycles} warm-up)"
                    )
                if n != last_count:
                    last_count, last_change = n, time.monotonic()
                elif time.monotonic() - last_change > STALL_SECONDS:
                    stalled = True  # no cycle completed for a long time: report what we have
                    return True
                return n >= cycles + warmup_cycles and poller.pending == 0

            finished = await follower.wait_until(done, timeout=max(120.0, cycles * 1.0))
            if stalled:
                progress(f"clearance: STALLED at {last_count} cycles; collecting diagnostics")
                diagnostics = await _diagnose(kube, stack)
            finished = finished and not stalled
            load_seconds = time.monotonic() - started
            loaded = await sampler.stop()
            api_requests = await rates.stop()
            for name in names:
                with contextlib.suppress(Exception):
                    await kube.delete(APPWRAPPERS, name, namespace=NAMESPACE)
            await asyncio.sleep(0.5)
            history = await fetch_history(stack.kubesim_url, namespace=NAMESPACE)
        finally:
            for step in (poller.stop(), follower.stop(), pod_events.stop()):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(step, 10)
            await kube.close()
            await _close(nc)
        progress("clearance: stopping the stack")

    result: dict[str, Any] = analyse(
        follower=follower,
        pod_events=pod_events,
        history=history,
        poller=poller,
        finished=finished,
        load_seconds=load_seconds,
        appwrappers=appwrappers,
        idle=idle,
        loaded=loaded,
    )
    if api_requests:
        api_requests["cycles_per_second"] = result.get("cycles_per_second")
        api_requests["client_qps"] = (env or {}).get("CLEARANCE_KUBE_QPS", CLIENT_QPS)
        api_requests["client_burst"] = (env or {}).get("CLEARANCE_KUBE_BURST", CLIENT_BURST)
    result["api_requests"] = api_requests
    if diagnostics:
        result["stall_diagnostics"] = diagnostics
    if isinstance(stack, ProfiledStack):
        progress("clearance: reading the profiles")
        result["profile"] = {}
        for name in profile:
            session = stack.session_path(name)
            if session.exists():
                result["profile"][name] = {
                    "session": str(session),
                    "hot_functions": hot_functions(session),
                    "hot_project_functions": hot_subtrees(
                        session, prefixes=(f"clearance_{name}", "clearance/")
                    ),
                }
    return result


def analyse(
    *,
    follower: CycleFollower,
    pod_events: CycleFollower | None = None,
    history: list[Commit],
    poller: PollingConfirmer,
    finished: bool,
    load_seconds: float,
    appwrappers: int,
    idle: dict[str, Any],
    loaded: dict[str, Any],
) -> dict[str, Any]:
    """Every latency from the servers' clocks (:mod:`support.serverclock`): API commits from
    kubesim's write history, ``cleared`` / ``teardown.started`` from JetStream store times."""
    commits = cycle_commits(history)
    cleared = {
        (s.event.appwrapper.name, s.event.attempt): s.stored
        for s in follower.of(events.CycleCleared)
        if isinstance(s.event, events.CycleCleared)
    }
    teardown = {
        (s.event.appwrapper.name, s.event.attempt): s.stored
        for s in follower.of(events.CycleTeardownStarted)
        if isinstance(s.event, events.CycleTeardownStarted)
    }
    # Only cycles whose cleared was seen count (the cycle cut off at the end is left out);
    # each AppWrapper's first WARMUP_CYCLES are reported apart from the measured ones.
    timed = {key: at for key, at in cleared.items() if key in commits.last_removed}
    measured = {key: at for key, at in timed.items() if key[1] > WARMUP_CYCLES}
    warmup = {key: at for key, at in timed.items() if key[1] <= WARMUP_CYCLES}
    to_created = removed_to_created(_only(commits, measured))
    warmup_created = removed_to_created(_only(commits, warmup))
    to_cleared = removed_to_stored(commits, measured)
    warmup_cleared = removed_to_stored(commits, warmup)
    all_created = to_created.values + warmup_created.values
    cleared_to_created = stored_to_created(commits, measured)
    teardown_to_deleted = Intervals()
    for key, at in teardown.items():
        removed = commits.last_removed.get(key)
        if removed is not None and key in measured:
            teardown_to_deleted.add(interval(at, removed.time), what=f"{key}: removed first")
    writes: list[float] = []
    to_first_write = Intervals()
    last_write_to_created = Intervals()
    for (aw, attempt), at in sorted(measured.items()):
        removed = commits.last_removed[(aw, attempt)]
        created = commits.first_created.get((aw, attempt + 1))
        if created is None:
            continue
        between = [
            c
            for c in writes_between(commits, aw, after=removed, before=created)
            if DISPATCHER_AGENT in c.user_agent
        ]
        writes.append(float(len(between)))
        if between:
            to_first_write.add(interval(at, between[0].time), what=f"{aw} {attempt}")
            last_write_to_created.add(commit_interval(between[-1], created), what=f"{aw} {attempt}")

    baseline: list[float] = []
    baseline_polls: list[int] = []
    baseline_order = 0
    for key, (_began, confirmed, polls) in poller.confirmed.items():
        removed = commits.last_removed.get(key)
        if removed is not None:
            value = interval(removed.time, confirmed)
            if value is None:
                baseline_order += 1
                continue
            baseline.append(value)
            baseline_polls.append(polls)
    # Analytical: polls at teardown start + k·P; the deletion lands d after the start, so the
    # first clean poll is at P (d < P) and confirms P - d after the deletion.
    analytical = [
        POLL_PERIOD * 1000 - d for d in teardown_to_deleted.values if d < POLL_PERIOD * 1000
    ]
    violations = to_created.out_of_order
    order_errors = {
        "deleted_to_cleared": len(to_cleared.out_of_order),
        "cleared_to_redispatch_create": len(cleared_to_created.out_of_order),
        "teardown_started_to_deleted": len(teardown_to_deleted.out_of_order),
        "baseline": baseline_order,
    }
    return {
        "finished": finished,
        "appwrappers_in_parallel": appwrappers,
        "cycles_measured": len(to_created.values),
        "load_seconds": round(load_seconds, 1),
        # the rate of the whole load (warm-up included): requests per cycle are divided by it
        "cycles_per_second": (round(len(all_created) / load_seconds, 2) if load_seconds else 0),
        "clock_sources": {
            "deleted": API_COMMIT + ": the DELETED of the last attempt-N object",
            "redispatch_create": API_COMMIT + ": the ADDED of the first attempt-N+1 object",
            "cleared": JETSTREAM_STORED + " of cycle.cleared for attempt N",
            "deleted_event": JETSTREAM_STORED
            + " of the last attempt-N pod's DELETED in CLEARANCE_KUBE (the watcher's publish)",
            "teardown_started": JETSTREAM_STORED + " of cycle.teardown.started",
            "baseline_confirmed": CLIENT_RECEIPT + " of the poll's empty LIST",
            "dispatcher_writes": API_COMMIT + " of the dispatcher's AppWrapper writes",
        },
        "warmup_cycles_per_appwrapper": WARMUP_CYCLES,
        "deleted_to_cleared_ms": distribution(to_cleared.values),
        "warmup_deleted_to_cleared_ms": distribution(warmup_cleared.values),
        "all_cycles_deleted_to_cleared_ms": distribution(to_cleared.values + warmup_cleared.values),
        "warmup_deleted_to_redispatch_create_ms": distribution(warmup_created.values),
        "all_cycles_deleted_to_redispatch_create_ms": distribution(all_created),
        "deleted_to_redispatch_create_ms": distribution(to_created.values),
        "cleared_to_redispatch_create_ms": distribution(cleared_to_created.values),
        "teardown_started_to_deleted_ms": distribution(teardown_to_deleted.values),
        "deleted_to_cleared_hops_ms": (
            hops(pods=pod_events, last_removed=commits.last_removed, cleared=measured)
            if pod_events is not None
            else {}
        ),
        "dispatcher_breakdown_ms": {
            "cleared_stored_to_first_status_write": distribution(to_first_write.values),
            "last_status_write_to_pod_created": distribution(last_write_to_created.values),
            "status_writes_per_redispatch": distribution(writes, digits=1),
        },
        "safety_violations": violations,
        "clock_order_errors": order_errors,
        "baseline_poll_5s": {
            "measured_deleted_to_confirmed_ms": distribution(baseline),
            "measured_polls_per_teardown": distribution(
                [float(p) for p in baseline_polls], digits=0
            ),
            "analytical_deleted_to_confirmed_ms": distribution(analytical),
        },
        "speedup": _speedups(
            baseline=baseline,
            analytical=analytical,
            cleared=to_cleared.values,
            created=to_created.values,
        ),
        "footprint": {"idle": idle, "loaded": loaded},
    }


def _only(commits: CycleCommits, keys: Any) -> CycleCommits:
    """``commits`` restricted to the cycles in ``keys`` (their removals; creations kept)."""
    return CycleCommits(
        last_removed={k: v for k, v in commits.last_removed.items() if k in keys},
        first_created=commits.first_created,
        writes_by=commits.writes_by,
    )


def _speedups(
    *, baseline: list[float], analytical: list[float], cleared: list[float], created: list[float]
) -> dict[str, float | None]:
    """Polling ÷ Clearance at the median and at p99, for → cleared and → redispatch."""
    out: dict[str, float | None] = {}
    for pct in (50, 99):
        for base_name, base in (("measured", baseline), ("analytical", analytical)):
            for mine_name, mine in (("cleared", cleared), ("redispatch", created)):
                key = f"p{pct}_{base_name}_baseline_vs_{mine_name}"
                if base and mine and percentile(mine, pct) > 0:
                    out[key] = round(percentile(base, pct) / percentile(mine, pct), 1)
                else:
                    out[key] = None
    return out
