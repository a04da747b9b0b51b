"""Fixtures of the end-to-end scenarios (issue #7): one whole Clearance installation per test.

``launch`` starts a :class:`~clearance.stack.LocalStack` (nats-server, ``kubesim serve``, the
three services as separate processes configured through their environment, an OTLP receiver)
in the test's own temp directory, and opens the test's clients (:class:`e2e_support.Scenario`).
Every port is free-picked and every store is private, so tests never share state. When a test
fails, the tail of every process log is printed (pytest shows it under "Captured stdout
teardown") and the log directory is named, so a service bug can be diagnosed from the report.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Generator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import REPORTS, Launch, Scenario, dump_logs, failed, stack_config

from clearance.stack import LocalStack


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    item.stash.setdefault(REPORTS, {})[report.when] = report
    return report


@pytest.fixture
async def launch(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Launch]:
    """Start this test's stack: ``await launch(nodes=2, kubesim_flags=(...), env={...})``."""
    opened: list[Scenario] = []
    stacks: list[LocalStack] = []

    async def start(**overrides: Any) -> Scenario:
        stack = LocalStack(stack_config(tmp_path / f"stack-{len(stacks)}", **overrides))
        stacks.append(stack)
        await stack.start()
        scenario = await Scenario.open(stack)
        opened.append(scenario)
        return scenario

    try:
        yield start
    finally:
        for scenario in opened:
            await scenario.close()
        if failed(request.node):
            for stack in stacks:
                dump_logs(stack)
            for scenario in opened:
                print("----- cycle events and alerts seen by the test -----")
                print(scenario.log.timeline())
        for stack in stacks:
            await stack.stop()
