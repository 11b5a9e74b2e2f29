"""How every bench script hands over its results: JSON on stdout, and optionally in a file; and
the host-wide CPU clock the feed benchmarks read (Grain's worker processes included)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def emit(results: dict[str, Any], json_path: str | None) -> None:
    """Prints `results` as indented JSON and, given a path, writes the same text there."""
    text = json.dumps(results, indent=2)
    print(text)
    if json_path:
        Path(json_path).write_text(text + "\n")


def host_cpu_seconds() -> float:
    """CPU seconds the whole host has spent busy, all cores (/proc/stat): on an otherwise idle
    machine, a feed's CPU wherever it runs (this process and its worker processes)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
