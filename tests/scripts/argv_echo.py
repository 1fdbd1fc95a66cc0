"""Prints what python set up for the script, then exits with the status given as the last argument.

python argv_echo.py ARGS... [STATUS]
"""

import sys

print("argv", sys.argv)
print("name", __name__)
print("path0", sys.path[0])
print("file", __file__)
print("main is me", sys.modules["__main__"].__dict__ is globals())
print("globals", sorted(k for k in globals() if k.startswith("__")))
sys.exit(int(sys.argv[-1]) if len(sys.argv) > 1 and sys.argv[-1].isdigit() else 0)
