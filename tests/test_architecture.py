"""The package's shape, checked: stages import only downwards, modules and functions stay small,
no module reaches into another's private names, and the record's feature keys live in one module."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from conftest import string_constants

import shardfeed

SRC = Path(shardfeed.__file__).parent
# The data flow, lowest first: a module may import its own stage and the stages below it.
STAGES = {"format": 1, "write": 2, "read": 3, "tools": 4, "training": 5, "cli": 6}
BASE = {"deprecation", "errors", "lazy", "parallel", "redaction", "version"}  # shared by every stage


def modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def stage(module: str) -> int:
    """The rank of a dotted module name below `shardfeed` (0 for the shared base modules)."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] in BASE:
        return 0
    return STAGES.get(parts[1], 99)


def dotted(path: Path) -> str:
    return ".".join(("shardfeed", *path.relative_to(SRC).with_suffix("").parts))


def imports(path: Path, *, runtime: bool = False) -> list[tuple[str, list[str]]]:
    """(module imported, names imported) for every shardfeed import in `path` (with `runtime`,
    leaving out those under `if TYPE_CHECKING:`, which only type checkers run)."""
    found = []
    tree = ast.parse(path.read_text())
    checking = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if runtime and id(node) in checking:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("shardfeed"):
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.startswith("shardfeed")]
    return found


def test_stages_import_only_downwards() -> None:
    upward = []
    for path in modules():
        name = dotted(path)
        if name in ("shardfeed.__init__", "shardfeed.__main__") or (name.endswith("__init__") and stage(name) == 0):
            continue
        for module, names in imports(path):
            targets = [module] if module != "shardfeed" else [f"shardfeed.{n}" for n in names]
            upward += [f"{name} -> {t}" for t in targets if stage(t) > stage(name)]
    assert upward == []


# What the stages above `write` may take from it: its entry points (the conversion, its options,
# sources and image options, the stored-image check verify repeats, the notes info shares, size
# strings). Shared machinery lives below it (format/, parallel.py).
WRITE_ENTRY_POINTS = {"convert", "options", "sources", "images", "notes", "sharding"}


def test_stages_above_write_use_only_its_entry_points() -> None:
    reached = []
    for path in modules():
        name = dotted(path)
        if stage(name) <= STAGES["write"] or name.startswith("shardfeed.cli") or name.count(".") == 1:
            continue  # the package's own public API and the CLI may name anything
        for module, names in imports(path):
            targets = [module] if module != "shardfeed.write" else [f"shardfeed.write.{n}" for n in names]
            reached += [
                f"{name} -> {t}"
                for t in targets
                if t.startswith("shardfeed.write.") and t.split(".")[2] not in WRITE_ENTRY_POINTS
            ]
    assert reached == []


def test_no_private_names_imported_across_modules() -> None:
    private = [
        f"{dotted(path)}: from {module} import {n}"
        for path in modules()
        for module, names in imports(path)
        for n in names
        if n.startswith("_") and n != "__version__"
    ]
    assert private == []


def code_lines(tree: ast.Module, text: str) -> set[int]:
    """The line numbers of `text` that hold code: not blank, not only a comment, not part of a
    module's, class's or function's docstring."""
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings |= set(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return {
        number
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.strip().startswith("#") and number not in docstrings
    }


def test_modules_and_functions_stay_small() -> None:
    """Alarms for a second look, counted in code lines (docstrings, comments and blank lines
    aside, so that explaining a module never pushes it over): modules over 400, functions over 80."""
    long_modules, long_functions = [], []
    for path in modules():
        text = path.read_text()
        tree = ast.parse(text)
        code = code_lines(tree, text)
        if len(code) > 400:
            long_modules.append(f"{path.name}: {len(code)} code lines")
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = len([n for n in code if node.lineno <= n <= (node.end_lineno or node.lineno)])
                if length > 80:
                    long_functions.append(f"{dotted(path)}.{node.name}: {length} code lines")
    assert long_modules == [] and long_functions == []


def test_the_size_alarm_counts_code_not_docstrings() -> None:
    """A module of 450 lines, 300 of them docstring and comments: 150 code lines."""
    text = '"""' + "doc\n" * 200 + '"""\n' + "# note\n" * 100 + "x = 1\n" * 150
    assert len(code_lines(ast.parse(text), text)) == 150


def test_load_keeps_a_short_signature() -> None:
    assert len(inspect.signature(shardfeed.load).parameters) <= 12


def test_feature_keys_are_spelled_in_the_schema_module_only() -> None:
    """String constants that are feature keys ('image/...') appear only in format/schema.py."""
    spelled = []
    for path in modules():
        if path == SRC / "format" / "schema.py":
            continue
        spelled += [
            f"{dotted(path)}:{line} {value!r}" for line, value in string_constants(path) if value.startswith("image/")
        ]
    assert spelled == []


@pytest.mark.parametrize("package", ["shardfeed", "shardfeed.tools", "shardfeed.training"])
def test_public_packages_declare_what_they_export(package: str) -> None:
    module = __import__(package, fromlist=["__all__"])
    assert module.__all__ and all(hasattr(module, name) for name in module.__all__)


def test_every_error_shares_one_base() -> None:
    errors = (
        shardfeed.SourceError,
        shardfeed.ManifestError,
        shardfeed.ConvertError,
        shardfeed.CorruptRecordError,
        shardfeed.OptionError,
        shardfeed.RunFolderError,
        shardfeed.StorageError,
        shardfeed.CacheDiskFull,
        shardfeed.ServiceError,
        shardfeed.MissingDependencyError,
    )
    for error in errors:  # every user-facing error, exported, defined in errors.py
        assert issubclass(error, shardfeed.ShardfeedError) and error.__module__ == "shardfeed.errors"
    from shardfeed import errors as module

    defined = {n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, shardfeed.ShardfeedError)}
    assert defined <= set(shardfeed.__all__), defined - set(shardfeed.__all__)  # and every one is exported
    assert issubclass(shardfeed.SourceError, ValueError) and issubclass(shardfeed.ConvertError, RuntimeError)
    assert issubclass(shardfeed.OptionError, ValueError) and issubclass(shardfeed.RunFolderError, FileNotFoundError)
    assert issubclass(shardfeed.StorageError, OSError) and issubclass(shardfeed.MissingDependencyError, ImportError)


def test_no_import_cycles() -> None:
    """No chain of shardfeed imports (module-level or inside functions; a type checker's own aside)
    leads back to its start."""
    names = {dotted(path): path for path in modules()}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        targets = set()
        for module, imported in imports(path, runtime=True):
            candidates = [f"{module}.{n}" for n in imported] + [module]
            targets |= {c for c in candidates if c in names or f"{c}.__init__" in names}
        graph[name] = {t if t in names else f"{t}.__init__" for t in targets} - {name}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == path[0]:
                cycles.append([*path, nxt])
            elif nxt not in path and len(path) < 8 and not nxt.endswith("__init__"):
                visit(nxt, [*path, nxt])

    for start in sorted(n for n in graph if not n.endswith("__init__")):
        visit(start, [start])
    assert cycles == []


def test_user_errors_are_shardfeed_errors() -> None:
    """Every error a user can fix derives from ShardfeedError: no bare ValueError or
    FileNotFoundError is raised anywhere in the package."""
    bare = [
        f"{dotted(path)}:{node.lineno}"
        for path in modules()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Raise)
        and isinstance(node.exc, ast.Call)
        and isinstance(node.exc.func, ast.Name)
        and node.exc.func.id in ("ValueError", "FileNotFoundError")
    ]
    assert bare == []


def test_the_architecture_page_names_every_module() -> None:
    """docs/architecture.md names each module: by its path (`write/shards.py`), by its file name in
    its stage's table where no other module has that name (`trainer.py`; one mention of
    `options.py` covered four modules), or by a pattern (`cli/*_cmd.py`)."""
    import fnmatch
    import re
    from collections import Counter

    page = (SRC.parents[1] / "docs" / "architecture.md").read_text()
    quoted = set(re.findall(r"`([^`\s]+\.py)`", page)) | set(re.findall(r"\b([a-z_]+/[a-z_*]+\.py)\b", page))
    named = Counter(path.name for path in modules())  # a file name several modules have names none of them
    missing = [
        rel
        for path in modules()
        if path.name != "__init__.py" and path.parent != SRC
        for rel in [path.relative_to(SRC).as_posix()]
        if rel not in quoted
        and not (path.name in quoted and named[path.name] == 1)
        and not any(fnmatch.fnmatch(rel, q) for q in quoted)
    ]
    assert missing == [], missing
