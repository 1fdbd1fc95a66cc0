"""The GPU check's report: one JSON document and a short Markdown summary beside it.

A report is a plain dict (JSON types only)::

    {"tool", "version", "started", "seconds", "cuda": bool, "message", "header": {...},
     "checks": [{"name", "title", "status": "passed"|"failed"|"skipped", "reason", "seconds",
                 "details": {..., "tables": [{"title", "columns", "rows"}]}}],
     "counts": {"passed", "failed", "skipped"}}

:func:`write_report` writes ``PATH.json`` and ``PATH.md``; nothing here measures anything.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

STATUSES = ("passed", "failed", "skipped")


def check_entry(
    name: str,
    title: str,
    status: str,
    reason: str = "",
    seconds: float = 0.0,
    details: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One check's entry; ``status`` is passed, failed or skipped, and ``reason`` says why."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {STATUSES}")
    return {
        "name": name,
        "title": title,
        "status": status,
        "reason": reason,
        "seconds": round(seconds, 2),
        "details": dict(details or {}),
    }


def counts(checks: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many checks passed, failed and were skipped."""
    return {s: sum(c["status"] == s for c in checks) for s in STATUSES}


def paths(out: str | Path) -> tuple[Path, Path]:
    """The JSON and Markdown paths for ``--out``: ``x.json`` gives ``x.json`` and ``x.md``; a name
    without ``.json`` gets both suffixes added."""
    out = Path(out)
    if out.suffix == ".json":
        return out, out.with_suffix(".md")
    return out.with_name(out.name + ".json"), out.with_name(out.name + ".md")


def plain(value: Any) -> Any:
    """``value`` with non-finite floats as None and tuples/sets as lists, so that it is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def write_report(report: Mapping[str, Any], out: str | Path) -> tuple[Path, Path]:
    """Write the JSON report and its Markdown summary; returns both paths."""
    json_path, md_path = paths(out)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    doc = plain(report)
    json_path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    md_path.write_text(to_markdown(doc))
    return json_path, md_path


def _cell(value: Any) -> str:
    text = "–" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A GitHub Markdown table."""
    lines = ["| " + " | ".join(_cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


HEADER_FIELDS = (
    ("python", "Python"),
    ("torch", "torch"),
    ("cuda_build", "CUDA (torch build)"),
    ("cudnn", "cuDNN"),
    ("driver", "NVIDIA driver"),
    ("nvml_cuda", "CUDA (driver supports)"),
    ("nvml_binding", "nvidia-ml-py"),
    ("hta", "HTA"),
    ("torchpar_top", "torchpar-top"),
    ("host", "host"),
)


def to_markdown(report: Mapping[str, Any]) -> str:
    """The short summary: what ran where, one row per check, then each check's tables."""
    header = report.get("header") or {}
    c = report.get("counts") or counts(report.get("checks", ()))
    lines = ["# torchpar-top GPU check", ""]
    if not report.get("cuda"):
        lines += [
            str(report.get("message", "no CUDA device"))
            + (f" ({report['reason']})" if report.get("reason") else ""),
            "",
        ]
    lines += [
        f"Started {report.get('started', '?')}, {report.get('seconds', 0):.0f} s in all: "
        f"{c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped.",
        "",
    ]
    rows = [[label, header.get(key)] for key, label in HEADER_FIELDS if header.get(key) is not None]
    for gpu in header.get("gpus") or ():
        rows.append(
            [
                f"cuda:{gpu.get('index')}",
                f"{gpu.get('name')} ({gpu.get('uuid')}, "
                f"{gpu.get('memory_gib', '?')} GiB, sm {gpu.get('capability')})",
            ]
        )
    if rows:
        lines += [*markdown_table(["", "version"], rows), ""]
    checks = report.get("checks") or ()
    if checks:
        lines += markdown_table(
            ["check", "status", "why", "s"],
            [[ch["title"], ch["status"], ch.get("reason"), ch.get("seconds")] for ch in checks],
        )
        lines.append("")
    for ch in checks:
        tables = (ch.get("details") or {}).get("tables") or ()
        if not tables:
            continue
        lines += [f"## {ch['title']}", ""]
        for table in tables:
            lines += [f"**{table['title']}**", "", *markdown_table(table["columns"], table["rows"]), ""]
    return "\n".join(lines).rstrip() + "\n"
