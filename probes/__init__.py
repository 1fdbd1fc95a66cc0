"""Measurement probes: host probes in the monitor process, the agent inside the watched child."""
