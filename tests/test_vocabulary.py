"""One vocabulary across the public API: the converted folder is `path`, a run folder `run_dir`,
an output folder `output_dir`, an output file `output`; shared defaults come from one place; old
parameter names still work, with a DeprecationWarning that names the new one."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shardfeed
from shardfeed import OptionError, ShardfeedError, tools, training
from shardfeed.deprecation import renamed
from shardfeed.read.options import BATCH_SIZE, IMAGE_SIZE
from shardfeed.training.run_report import run_report

OLD_NAMES = {"data", "out", "output_csv", "data_dir", "out_dir", "folder", "dataset"}
# `show` draws tiles: its image_size is the tile's side, not a model's input
OWN_IMAGE_SIZE = {"show"}


def public_callables() -> list[tuple[str, Callable[..., Any]]]:
    found = [(n, getattr(shardfeed, n)) for n in ("convert", "adopt", "load", "steps_per_epoch", "grain_dataset")]
    found += [(n, getattr(tools, n)) for n in tools.__all__]
    found += [(n, getattr(training, n)) for n in training.__all__]
    return [(n, f) for n, f in found if inspect.isfunction(f)]


def test_every_public_function_uses_the_one_vocabulary() -> None:
    assert len(public_callables()) >= 15
    clashes = {n: sorted(set(inspect.signature(f).parameters) & OLD_NAMES) for n, f in public_callables()}
    assert {n: c for n, c in clashes.items() if c} == {}


def test_shared_defaults_come_from_one_place() -> None:
    batch, size = {}, {}
    for name, function in public_callables():
        params = inspect.signature(function).parameters
        if "batch_size" in params and params["batch_size"].default not in (None, inspect.Parameter.empty):
            batch[name] = params["batch_size"].default
        if (
            "image_size" in params
            and name not in OWN_IMAGE_SIZE
            and params["image_size"].default is not inspect.Parameter.empty
        ):
            size[name] = params["image_size"].default
    assert {"load", "steps_per_epoch", "grain_dataset", "bench"} <= set(batch)
    assert set(batch.values()) == {BATCH_SIZE} and set(size.values()) == {IMAGE_SIZE}
    # TrainOptions leaves the size to the task (None: 224, a segmentation run's images' own up to it)
    assert training.TrainOptions().batch == BATCH_SIZE and training.TrainOptions().side == IMAGE_SIZE


def test_readers_that_feed_training_have_no_seed_by_default() -> None:
    """Without a seed each run draws its own order (as tf.data and Keras do); a seed makes it exact."""
    for function in (shardfeed.load, shardfeed.grain_dataset):
        assert inspect.signature(function).parameters["seed"].default is None


def test_an_old_name_warns_and_arrives_under_the_new_one() -> None:
    @renamed(out="output_dir")
    def write(source: str, output_dir: str | None = None) -> str:
        return f"{source}->{output_dir}"

    with pytest.warns(DeprecationWarning, match=r"write\(out=...\) is deprecated; use output_dir="):
        assert write("a", out="b") == "a->b"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert write("a", output_dir="b") == "a->b"
    with pytest.raises(OptionError, match="out= is the old name of output_dir="):
        write("a", out="b", output_dir="c")


def test_the_public_records_name_the_folder_path(tmp_path: Path) -> None:
    """RunRecord and RunInputs hold the converted folder as `path`, as every function takes it;
    run.json says "path"; a run.json written before (with "data") still reads, and `.data`
    still answers, with a warning."""
    import dataclasses
    import json

    from shardfeed.training import RunFolder, RunInputs, RunRecord, TrainOptions

    for cls in (RunRecord, RunInputs):
        names = {f.name for f in dataclasses.fields(cls)}
        assert "path" in names and not names & OLD_NAMES, cls
    record = RunRecord.of(str(tmp_path / "digits"), TrainOptions(image_size=32), ["a", "b"], "validation")
    folder = RunFolder(str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    folder.write_record(record)
    written = json.loads((tmp_path / "run" / "run.json").read_text())
    assert written["path"] == str(tmp_path / "digits") and "data" not in written
    written["data"] = written.pop("path")  # as runs before the rename wrote it
    (tmp_path / "run" / "run.json").write_text(json.dumps(written))
    old = folder.read_record()
    assert old == record
    with pytest.warns(DeprecationWarning, match=r"RunRecord.data is deprecated; use RunRecord.path"):
        assert old.data == str(tmp_path / "digits")
    with pytest.warns(DeprecationWarning, match=r"RunInputs.data is deprecated; use RunInputs.path"):
        assert old.inputs().data == str(tmp_path / "digits")


def test_public_functions_take_their_old_names(tmp_path: Path) -> None:
    """The renamed parameters of adopt, run_report and evaluate reach the function: it fails on
    the missing folder it was given, after the warning."""
    missing = str(tmp_path / "missing")
    calls = [
        lambda: shardfeed.adopt(str(tmp_path / "*.tfrecord"), out=str(tmp_path / "adopted")),
        lambda: run_report(missing, data=missing),
        lambda: training.evaluate(missing, data=missing),
        lambda: training.train(missing, out=str(tmp_path / "run")),
    ]
    for call in calls:
        with pytest.warns(DeprecationWarning, match="is deprecated; use"), pytest.raises(ShardfeedError):
            call()


def test_foreign_keys_are_one_object_and_the_flat_names_still_work() -> None:
    """`ReadOptions`, `AdoptOptions`, `verify` and `info` take other people's keys as one
    `ForeignKeys`; the old flat keywords warn and give the same options."""
    from shardfeed import AdoptOptions, ForeignKeys, ReadOptions

    keys = ForeignKeys(image_key="image", label_key="class", label_offset=1)
    with pytest.warns(DeprecationWarning, match=r"ReadOptions\(image_key=, label_key=, label_offset=\) is deprecated"):
        old = ReadOptions(image_key="image", label_key="class", label_offset=1)
    assert old == ReadOptions(foreign=keys) and old.foreign == keys
    with pytest.warns(DeprecationWarning, match=r"AdoptOptions\(label_offset=\) is deprecated"):
        adopt_old = AdoptOptions(label_offset=1)
    assert adopt_old == AdoptOptions(foreign=ForeignKeys(label_offset=1)) and adopt_old.offset == 1
    assert AdoptOptions().recorded() == {  # what manifests of adopted folders hold, as before
        "image_key": None,
        "label_key": None,
        "label_offset": 0,
        "split_pattern": None,
        "labels_file": None,
    }
    with pytest.raises(OptionError, match="pass the keys once"):
        ReadOptions(foreign=keys, label_key="label")
    with pytest.raises(OptionError, match="label_offset must be a non-negative integer"):
        ForeignKeys(label_offset=-1)
    for function in (tools.verify, tools.info):
        params = inspect.signature(function).parameters
        assert "foreign" in params and not {"image_key", "label_key", "label_offset", "foreign_keys"} & set(params)


def test_info_and_verify_take_the_old_keywords(tmp_path: Path) -> None:
    from shardfeed import AdoptOptions

    missing = str(tmp_path / "none-*.tfrecord")
    with pytest.warns(DeprecationWarning, match=r"info\(label_key=\) is deprecated"), pytest.raises(ShardfeedError):
        tools.info(missing, label_key="label")
    with pytest.warns(DeprecationWarning, match=r"verify\(foreign_keys=...\)"), pytest.raises(ShardfeedError):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # AdoptOptions' own, tested above
            options = AdoptOptions(label_offset=1)
        tools.verify(missing, progress=False, foreign_keys=options)
