"""The benchmarks are not tests: keep pytest (``make test``) from importing anything here."""

collect_ignore_glob = ["*.py"]
