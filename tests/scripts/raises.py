"""Prints a line, then raises ValueError from a function."""


def fail(n: int) -> None:
    raise ValueError(f"bad value {n}")


print("about to fail", flush=True)
fail(42)
