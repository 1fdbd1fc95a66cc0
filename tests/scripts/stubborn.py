"""A script that ignores SIGTERM and Ctrl-C: stopping it takes the whole grace, then SIGKILL.

python stubborn.py [TAG]      prints "stubborn script ready [TAG]" once it ignores them
"""

import contextlib
import signal
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("stubborn script ready", *sys.argv[1:], flush=True)
while True:
    with contextlib.suppress(KeyboardInterrupt):
        time.sleep(0.05)
