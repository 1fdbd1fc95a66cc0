"""The in-child agent: executor counters, emulated streams, inter-op futures, sync control, bootstrap.

It runs inside the workload process and talks to torchpar-top over the wire protocol
(:mod:`torchpar_top.contract.messages`). It never imports Textual.
"""
