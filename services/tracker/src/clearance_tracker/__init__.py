"""Clearance deletion tracker: confirms teardowns by UID, escalates, emits `cleared`."""
