"""Write the README's generated sections (the panels and the keys) from :mod:`.panels` and :mod:`.keys`.

    python -m torchpar_top.tui.docs README.md

Each section sits between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` lines.
"""

from __future__ import annotations

import functools
import re
import sys

from torchpar_top.tui.keys import keys_table
from torchpar_top.tui.meanings import HOT_CORE_NOTE, panels_list

SECTIONS = {
    "panels": lambda: f"{panels_list(detail=True)}\n{HOT_CORE_NOTE}\n",
    "keys": keys_table,
}


def section(text: str, name: str) -> str:
    """What ``text`` holds between the markers of section ``name``.

    Raises:
        ValueError: the markers are missing.
    """
    match = re.search(rf"<!-- {name}:begin -->\n(.*?)<!-- {name}:end -->", text, re.S)
    if match is None:
        raise ValueError(f"no <!-- {name}:begin --> ... <!-- {name}:end --> section")
    return match.group(1)


def _between(body: str, m: re.Match[str]) -> str:
    """A generated section's markers around its new ``body``."""
    return m.group(1) + body + m.group(2)


def rewrite(text: str) -> str:
    """``text`` with every generated section replaced by what the sources say now."""
    for name, make in SECTIONS.items():
        body = make()
        text = re.sub(
            rf"(<!-- {name}:begin -->\n).*?(<!-- {name}:end -->)",
            functools.partial(_between, body),
            text,
            flags=re.S,
        )
    return text


def main(argv: list[str] | None = None) -> int:
    """Rewrite the named file in place."""
    (path,) = argv if argv is not None else sys.argv[1:]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(rewrite(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
