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
            "The tracker process is CPU-bound during the burst (its CPU seconds during the "
            "burst ≈ the burst's wall time: ~0.9 ms of CPU per DELETED). The profile: per "
            "object a CAS write of the record (a KV publish with PubAck), a "
            "`deletion.confirmed` span plus an audit event with its own PRODUCER span and "
            "PubAck (`Reporter._confirmations` → `bus.publish`: 8,000 extra JetStream "
            "publishes), and the consumer's per-message span and decode; per teardown the "
            "final quorum LIST, two CAS writes and the `cleared` publish. Periodic "
            "verifications falling due during the burst used to GET each unconfirmed object in "
            "turn; since issue 16 they take one LIST per namespace and kind instead."
        ),
        "fix": (
            "(1) Batch the audit events: one `deletion.confirmed` per teardown and commit "
            "(listing the objects), published without awaiting each PubAck - they are audit, "
            "the KV record holds the fact. (2) Group-commit the confirmations of one consumer "
            "fetch batch per record (8 DELETED of one teardown → one CAS). (3) Skip periodic "
            "verification of a record while kube events for it are queued. (4) Raise the kube "
            "consumer's concurrency and fetch batch. Each of (1) and (2) removes about a third "
            "of the per-object CPU."
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
            "Not measured in this run: at 5,000 teardowns the tracker had not recorded them "
            "after ~115 s (1,000 take ~2 s), so the run was stopped to keep `make bench` "
            "within its time budget (the growth row shows the error). Recording is "
            "superlinear in the number of open records; not profiled yet."
        ),
        "fix": (
            "Profile the recording phase at 5,000 (pyinstrument on the tracker): suspects are "
            "per-record passes over the whole KV view (`scan`, `_on_record` → "
            "`next_work`) and each first verification's LIST."
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
    "rack_loss": {
        "bottleneck": (
            "At 64 nodes x 500 gangs x 8 pods the gangs do not all run within the setup "
            "timeout (2026-12-03, 240 s): the dispatcher had created all 4,000 pods, but only "
            "~1,530 ran — kubesim, the simulator, was the bottleneck (72.5% of a core mean, "
            "97% peak, on the shared 2 cores), and gangs whose pods did not run within their "
            "30 s requeuing wait were torn down during the setup (1,108 deletes), which fed "
            "it more work. Read from the request log and a profile of kubesim's scheduler: "
            "every scheduling pass re-sums "
            "every bound pod's requests (0.24 s a pass at 4,000 pods; ~0.06 s once quantities "
            "and requests are remembered), and the dispatcher's API requests per gang it "
            "redispatches: at 16 nodes x 100 gangs x 8 pods (2026-12-03, every gang back, no "
            "safety violation, worst 14.8 s after its force deadline) it sent 3,267 pod GETs "
            "(~32 per gang), 979 status patches (~10), 808 deletes and 808 creates in the "
            "storm — 75.7 requests/s for 83 s; a 500-gang storm is ~25,000 requests."
        ),
        "fix": (
            "kubesim: keep each node's usage incrementally from the pod informer (a pass "
            "proportional to the pending pods). dispatcher (issue 16 Build 2): one status write "
            "per transition and no GET per pod on the redispatch path (the other items of "
            "Build 2). Even then the arithmetic binds: 500 gangs x ~10 requests is 25 s of a "
            "200/s bucket, so the 10 s bound at full size needs either ≤ 4 requests per gang "
            "or a client limit ≥ 500/s (and an API server that admits it)."
        ),
    },
}

NOTES["rack_redispatch"] = NOTES["rack_loss"]

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
