"""Bottleneck and proposed fix for each target a run misses (written from the profiles).

The report prints these only for targets the run actually missed, next to the profile tables
and breakdowns of that run, so a reader can check the diagnosis against the evidence.
"""

from __future__ import annotations

NOTES: dict[str, dict[str, str]] = {
    "redispatch_p99": {
        "bottleneck": (
            "The dispatcher's redispatch path is a chain of sequential round trips, and on "
            "this shared two-core machine every one of them has a long tail. After `cleared` "
            "is stored: the dispatcher's pull consumer fetches it and PATCHes the status to "
            "Queued (stage a); a queue scan admits the AppWrapper, a worker picks it up again, "
            "LISTs older pods (quorum read) and PATCHes the status to Dispatching (stage b); "
            "the item POST creates the pod (stage c). The breakdown shows all three stages "
            "with p99s of tens to a hundred-plus ms while their minima are 0-15 ms: the time "
            "is waiting, not work. Each round trip crosses into kubesim or nats-server, "
            "separate processes that share the two cores with the other services (and with "
            "other work on this machine: see the load average); in the profiles `socket.send` "
            "carries a large share of wall time, i.e. the sender is preempted by the receiver "
            "it woke. The dispatcher's own CPU goes mostly to kubernetes-asyncio's "
            "`ApiClient.__call_api` per request. The work queue is a secondary factor at this "
            "load: the experiment with `CLEARANCE_WORKERS=16` trims stage (b)'s tail but not "
            "the total p99; with 16 AppWrappers in parallel (exploratory runs before this "
            "report) the 4 default workers did dominate stage (b) (p50 228 ms / p95 856 ms "
            "with 4 workers, p50 90 ms / p95 176 ms with 16)."
        ),
        "fix": (
            "Shorten the chain. (1) Handle a `cleared` of the current attempt by dispatching "
            "inline when the pause is 0 and an inline capacity plan admits the AppWrapper: one "
            "status PATCH straight to Dispatching (Queued and Dispatching merged), no scan hop, "
            "no second work-queue pass. (2) Skip the `_older_pods` LIST when the `cleared` "
            "event is newer than the dispatcher's pod cache (the tracker's quorum LIST just "
            "proved it; keep the LIST after a restart). That leaves PATCH + POST: two round "
            "trips instead of four plus a scan. (3) Give AppWrappers with a fresh `cleared` "
            "priority in the work queue and raise the default `CLEARANCE_WORKERS` for the "
            "tail under load. (4) Call the API through one aiohttp session in "
            "`clearance.kube` instead of kubernetes-asyncio's `call_api` (CPU per request). "
            "Then measure again on a machine that is not shared: the p99 of a two-round-trip "
            "path on an idle machine is a few ms."
        ),
    },
    "speedup": {
        "bottleneck": (
            "The ratio is polling latency ÷ Clearance's deletion → cleared median. Polling "
            "is ~4.5 s here because the deletions take ~0.3-0.5 s after the teardown starts "
            "(P - d); Clearance's deletion → cleared median moves with the load: "
            "watcher relay of the DELETED (publish with PubAck), the tracker's pull consumer "
            "(fetch batches, CAS write of the record), then a verification quorum LIST and GET "
            "of unseen objects against the API and two more KV writes before `cleared` is "
            "published - five processes on two shared cores. At 4 AppWrappers in parallel the "
            "median was 28 ms (160x), at 16 it was 40-85 ms."
        ),
        "fix": (
            "Cut the round trips after the last DELETED: write `clearing` in the same CAS as "
            "the last confirmation when the verification LIST can be skipped (every member "
            "confirmed by a DELETED with resourceVersion ≥ the teardown's LIST "
            "resourceVersion), then verify asynchronously; publish `cleared` before the "
            "`published` flag write. On the watcher side publish DELETED events ahead of "
            "MODIFIED ones (a priority lane) so a busy relay does not delay a deletion."
        ),
    },
    "teardowns": {
        "bottleneck": (
            "The tracker process is CPU-bound during the burst (its CPU seconds during the "
            "burst ≈ the burst's wall time). The profile: `Tracker.verify` → `Tracker._get` "
            "(`Kube.get` through kubernetes-asyncio's `ApiClient.__call_api`) is the largest "
            "share - records whose periodic verification falls due while their DELETED events "
            "still wait in the consumer backlog are verified by a LIST plus one sequential GET "
            "per open object (8 per teardown); then `_report_confirmations` (a "
            "`deletion.confirmed` audit event with its own span and PubAck per object: 8,000 "
            "extra JetStream publishes); then `_list`; the kube-event consumer itself "
            "(CONSUMER span per message, CAS writes) comes after. The consumer's concurrency "
            "(16) and the per-object GETs make the backlog drain at only ~50-70 teardowns/s "
            "in these runs."
        ),
        "fix": (
            "(1) Verification: when a LIST shows none of a teardown's open objects, confirm "
            "them from one LIST of the namespace without the label selector (or GETs issued "
            "concurrently), not N sequential GETs; skip periodic verification of a record "
            "while kube events for it are queued (the backlog will confirm it). (2) Publish "
            "`deletion.confirmed` audit events as one batch event per teardown, or without "
            "awaiting each PubAck (they are audit, the KV record holds the fact). (3) Raise "
            "the kube consumer's concurrency (e.g. 64) and fetch in larger batches. (4) Use "
            "aiohttp directly for API calls (see the dispatcher note)."
        ),
    },
    "idle_rss": {
        "bottleneck": (
            "Importing `kubernetes_asyncio.client`: its package `__init__` imports every "
            "generated model and API class (~700 modules) even though Clearance only uses "
            "`ApiClient` as an HTTP transport and `config` to read kubeconfigs; the footprint "
            "table shows it adds ~39 MiB on top of the other libraries (~64 MiB alone), about "
            "half of each service's idle RSS. The other large step is `nats` (~23 MiB, mostly "
            "aiohttp and its dependencies, which are needed anyway)."
        ),
        "fix": (
            "Stop importing `kubernetes_asyncio.client` in the services: load kubeconfig / "
            "in-cluster config with a small loader (token, client certificates, CA, exec "
            "plugin via `kubernetes_asyncio.config` imported lazily only when an exec/auth "
            "plugin is configured) and make requests with one shared aiohttp session in "
            "`clearance.kube` (it already speaks raw JSON). Expected idle RSS ≈ 45-50 MiB per "
            "service."
        ),
    },
    "watcher_rate": {
        "bottleneck": "See the watcher profile above.",
        "fix": "See the watcher profile above.",
    },
    "watcher_vs_model": {
        "bottleneck": "See the watcher profile above.",
        "fix": "See the watcher profile above.",
    },
    "tracker_memory": {
        "bottleneck": (
            "Per tracked object the tracker keeps a `TrackedObject` struct in the cached "
            "record and the KV watch keeps the encoded record."
        ),
        "fix": "Intern repeated strings (kind, apiVersion, namespace) and drop the raw copy.",
    },
}

OBSERVATIONS: dict[str, str] = {
    "watcher_publish": (
        "The watcher's decode path is ~60x the model path, but once each event is published "
        "with a PubAck the relay runs at a few thousand events/s per core: in the watcher "
        "profile a quarter to a half of `bus.publish` is OpenTelemetry's `start_as_current_span` "
        "(PRODUCER span + context manager machinery, even with the no-op provider of the "
        "benchmark process) and most of the rest in nats-py's request/response per message "
        "(`_request_new_style`: an inbox future per PubAck). Fix: publish kube events with "
        "`js.publish_async`-style pipelining (send, collect PubAcks as they come) and create "
        "PRODUCER spans only for sampled traces or only for cycle/alert events - kube events "
        "are high-volume state, not cycle steps."
    ),
}
