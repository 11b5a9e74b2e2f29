"""Every mistake a user can fix is a ShardfeedError (and keeps its built-in base), for every options
class and the entry points' own argument checks; the former option names still work, with a warning."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shardfeed
from shardfeed import (
    Augment,
    ConvertOptions,
    DecodeOptions,
    ImageOptions,
    OptionError,
    ReadOptions,
    RunFolderError,
    ServiceOptions,
    ShardfeedError,
)
from shardfeed.read.order import WorkerShare
from shardfeed.tools.pipelines import PipelineSpec
from shardfeed.training import TrainOptions

OPTIONS: list[tuple[Callable[[], Any], str]] = [
    (lambda: ConvertOptions(split="train=0.5"), "must add up to 1"),
    (lambda: ConvertOptions(shards=0), "shards must be >= 1"),
    (lambda: ConvertOptions(label_offset=-1), "label_offset must be a non-negative integer"),
    (lambda: ImageOptions(quality=0), r"quality must be in 1\.\.100"),
    (lambda: ImageOptions(resize=10, max_size=10), "exclude each other"),
    (lambda: ReadOptions(shuffle="random"), r"shuffle must be one of \['buffer', 'global'\]"),
    (lambda: ReadOptions(num_workers=2, worker_index=2), r"worker_index must be in 0\.\.1 for 2 workers"),
    (lambda: ReadOptions(shuffle="global", cache=True), "cache= does not apply with shuffle='global'"),
    (lambda: ReadOptions(start_step=3), "epoch, start_step and start_record need shuffle='global'"),
    (lambda: DecodeOptions(channels=2), "channels must be 1 or 3"),
    (lambda: ServiceOptions("grpc://h:1", mode="everywhere"), "service mode must be one of"),
    (lambda: ServiceOptions("http://h:1"), "service must look like grpc://HOST:PORT"),
    (lambda: Augment(rotate=200), r"rotate is a maximum angle in degrees, 0\.\.180"),
    (lambda: TrainOptions(epochs=0), r"epochs must be >= 1, got 0 \(--epochs\)"),
    (lambda: TrainOptions(model="vgg"), "model must be one of"),
    (lambda: WorkerShare(3, 3), r"worker_index must be in 0\.\.2 for 3 workers, got 3"),
    (lambda: WorkerShare(2, 0, even="odd"), "even must be None, 'drop' or 'pad'"),
    (lambda: PipelineSpec("fastest", "x"), "pipeline kind must be one of"),
]


@pytest.mark.parametrize("number", range(len(OPTIONS)))
def test_every_options_class_raises_an_option_error(number: int) -> None:
    make, message = OPTIONS[number]
    with pytest.raises(OptionError, match=message) as caught:
        make()
    assert isinstance(caught.value, ShardfeedError) and isinstance(caught.value, ValueError)


def test_entry_points_check_their_arguments(photo_shards: Path, photo_tree: Path, tmp_path: Path) -> None:
    data = str(photo_shards)
    checks: list[tuple[Callable[[], Any], type[ShardfeedError], str]] = [
        (lambda: shardfeed.load(data, batch_size=0), OptionError, "batch_size must be a positive integer"),
        (lambda: shardfeed.load(data, image_size=0), OptionError, "image_size must be a positive int"),
        (lambda: shardfeed.steps_per_epoch(data, batch_size=-1), OptionError, "batch_size must be a positive"),
        (lambda: shardfeed.load(data, split="test"), shardfeed.ManifestError, r"split 'test' not in"),
        (
            lambda: shardfeed.convert(str(photo_tree), str(tmp_path / "a"), workers=0),
            OptionError,
            "workers must be >= 1",
        ),
        (
            lambda: shardfeed.convert(str(photo_tree), str(tmp_path / "b"), runner="spark"),
            OptionError,
            "runner must be one of",
        ),
        (lambda: shardfeed.tools.show(data, rows=0), OptionError, "rows and cols must be >= 1"),
        (
            lambda: shardfeed.tools.bench(data, read=ReadOptions(filter_fn=bool), compare_folder="x"),
            OptionError,
            "filter_fn",
        ),
        (lambda: shardfeed.training.evaluate(str(tmp_path)), RunFolderError, "is not a shardfeed training run"),
        (
            lambda: shardfeed.training.train(data, str(tmp_path / "run"), TrainOptions(batch_size=500)),
            OptionError,
            "fewer than one batch of 500",
        ),
        (
            lambda: shardfeed.training.train(data, str(tmp_path / "run"), TrainOptions(batch_size=4), resume=True),
            RunFolderError,
            "nothing to resume",
        ),
    ]
    for call, error, message in checks:
        with pytest.raises(error, match=message):
            call()
    with pytest.raises(FileNotFoundError):  # the built-in base still catches it
        shardfeed.training.RunFolder(str(tmp_path)).model_file()


def test_former_option_names_still_work_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="ReadConfig is now ReadOptions"):
        old = shardfeed.ReadConfig(shuffle="global")  # type: ignore[attr-defined]
    assert old == ReadOptions(shuffle="global")
    with pytest.warns(DeprecationWarning, match="DecodeConfig is now DecodeOptions"):
        from shardfeed.read.options import DecodeConfig  # type: ignore[attr-defined]
    assert DecodeConfig is DecodeOptions
    with pytest.raises(AttributeError, match="has no attribute 'ReadConfiguration'"):
        _ = shardfeed.ReadConfiguration  # type: ignore[attr-defined]


def test_tools_and_training_are_attributes_without_tensorflow() -> None:
    """`import shardfeed` then `shardfeed.tools.verify`: imported on first use, TensorFlow not loaded."""
    code = (
        "import sys, shardfeed\n"
        "assert callable(shardfeed.tools.verify) and callable(shardfeed.training.train)\n"
        "assert shardfeed.training.TrainOptions().total_epochs >= 1\n"
        "print('tensorflow' in sys.modules, 'keras' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["False", "False"]


def test_an_error_raised_inside_a_pipeline_reaches_python_as_shardfeeds_own() -> None:
    """A StorageError raised by our Python inside tf.data (a bucket read) arrived as TensorFlow's
    UnknownError with a traceback in its text: `errors.from_tensorflow` makes it the error it
    was, with its one-line message; an error that is not ours stays None."""
    import tensorflow as tf

    from shardfeed.errors import from_tensorflow
    from shardfeed.format.storage import StorageError

    def read(i: object) -> object:
        raise StorageError("cannot read s3://bucket/d/train-00003-of-00004 after 3 attempts: the store is unreachable")

    ds = tf.data.Dataset.range(3).map(lambda i: tf.numpy_function(read, [i], tf.int64))
    with pytest.raises(tf.errors.UnknownError) as raised:
        next(iter(ds))
    ours = from_tensorflow(raised.value)
    assert type(ours) is StorageError
    assert str(ours) == "cannot read s3://bucket/d/train-00003-of-00004 after 3 attempts: the store is unreachable"
    assert from_tensorflow(tf.errors.UnknownError(None, None, "ValueError: not ours")) is None
