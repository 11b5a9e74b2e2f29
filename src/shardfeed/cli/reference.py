"""The CLI reference page, written from the CLI's own parser: every command, its arguments and
flags with their help, so the documentation cannot drift from what `shardfeed` accepts.

    python -m shardfeed.cli.reference > page.md   (the docs site's build does this: scripts/docs_hooks.py)
"""

from __future__ import annotations

import argparse
import sys

from shardfeed.cli.main import build_parser


def markdown() -> str:
    """The reference as Markdown: one section per command, one table row per argument."""
    parser = build_parser()
    commands = _subcommands(parser)
    lines = [
        "# Command line",
        "",
        "Written from the CLI's own parser (`shardfeed.cli.reference`) when the site is built.",
        "",
        f"`{parser.prog} [--version] [-v] COMMAND ...`: {parser.description}",
        "",
        "| command | what it does |",
        "|---|---|",
        *(f"| [`{name}`](#{name}) | {_cell(help_text)} |" for name, (_, help_text) in commands.items()),
    ]
    for name, (sub, help_text) in commands.items():
        lines += _section(name, sub, help_text)
    return "\n".join(lines) + "\n"


def _section(name: str, parser: argparse.ArgumentParser, help_text: str) -> list[str]:
    """One command's section: its usage and a row per argument; a command with commands of its
    own (`serve dispatcher`) gets a section for each of them after its own."""
    lines = ["", f"## {name}", "", _cell(help_text or parser.description or ""), "", "```text"]
    lines += [parser.format_usage().strip(), "```", "", "| argument | help |", "|---|---|"]
    lines += [f"| {_names(action)} | {_cell(_help(action))} |" for action in parser._actions if _shown(action)]
    if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        for inner, (sub, inner_help) in _subcommands(parser).items():
            lines += _section(f"{name} {inner}", sub, inner_help)
    return lines


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """{command: (its parser, its one-line help)}, in the order `shardfeed --help` lists them."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
    return {name: (sub, helps.get(name, "")) for name, sub in action.choices.items()}


def _shown(action: argparse.Action) -> bool:
    return action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction)


def _names(action: argparse.Action) -> str:
    """`--flag VALUE` / `-f` or the positional's name, as code."""
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    value = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def _help(action: argparse.Action) -> str:
    """The flag's help with argparse's %(default)s-style fields filled, its choices, and its
    default where the help does not say it."""
    text = (action.help or "") % {"default": action.default, "prog": "shardfeed"} if action.help else ""
    if action.choices and not isinstance(action.choices, dict):
        text += f" (one of: {', '.join(map(str, action.choices))})"
    if action.nargs != 0 and action.default not in (None, argparse.SUPPRESS) and "default" not in text:
        text += f" (default: {action.default})"
    return text.strip()


def _cell(text: str) -> str:
    """Text made safe for one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


if __name__ == "__main__":
    sys.stdout.write(markdown())
