"""The ground floor: the words and the messages every other layer shares.

- :mod:`.vocab`: the vocabulary as enums (executor kinds, quantities, modes, roles, states) and the few
  constants both ends must agree on.
- :mod:`.codec`: frozen dataclasses to and from JSON lines, validated and bounded. No pickle.
- :mod:`.messages`: the wire protocol between the agent in the workload and torchpar-top.
- :mod:`.snapshot`: what the screen and headless output show, with the meaning computed once.

Nothing here measures, spawns or draws, and nothing here imports another torchpar_top package
(``tests/unit/test_import_hygiene.py`` enforces the order of the layers).
"""
