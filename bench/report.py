"""How every bench script hands over its results: JSON on stdout, and optionally in a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def emit(results: dict[str, Any], json_path: str | None) -> None:
    """Prints `results` as indented JSON and, given a path, writes the same text there."""
    text = json.dumps(results, indent=2)
    print(text)
    if json_path:
        Path(json_path).write_text(text + "\n")
