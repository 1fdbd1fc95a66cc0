"""A package run with ``python -m pkgdemo`` (tests: -m behaves like python -m)."""
