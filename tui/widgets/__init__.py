"""The panels: one Line API widget per file, each fed a snapshot by ``update_snapshot``."""
