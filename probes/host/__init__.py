"""Host probes run in the monitor process: per-core load and the child's per-thread CPU, read from /proc."""
