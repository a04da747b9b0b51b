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
            "CPU; the time is waiting for a core: five single-threaded processes on two shared "
            "vCPUs. On uvloop (2026-12-06, fourth session) the p99 went from 66 to 40-47 ms "
            "with the medians unchanged (~15 ms): the median is the cost of waking each "
            "process in turn. Collector pauses (see removal → cleared) were part of the tail "
            "too, until the fifth session froze the services' and kubesim's long-lived heaps."
        ),
        "fix": (
            "The belt reads could be skipped if `cleared` carried the tracker's final-LIST "
            "resourceVersion and the dispatcher kept a pod cache proven at or past it "
            "(docs/NEEDS.md); beyond that, a host with dedicated cores."
        ),
    },
    "cleared_p99": {
        "bottleneck": (
            "Removal → cleared is four hops across three processes: kubesim's watch fan-out "
            "and the watcher's decode and pipelined publish (the DELETED usually queued behind "
            "its pod's last MODIFIED: order per object), the tracker's pull delivery, the "
            "final quorum LIST (started when the DELETED is seen), one CAS carrying the "
            "confirmation, the verification and `clearing`, then the `cleared` publish. Its "
            "tail was collector pauses: matched from the outside (2026-12-06, fifth session: "
            "kubesim commits, store times of `cleared` and of the tracker's KV revisions), the "
            "slowest cycles sat under a full collection of the tracker (29.5 ms) or of kubesim "
            "(38-70 ms), and their time went between the DELETED being stored and the "
            "`clearing` write. The earlier reading of a probe, 'descheduled, not busy', was "
            "wrong: a collection runs inside whatever callback allocates, so the slow callbacks "
            "were of every kind. Both pauses are gone (services freeze their heap once ready, "
            "kubesim after each older-generation collection: docs/DECISIONS.md). What is left "
            "is CPU saturation when several gangs cycle at once: sampling each process's "
            "schedstat every 5 ms (fifth session), the slowest cycles' windows (28-47 ms) held "
            "50-75 ms of CPU work of the five processes on two cores, and the tracker spent "
            "17-30 ms of each waiting on the run queue (2-5 ms in a median cycle's window); "
            "steal time was 0. The sixth session found a fixed cost too: each wrapped Pod was "
            "watched, published and consumed twice (a pod and an item informer over the same "
            "objects); publishing it once took the p99 from 16-28 ms to 14-16 ms."
        ),
        "fix": (
            "Look for collector pauses first (a `gc.callbacks` probe in each process, matched "
            "to the slow cycles' server times), then run-queue waits (/proc/<pid>/schedstat). "
            "Less CPU per cycle in any process on the host shortens the bursts: kubesim, the "
            "test double, is the largest (~27 % of the run's CPU), then the dispatcher. Or a "
            "host with dedicated cores; a tracker that watches pods itself took ~1-2 ms off "
            "the median in an experiment, not the p99 (docs/DECISIONS.md). A pod's last "
            "changes still wait for each other's PubAck (per-object order): sending a ready "
            "chain as one atomic batch would save a round trip per change (docs/NEEDS.md)."
        ),
    },
    "speedup_p99": {
        "bottleneck": (
            "The polling baseline is ~4.7 s at every percentile (P - deletion delay), so the "
            "p99 ratio is 4.7 s ÷ Clearance's removal → cleared p99: it misses exactly when "
            "that p99 exceeds ~47 ms (see the note above: scheduling stalls on shared cores)."
        ),
        "fix": "See removal → cleared; the median ratio is 120-500x.",
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
        "5.4k to ~15-20k events/s wall on this machine (~23k per watcher CPU-second), and "
        "to ~25k on uvloop (the services' loop since 2026-12-06, fourth session)."
    ),
    "event_loop": (
        "Every service and kubesim run on uvloop (CLEARANCE_EVENT_LOOP, kubesim serve "
        "--event-loop); this process runs its in-process measurements on the loop named in "
        "the Machine section. On the standard loop the same commit measured removal → "
        "created p99 66 ms against 41-44 ms on uvloop (docs/DECISIONS.md)."
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
