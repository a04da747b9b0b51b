"""Clearance shared runtime: the event contract, the NATS bus, telemetry and settings."""
