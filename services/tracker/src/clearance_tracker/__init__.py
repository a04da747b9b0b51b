"""Clearance tracker service (built by its own issue; nothing runs here yet)."""
