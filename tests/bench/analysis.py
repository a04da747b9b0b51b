"""Bottleneck and proposed fix for each target a run misses (written from the profiles).

The report prints these only for targets the run actually missed, next to the profile tables
and breakdowns of that run, so a reader can check the diagnosis against the evidence.
"""

from __future__ import annotations

NOTES: dict[str, dict[str, str]] = {
    "redispatch_p99": {
        "bottleneck": (
            "Since perf-dispatch (2026-12-03 evening) the dispatcher no longer waits for its "
            "rate limit (the benchmark sets 200/s, burst 400; the dispatcher averages ~94 "
            "requests/s, peaks ~137/s, 0 429s from kubesim's 300/s per-client limit) and a "
            "redispatch is one status write. Removal → created is the tracker's removal → "
            "cleared (see below) plus cleared → created, which is: the `cleared` delivery, "
            "the belt reads (GET per item name + LIST, now sent together: one round trip), "
            "the status patch (cleared + Dispatching), the work-queue hand-off and the first "
            "POST - three API round trips after the delivery. The dispatcher profile puts "
            "its time in `Kube.request` / kubernetes-asyncio's `call_api` and `socket.send`, "
            "not in decisions; the dispatcher uses a third of a core and kubesim another "
            "third, so with five processes (and other work) on two shared cores each round "
            "trip costs ~5-10 ms at the median and the p99 is scheduling stalls. The "
            "request mix row shows ~19 dispatcher requests per cycle, 7 of them status "
            "patches."
        ),
        "fix": (
            "Fewer round trips on the path: carry the tracker's final-LIST resourceVersion in "
            "`cleared` so the belt reads can be skipped when the pod cache is at or past it "
            "(docs/NEEDS.md); fewer requests per cycle (counts folded into transition "
            "writes, start + announce of a teardown in one write) so kubesim and the "
            "dispatcher compete less for the cores; one aiohttp session instead of "
            "kubernetes-asyncio's `call_api`. The tracker's part (removal → cleared) is "
            "below."
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
            "Pipelined (bounded window of 256 outstanding acks on one reply subscription, "
            "per-object chaining, no span per state event); since perf-dispatch a PubAck "
            "calls the publisher back directly (no future + done-callback per event): A/B "
            "on the same machine at the same time, 3 runs each of 3 x 20,000 events, the "
            "watcher side went from 11.6-12.6k to 13.3-14.9k events per CPU-second (+~18%). "
            "The rest is per event: msgspec decode (the largest single item), nats-py's "
            "per-message publish (header encoding with a regex check per key, the HPUB "
            "command) and ack delivery (parser, Msg object, subscription queue, a coroutine "
            "per reply), and four Prometheus updates. The wall rate also needs nats-server's "
            "CPU on the same two shared cores, so it varies with other work (see min/max "
            "and the load average)."
        ),
        "fix": (
            "Header bytes built once per informer and sent without nats-py's per-key "
            "validation (needs a raw-publish hook in nats-py), acks read from one raw "
            "subscription without a Msg per reply, and nats-server on its own core."
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
            "Met since perf-dispatch (184.6 → ~60 ms median at 20,000 queued). What is "
            "left (profile above): one pass over every cached AppWrapper (`survey`: its "
            "parsed status from the per-object cache, candidates, reservations, phase "
            "gauges), the plan (one verdict per request size until an admission), and one "
            "work-queue add per AppWrapper whose waiting message changed (every one in this "
            "benchmark, which resets the queue each round). The per-item cost is memory "
            "access over 20,000 entries, not arithmetic."
        ),
        "fix": (
            "Keep the queued set as an index updated on intake (a pass over the queued "
            "only, not every cached AppWrapper), and free capacity as a running sum "
            "updated by pod events."
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
        "The services rate-limit their API requests (CLEARANCE_KUBE_QPS / BURST: dispatcher "
        "100 / 200, tracker and watcher 50 / 100 by default) and retry 429 after "
        "Retry-After. The clearance benchmark sets 200 / 400 for its load (8 gangs cycling "
        "make the dispatcher send ~100 requests/s) and runs kubesim with a per-client limit "
        "of 300/s, burst 600 (429 + Retry-After above it); the API rows show each service's "
        "requests, peak rate and 429s. The tracker-scale benchmark runs with the limit off "
        "(it measures the tracker's work)."
    ),
}
