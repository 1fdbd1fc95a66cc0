"""Between probes and UI: spawning the child, the wire protocol, ring buffers, headless output."""
