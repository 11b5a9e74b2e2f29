"""A task is a type (format/tasks.py): its facts in one registry, and a ratchet on the modules
that still compare task names instead of asking it (issue 80: 105 such comparisons in 33 modules
when it was filed; each move to the registry lowers a count here, and no count may grow)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

import shardfeed
from shardfeed.errors import ManifestError
from shardfeed.format import schema
from shardfeed.format.tasks import TASKS, task_of

SRC = Path(shardfeed.__file__).parent
NAMES = {"CLASSIFICATION", "SEGMENTATION", "MULTI_LABEL", "DETECTION"}
# Modules that still compare task names, and how often: lower a count when a comparison moves to
# the registry; a module not listed may compare none.
KNOWN = {
    "format/manifest_builder.py": 1,  # the manifest leaves out the default task
    "tools/dataset_info.py": 2,
    "tools/dataset_report.py": 1,
    "tools/foreign_scan.py": 4,
    "tools/preview.py": 5,
    "tools/verification.py": 6,
    "write/notes.py": 2,
    "write/sources/staging.py": 2,
    "write/sources/tables.py": 3,
}


def _is_task(node: ast.AST) -> bool:
    """A task name: schema.DETECTION, DETECTION, or the string 'detection'."""
    if isinstance(node, ast.Name | ast.Attribute):
        return (node.id if isinstance(node, ast.Name) else node.attr) in NAMES
    if isinstance(node, ast.Constant):
        return node.value in TASKS
    return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(_is_task(e) for e in node.elts)


def comparisons(path: Path) -> int:
    """How many `==`, `!=`, `in` and `not in` comparisons in `path` have a task name on one side."""
    found = 0
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            found += any(_is_task(side) for side in sides) and any(
                isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops
            )
    return found


def test_no_module_compares_task_names_more_than_it_did() -> None:
    counted = Counter(
        {
            rel: n
            for path in sorted(SRC.rglob("*.py"))
            if (rel := path.relative_to(SRC).as_posix()) != "format/tasks.py" and (n := comparisons(path))
        }
    )
    grown = {rel: (n, KNOWN.get(rel, 0)) for rel, n in counted.items() if n > KNOWN.get(rel, 0)}
    assert grown == {}, f"ask format/tasks.py instead of comparing task names (now, allowed): {grown}"
    lowered = {rel: (counted.get(rel, 0), n) for rel, n in KNOWN.items() if counted.get(rel, 0) < n}
    assert lowered == {}, f"fewer comparisons than KNOWN says (now, listed): lower KNOWN to match: {lowered}"


def test_the_counter_sees_each_form_of_comparison(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from shardfeed.format import schema\nfrom shardfeed.format.schema import DETECTION\n"
        "a = t == schema.DETECTION\nb = t != DETECTION\nc = t in (schema.SEGMENTATION, schema.MULTI_LABEL)\n"
        "d = t == 'classification'\ne = t == 'other'\n"
    )
    assert comparisons(module) == 4


def test_every_task_has_one_objective() -> None:
    """`train`, `evaluate`, `predict` and `report` ask training/tasks/ for each task's part."""
    from shardfeed.training.tasks import OBJECTIVES, objective_for

    assert set(OBJECTIVES) == set(TASKS)
    assert all(objective.task == name for name, objective in OBJECTIVES.items())
    assert objective_for(None) is OBJECTIVES[schema.CLASSIFICATION]
    assert {o.metric: o.mode for o in OBJECTIVES.values()} == {
        "accuracy": "max",
        "auc_pr": "max",
        "mean_iou": "max",
        "loss": "min",
    }


def test_each_task_says_its_facts() -> None:
    assert set(TASKS) == {schema.CLASSIFICATION, schema.MULTI_LABEL, schema.SEGMENTATION, schema.DETECTION}
    detection = task_of(schema.DETECTION)
    assert detection.label_base == 1 and detection.label_map and detection.target == "objects"
    assert schema.OBJECT_LABEL in detection.list_features and schema.SOURCE_ID not in detection.list_features
    assert task_of(None) is task_of(schema.CLASSIFICATION) and task_of(None).label_base == 0
    assert task_of(schema.SEGMENTATION).feature_types(True) == {**schema.IMAGE_TYPES, **schema.SEGMENTATION_TYPES}
    unlabeled = task_of(schema.CLASSIFICATION).feature_types(False)
    assert unlabeled == schema.IMAGE_TYPES
    renamed = task_of(schema.CLASSIFICATION).feature_types(True, schema.PRESETS["tfds"].keys)
    assert "image" in renamed and "label" in renamed and schema.LABEL not in renamed
    with pytest.raises(ManifestError, match="task 'captions' is not one this shardfeed knows"):
        task_of("captions")
