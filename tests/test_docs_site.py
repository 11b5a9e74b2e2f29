"""The documentation site (`make docs`, mkdocs.yml): every page is in its navigation, and the CLI
reference written from the parser has every command and flag `shardfeed --help` shows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from shardfeed.cli.reference import markdown

ROOT = Path(__file__).resolve().parents[1]


def _nav_pages() -> set[str]:
    """The pages mkdocs.yml's nav lists (`Title: page.md` entries)."""
    return set(re.findall(r":\s*([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M))


def test_every_page_is_in_the_navigation_and_every_entry_exists() -> None:
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert _nav_pages() == pages


def _help(*command: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "shardfeed", *command, "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_the_cli_reference_has_every_command_and_flag() -> None:
    """Checked against the help text the installed CLI prints, not against the parser objects
    the reference itself walks."""
    page = markdown()
    top = _help()
    commands = re.search(r"\{([a-z,]+)\}", top)
    names = commands.group(1).split(",") if commands else re.findall(r"^    ([a-z]+)\s", top, re.M)
    assert len(names) >= 10
    checked = 0
    while names:
        name = names.pop(0)
        assert f"\n## {name}\n" in page, name
        section = page.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        text = _help(*name.split())
        flags = set(re.findall(r"^  (?:-\w[ ,\w]*, )?(--[a-z][a-z0-9-]*)", text, re.M)) - {"--help"}
        assert all(f"`{flag}" in section for flag in flags), (name, sorted(flags))
        inner = re.search(r"^  [A-Z]+\n((?:    .*\n|              .*\n)+)", text, re.M)  # `serve ROLE ...`
        names += [f"{name} {n}" for n in re.findall(r"^    ([a-z]+)", inner.group(1), re.M)] if inner else []
        checked += len(flags)
    assert checked > 100
