"""mkdocs hooks: the CLI reference page is written from the CLI's own parser at build time."""

from __future__ import annotations

from typing import Any


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """docs/reference/cli.md's text, replaced by `shardfeed.cli.reference.markdown()`."""
    if page.file.src_uri == "reference/cli.md":
        from shardfeed.cli.reference import markdown as reference

        return reference()
    return markdown
