"""The Textual app: draws session snapshots and turns keys into session commands; it never measures."""
