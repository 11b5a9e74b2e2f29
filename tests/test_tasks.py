"""A task is a type: its data facts in format/tasks.py (`TASKS`), its targets in read/targets/
(`TARGETS`), its objective in training/tasks/ (`OBJECTIVES`), and a fitness test in the style of
tests/test_layout.py: no other module compares a task name (issue 80: 105 such comparisons in 33
modules when it was filed), so a new task is a module in each of those three places."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import shardfeed
from shardfeed.errors import ManifestError
from shardfeed.format import schema
from shardfeed.format.tasks import TASKS, task_of

SRC = Path(shardfeed.__file__).parent
NAMES = {"CLASSIFICATION", "SEGMENTATION", "MULTI_LABEL", "DETECTION"}
REGISTRIES = ("format/tasks.py", "read/targets/", "training/tasks/")  # where a task's name may decide


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


def test_no_module_outside_the_registries_compares_task_names() -> None:
    """A stage asks the registries (a TaskSpec's facts, its Targets, its Objective) what a task
    does; comparing its name is how 105 branches in 33 modules came about."""
    found = {
        rel: n
        for path in sorted(SRC.rglob("*.py"))
        if not (rel := path.relative_to(SRC).as_posix()).startswith(REGISTRIES) and (n := comparisons(path))
    }
    assert found == {}, (
        f"ask format/tasks.py, read/targets/ or training/tasks/ instead of comparing task names: {found}"
    )


def test_every_task_has_its_targets() -> None:
    """`load`, `grain_dataset` and `IndexedRecords` ask read/targets/ for each task's part."""
    from shardfeed.read.targets import TARGETS, targets_of

    assert set(TARGETS) == set(TASKS)
    assert all(targets.task == name for name, targets in TARGETS.items())
    assert targets_of(None) is TARGETS[schema.CLASSIFICATION] and targets_of(TASKS[schema.DETECTION]).padded
    assert {name for name, t in TARGETS.items() if t.exact} == {schema.SEGMENTATION, schema.DETECTION}


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
