"""Subprocess helpers for tests; the implementation is shared with ``clearance demo``."""

from clearance.processes import ServiceProcess, free_port, venv_script

__all__ = ["ServiceProcess", "free_port", "venv_script"]
