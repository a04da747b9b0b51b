"""Where each stream lives and who leads it, logged when first seen and whenever it changes.

Fed from every stream info the bus obtains anyway (provisioning, recovery after a failed
publish), so it costs no extra request and needs no permission beyond the stream's own info.
One record per process: a leader change is logged once, by the first path that notices it.
"""

from __future__ import annotations

import logging

from nats.js import api

__all__ = ["note_placement", "reset_placements"]

log = logging.getLogger(__name__)

_LEADERS: dict[str, str | None] = {}


def _peers(cluster: api.ClusterInfo) -> list[str]:
    return [str(p.name) for p in cluster.replicas or []]


def note_placement(info: api.StreamInfo) -> None:
    """Log the stream's placement the first time, and its leader whenever it changed."""
    name = info.config.name or "?"
    cluster = info.cluster
    leader = cluster.leader if cluster is not None else None
    if name not in _LEADERS:
        log.info(
            "stream placement",
            extra={
                "stream": name,
                "replicas": info.config.num_replicas or 1,
                "leader": leader,
                "followers": _peers(cluster) if cluster is not None else [],
                "cluster": cluster.name if cluster is not None else None,
            },
        )
    elif _LEADERS[name] != leader:
        previous = _LEADERS[name]
        # A leader appearing where none was known (a stream just created, the first info of a
        # fresh connection) is news, not trouble; a known leader replaced is a fail-over.
        log.log(
            logging.INFO if previous is None else logging.WARNING,
            "stream leader elected" if previous is None else "stream leader changed",
            extra={"stream": name, "leader": leader, "previous_leader": previous},
        )
    _LEADERS[name] = leader


def reset_placements() -> None:
    """Forget what was seen (tests that start many clusters in one process)."""
    _LEADERS.clear()
