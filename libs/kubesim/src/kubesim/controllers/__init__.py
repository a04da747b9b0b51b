"""The fake cluster's controllers: HTTP clients of the kubesim API server, like the real ones.

Each module keeps its decisions in pure functions (`fits`, `decide_evictions`, `decide_podgc`, …)
and its I/O in a small reconciler class, so the rules can be unit-tested without a server.
"""
