"""Starts processes that leave its process group: a double-forked daemon in a session of its own, and a
grandchild in a process group of its own; then ends (``exit``) or stays (``stay``).

    python leaves_processes.py TAG exit|stay

The daemon runs ``sleep TAG1``, the grandchild ``sleep TAG2`` (TAG: a number unique to the test, e.g.
``300.1234``), so that a test can find them by their command line.
"""

import os
import subprocess
import sys
import time

tag = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", tag + "1"])
    os._exit(0)
subprocess.Popen(["sleep", tag + "2"], process_group=0)
print("started", flush=True)
if sys.argv[2] == "stay":
    time.sleep(600)
