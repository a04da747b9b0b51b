"""kubesim's heap policy: what survives an older-generation collection is frozen (kubesim.heap).

Each check runs in a fresh interpreter: the policy changes the process's collector for good.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

_PROLOGUE = """
import asyncio, gc
from kubesim.heap import keep_collections_short

loop = asyncio.new_event_loop()
keep_collections_short(loop)
gc.disable()  # only the explicit collections below run
kept = [[i] for i in range(20_000)]  # tracked objects that outlive the collections below
start = gc.get_freeze_count()
"""


def _run(body: str) -> str:
    code = textwrap.dedent(_PROLOGUE) + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_what_survives_a_middle_generation_collection_is_frozen() -> None:
    out = _run(
        """
        gc.collect(1)
        loop.run_until_complete(asyncio.sleep(0))  # the freeze runs between loop callbacks
        print(gc.get_freeze_count() - start)
        """
    )
    assert int(out) >= 20_000


def test_a_young_collection_freezes_nothing() -> None:
    out = _run(
        """
        gc.collect(0)
        loop.run_until_complete(asyncio.sleep(0))
        print(gc.get_freeze_count() - start)
        """
    )
    assert int(out) == 0


def test_a_full_collection_then_walks_only_what_came_after() -> None:
    out = _run(
        """
        gc.collect(1)
        loop.run_until_complete(asyncio.sleep(0))
        print(sum(len(gc.get_objects(g)) for g in (1, 2)) < 1_000)
        """
    )
    assert out == "True"
