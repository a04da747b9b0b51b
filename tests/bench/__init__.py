"""``make bench``: Clearance's performance harness (issue #9). Never collected by pytest.

Run the whole suite with ``make bench`` (or ``uv run --frozen --no-sync python -m tests.bench``);
each module also runs on its own: ``python -m tests.bench --only watcher``.
"""
