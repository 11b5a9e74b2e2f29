"""Every `shardfeed ...` command line in README.md and docs/**/*.md parses with the CLI's own parser,
as written there (extracted from the files, not restated here)."""

from __future__ import annotations

import argparse
import contextlib
import io
import shlex
from pathlib import Path

import pytest

from shardfeed.cli.main import build_parser, joined_flag_values

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def documented_commands() -> list[tuple[str, int, str]]:
    """(file, line, command) for every line of a fenced code block that starts a `shardfeed`
    command (after an optional '$ '), continuation lines joined, comments dropped."""
    found = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        fenced, i = False, 0
        while i < len(lines):
            line = lines[i].strip()
            if line.startswith("```"):
                fenced = not fenced
            elif fenced and line.removeprefix("$ ").startswith("shardfeed "):
                start, text = i + 1, line.removeprefix("$ ")
                while text.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    text = text[:-1] + " " + lines[i].strip()
                found.append((path.name, start, text))
            i += 1
    return found


COMMANDS = documented_commands()


def test_the_docs_hold_commands() -> None:
    assert len(COMMANDS) > 20 and any("--beam-options" in c for _, _, c in COMMANDS)


@pytest.mark.parametrize(("file", "line", "command"), COMMANDS, ids=[f"{f}:{n}" for f, n, _ in COMMANDS])
def test_documented_command_parses(file: str, line: int, command: str) -> None:
    argv = shlex.split(command, comments=True)[1:]
    if "|" in argv:  # a pipe into another program
        argv = argv[: argv.index("|")]
    notation = [a for a in argv if a.startswith("[")]
    assert not notation, f"{file}:{line}: `{command}` uses [optional] notation, which a shell passes as is: {notation}"
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = build_parser().parse_args(joined_flag_values(argv))
    except SystemExit as e:
        pytest.fail(f"{file}:{line}: `{command}` does not parse: {errors.getvalue().strip().splitlines()[-1:]}")
        raise AssertionError from e
    assert isinstance(args, argparse.Namespace)


def test_beam_options_starting_with_dashes_reach_convert(tmp_path: Path) -> None:
    """The documented quoted form gets past argparse (exit 2 before the fix) to convert itself,
    which here fails on the missing source (exit 1)."""
    from shardfeed.cli.main import main

    argv = ["convert", str(tmp_path / "missing"), str(tmp_path / "out"), "--runner", "beam"]
    assert main([*argv, "--beam-options", "--runner=DirectRunner --direct_num_workers=1"]) == 1
    assert joined_flag_values(["--beam-options", "--a=1 --b", "-q"]) == ["--beam-options=--a=1 --b", "-q"]


@pytest.mark.parametrize(
    ("argv", "dedupe"),
    [
        (["--dedupe", "SRC", "OUT"], "exact"),
        (["--dedupe", "near", "SRC", "OUT"], "near"),
        (["SRC", "OUT", "--dedupe"], "exact"),
        (["SRC", "--dedupe", "OUT"], "exact"),
        (["--dedupe", "-q", "SRC", "OUT"], "exact"),
        (["SRC", "OUT"], None),
    ],
)
def test_a_bare_dedupe_never_takes_the_source_for_its_value(argv: list[str], dedupe: str | None) -> None:
    """`convert --dedupe SRC OUT` failed with "invalid choice: 'SRC'" (argparse gave the optional
    value the next word)."""
    args = build_parser().parse_args(joined_flag_values(["convert", *argv]))
    assert (args.source, args.output, args.dedupe) == ("SRC", "OUT", dedupe)
