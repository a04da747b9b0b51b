"""Bottleneck and proposed fix for each target a run misses (written from the profiles).

The report prints these only for targets the run actually missed, next to the profile tables
and breakdowns of that run, so a reader can check the diagnosis against the evidence.
"""

from __future__ import annotations

NOTES: dict[str, dict[str, str]] = {
    "redispatch_p99": {
        "bottleneck": (
            "In this run the dispatcher waited, it did not work: its profile shows ~1.3 s of "
            "CPU over the whole profiled run, cycles/s fell to 2.3 (5.0-5.2 in the quick runs "
            "of the same day made before the client-side rate limit landed) and cleared → "
            "created rose from p50 14 ms / p99 37 ms (quick run, one status write per "
            "redispatch) to p50 ~0.8 s with two writes per redispatch. The likely cause is "
            "the new client-side rate limit (CLEARANCE_KUBE_QPS 50, burst 100): 8 AppWrappers "
            "cycling every ~1.5 s need ~12 API requests per cycle (status writes, the LIST, "
            "DELETEs, POSTs), i.e. above 50 requests/s, so every request queues behind the "
            "token bucket; waiting time is not in a sampling profile, which is why the "
            "profile shows little. Confirmed right after this run (same machine, 08:18 UTC, "
            "60 cycles each): default limit 2.24 cycles/s, removal → created p50 892 / p99 "
            "1,493 ms, 2 status writes per redispatch; CLEARANCE_KUBE_QPS=0 4.98 cycles/s, "
            "p50 61 / p99 271 ms, 1 write per redispatch."
        ),
        "fix": (
            "Run this benchmark with the limit set for its load (e.g. CLEARANCE_KUBE_QPS=200 "
            "with kubesim's --rate-limit above it) and read the waiting from "
            "`Kube.manners.bucket.waited` (export it as a metric); then re-check that the "
            "on-cleared dispatch takes one write. The remaining fixes: skip the safety-belt "
            "LIST when the pod cache is newer than the `cleared`; one aiohttp session instead "
            "of kubernetes-asyncio's `call_api`."
        ),
    },
    "cleared_p99": {
        "bottleneck": (
            "Removal → cleared is the watcher relaying the DELETED (pipelined publish now), "
            "the tracker's pull consumer (fetch, decode, CAS write of the record), then the "
            "final quorum LIST (started when the DELETED is seen), the CAS of `clearing` and "
            "the `cleared` publish with its PubAck: four round trips across three processes "
            "after the commit. The median is ~15 ms; the p99 is set by scheduling stalls on "
            "the shared cores (see the load average) - in the tracker profile the time is in "
            "the consumer and `Kube.request`, not in Clearance's own logic."
        ),
        "fix": (
            "Write `clearing` in the same CAS as the last confirmation when the DELETED's "
            "resourceVersion is at or past the teardown's LIST resourceVersion and verify "
            "afterwards; publish `cleared` before the `published` flag write (already); give "
            "the tracker's kube consumer a dedicated connection so a backlog of MODIFIED events "
            "cannot delay a DELETED."
        ),
    },
    "speedup_p99": {
        "bottleneck": (
            "The polling baseline is ~4.7 s at every percentile (P - deletion delay), so the "
            "p99 ratio is 4.7 s ÷ Clearance's removal → cleared p99: it misses exactly when "
            "that p99 exceeds ~47 ms (see the note above: scheduling stalls on shared cores)."
        ),
        "fix": "The removal → cleared fixes above; the median ratio is ~300x.",
    },
    "speedup": {
        "bottleneck": "See removal → cleared.",
        "fix": "See removal → cleared.",
    },
    "teardowns": {
        "bottleneck": (
            "The tracker process is CPU-bound during the burst (~0.8-0.95 ms of tracker CPU "
            "per DELETED on the shared 2-core machine, 1,000 x 8). Profile (pyinstrument, "
            "self time): `socket.send` under nats-py's `_flusher` is the largest single item "
            "(~12 % of busy time: one flush per KV CAS request, ack, fetch and publish), then "
            "msgspec decode (records from the KV watch, LIST items, events), OpenTelemetry "
            "span creation (consumer span per message, `deletion.confirmed` span per object), "
            "aiohttp's per-request `to_thread` in the kube client, and the event loop's own "
            "task switching. Per DELETED: consumer span + decode + ack, a group-committed CAS "
            "of the record (usually 2 writes per teardown); per teardown: the final LIST "
            "(coalesced per namespace: ~1 per 20 teardowns), the verification CAS, `cleared` "
            "and the published-mark CAS, and 1-2 batched `deletion.confirmed` events (issue 16: "
            "they were one per object)."
        ),
        "fix": (
            "(1) Fold the `published` mark into the next write instead of a second CAS after "
            "`cleared`. (2) Ack a fetched batch with one flush (nats-py flushes per ack). "
            "(3) A cheaper consumer span (or sampling it off during bursts). (4) Keep an "
            "uncompressed record only in the view, not a second decode per watch echo of our "
            "own writes (the view already holds the version we wrote)."
        ),
    },
    "watcher_publish": {
        "bottleneck": (
            "Pipelined since issue 16 (bounded window of 256 outstanding acks on one reply "
            "subscription, per-object chaining, no span per state event): the watcher side "
            "runs at ~22-23k events per CPU-second; the wall rate also needs nats-server's "
            "CPU (~12 µs per stored message) and shares the two cores with other work, so it "
            "varies between runs (see min/max)."
        ),
        "fix": (
            "Publish in batches of one `nc.publish` per flush (header bytes built once per "
            "informer), count metrics per batch instead of per event, and run on a machine "
            "where nats-server has its own core."
        ),
    },
    "tracker_growth": {
        "bottleneck": (
            "Recording was superlinear for two reasons, both fixed in issue 16: kubesim "
            "answered a namespaced LIST by sorting every object of the kind (now a namespace "
            "index), and every open teardown fell due for a periodic re-check each "
            "`verify_interval` (10,000 open records = 1,000 LIST + CAS a second; a 10,000 run "
            "had made 121,227 verifications for 8,496 recorded teardowns). Re-checks are now "
            "capped (`CLEARANCE_VERIFY_RATE`). Measured after the fixes on the shared machine: "
            "recording 1,000 / 5,000 / 10,000 teardowns in ~2.5 / 13 / 30 s; the 10,000 x 8 "
            "burst clears in ~88 s at ~0.86 ms of tracker CPU per DELETED, the same per-object "
            "CPU as at 1,000 (growth ~1.0x): the burst is CPU-bound, see `teardowns`."
        ),
        "fix": (
            "The per-DELETED CPU of the `teardowns` note; then the scan's full pass over every "
            "record each second (~50 µs a record) would be next at this size: a wakeup heap "
            "would make it O(due)."
        ),
    },
    "dispatcher_pass": {
        "bottleneck": (
            "The scan is O(queued) and ~9 µs per queued AppWrapper at 20,000 (x1.17 the "
            "per-item cost at 500): candidates (a pass over every entry with the pause rule), "
            "free capacity over every pod and reservation, then the plan over all candidates "
            "- each a full pass per scan."
        ),
        "fix": (
            "Keep the candidate order incrementally (a heap updated on intake instead of "
            "sorting every scan), keep free capacity as a running sum updated by pod events, "
            "and stop the plan at the first candidate that does not fit under strict "
            "head-of-line: a pass then costs the admitted few, not the whole queue."
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
        "Issue 16 replaced the watcher's one-PubAck-at-a-time publish with a pipelined window "
        "(one reply subscription, callbacks, one sweep timer): decode + publish went from "
        "5.4k to ~15-20k events/s wall on this machine (~23k per watcher CPU-second)."
    ),
    "rate_limits": (
        "The services now rate-limit their API requests (CLEARANCE_KUBE_QPS 50, BURST 100) "
        "and retry 429 after Retry-After; the clearance benchmark runs with those defaults, "
        "the tracker-scale benchmark with the limit off (it measures the tracker's work)."
    ),
}
