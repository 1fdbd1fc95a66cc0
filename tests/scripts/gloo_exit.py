"""How the test scripts' Gloo ranks end: without Python's teardown, once their work is done.

Gloo's threads can outlive the interpreter at its teardown, and a rank then aborts after its last line
("terminate called without an active exception", SIGABRT, a PyTorch bug: its proposed fix destroys the
group at exit, #179291). ``destroy_process_group`` alone does not prevent it (measured with a core busy,
plain torchrun: 2 of 8 runs aborted with it at the end, 1 of 7 with the model collected first; 0 of 20 with
this exit, and the torchrun tests passed 20 times in a row). torchpar-top's handling of that abort is
tested with a script that aborts at exit on purpose (``aborts_at_exit.py``).
"""

import atexit
import os
import sys


def leave_without_teardown() -> None:
    """Call after the rank's work is done and its group destroyed (never when it failed: the exit status
    is then 0). The handler is registered last, so it runs first at exit: after the agent's report of how
    the code ended (sent when the script returned), before the interpreter's teardown."""
    atexit.register(_leave_now)


def _leave_now() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
