"""Bottleneck and proposed fix for each target a run misses (written from the profiles).

The report prints these only for targets the run actually missed, next to the profile tables
and breakdowns of that run, so a reader can check the diagnosis against the evidence.
"""

from __future__ import annotations

NOTES: dict[str, dict[str, str]] = {
    "redispatch_p99": {
        "bottleneck": (
            "Removal → created is the tracker's removal → cleared (below) plus cleared → "
            "created: the `cleared` delivery, the belt reads (one round trip), the status "
            "patch (cleared + Dispatching), the work-queue hand-off and the first POST, i.e. "
            "three API round trips after the delivery; the dispatcher does not wait for its "
            "rate limit (0 429s) and writes one status per redispatch. Each step costs little "
            "CPU: a request through `Kube.request` costs 0.56 ms of client CPU, the same as a "
            "bare aiohttp GET (0.55 ms, measured 2026-12-06), and kubesim's profile spreads "
            "its ~36 % of a core over request handling, validation and watch fan-out with "
            "`socket.send` (11 %) the largest. The time is waiting for a core: five "
            "single-threaded processes on two shared vCPUs, run queue 5-9 and 5-13 % steal "
            "time in vmstat during the run. On 2026-12-06 the same code measured p50 11 ms "
            "removal → cleared in one session and 25-35 ms in the next (the same commit "
            "01f3946 gave 24.8 ms p50, 85.9 ms p99 in the second), and two gangs in parallel "
            "instead of eight gave the same p50 (34 ms): the figures follow the host, not "
            "the load the benchmark adds."
        ),
        "fix": (
            "Fewer hops rather than faster ones: carry the tracker's final-LIST "
            "resourceVersion in `cleared` so the belt reads can be skipped when the pod cache "
            "is at or past it (docs/NEEDS.md), and fold the `clearing` CAS into the last "
            "confirmation write (below). On these two shared cores a p99 of 50 ms is not "
            "reachable by trimming CPU alone; a host with dedicated cores (no steal) is the "
            "other half."
        ),
    },
    "cleared_p99": {
        "bottleneck": (
            "Removal → cleared is kubesim's watch fan-out (2 ms p50, 4.8 ms p90 from commit to "
            "a bare client's read on an idle machine), the watcher relaying the DELETED "
            "(pipelined publish), the tracker's pull consumer (fetch, decode, CAS write of the "
            "record), then the final quorum LIST (started when the DELETED is seen), the CAS "
            "of `clearing` and the `cleared` publish with its PubAck: four round trips across "
            "three processes after the commit. The watcher and tracker rows above split it; "
            "both steps have the same shape (a few ms of work, the rest waiting for a core; "
            "see removal → created for the host measurements)."
        ),
        "fix": (
            "Write `clearing` in the same CAS as the last confirmation when the final LIST "
            "is already back (one NATS round trip less), and give the tracker's kube consumer "
            "a dedicated connection so a backlog of MODIFIED events cannot delay a DELETED. "
            "The rest is the host (see above)."
        ),
    },
    "speedup_p99": {
        "bottleneck": (
            "The polling baseline is ~4.7 s at every percentile (P - deletion delay), so the "
            "p99 ratio is 4.7 s ÷ Clearance's removal → cleared p99: it misses exactly when "
            "that p99 exceeds ~47 ms (see the note above: scheduling stalls on shared cores)."
        ),
        "fix": "The removal → cleared fixes above; the median ratio is 120-420x.",
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
            "Until 2026-12-06 (third session) the dispatcher's work queue was FIFO: a gang "
            "whose teardown was confirmed waited behind every teardown queued meanwhile (no "
            "pod create for 40 s of the storm; p50 29 s, worst 49 s). Dispatches now have "
            "their own lane, and the tracker's force deletion rings at its deadline instead "
            "of the next scan: p50 ~2 s, worst 4-9 s in the runs since. If this target is "
            "missed again, read the split per gang (deadline → forced, forced → cleared, "
            "cleared → created) from the run's kept raw data (raw.pickle in its workdir) "
            "before blaming the rate: the storm itself is paced by kubesim's node "
            "controller, which evicts the lost nodes' pods over ~100 s on two cores."
        ),
        "fix": (
            "Fewer status writes per gang (the teardown announcement and the stuck report "
            "folded into transition writes) and fewer LISTs per teardown (the monitor's "
            "relist reused by the teardown's read), so the dispatcher and kubesim share the "
            "cores for less time."
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
