"""Deliberately not valid Python (tests: the one-line error for a syntax error on line 4)."""

print("never runs")
def broken(:
    pass
