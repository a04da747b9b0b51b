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
    "rack_loss": {
        "bottleneck": (
            "Requests ÷ the rate the API server grants. At the issue's size (64 nodes x 500 "
            "gangs x 8 pods, 32 lost; 2026-12-06 after perf-kubesim and the request cuts) "
            "every gang is cleared ≤ 3.1 s after its force deadline and comes back with no "
            "safety violation, but after the deadlines the dispatcher still has to create "
            "4,000 pods and write ~4,300 statuses (8.5 per gang: start_teardown, "
            "announce_teardown, the stuck report, cleared + Dispatching, Dispatched, Running, "
            "counts) plus ~10 pod LISTs per gang (the pre-dispatch check's full-namespace LIST "
            "of 4,000 pods among them: most of the dispatcher's 67 % of a core). At 200 "
            "requests/s the creates alone take 20 s; the last gang came back 31 s after its "
            "deadline. kubesim serves ~450 requests/s at 100 % of its core, so no client "
            "limit gets 500 gangs back in 10 s on this machine."
        ),
        "fix": (
            "One status write per transition (fold announce_teardown, the stuck report and "
            "counts into the transitions' writes), the pre-dispatch name check without a "
            "full-namespace LIST (the tracker's cleared proves the names free as of its final "
            "reads; a foreign object created since meets the create's 409 and the rollback), "
            "and a client rate the API server grants: 500 gangs in 10 s needs ≥ 400 pod "
            "creates/s for the dispatcher alone."
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
        "The services rate-limit their API requests (CLEARANCE_KUBE_QPS / BURST: dispatcher "
        "100 / 200, tracker and watcher 50 / 100 by default) and retry 429 after "
        "Retry-After. The clearance benchmark sets 200 / 400 for its load (8 gangs cycling "
        "make the dispatcher send ~100 requests/s) and runs kubesim with a per-client limit "
        "of 300/s, burst 600 (429 + Retry-After above it); the API rows show each service's "
        "requests, peak rate and 429s. The tracker-scale benchmark runs with the limit off "
        "(it measures the tracker's work)."
    ),
}
