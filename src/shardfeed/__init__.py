"""shardfeed: image datasets -> sharded TFRecords -> fast tf.data input pipelines.

The top level holds what a data pipeline needs every day: `convert` (with `ConvertOptions`,
`ImageOptions` and the source classes), `adopt` (other people's TFRecords, `AdoptOptions`; their
keys, wherever such records are read, as one `ForeignKeys`),
`load`/`steps_per_epoch` (with `ReadOptions`, `DecodeOptions`, `ServiceOptions`, `Augment`, `Mixture`), the
TensorFlow-free reader `IndexedRecords`, the manifest and the errors. Tools live in
`shardfeed.tools` (info, verify, show, shuffle_report, bench), Keras training in
`shardfeed.training` (train, TrainOptions, evaluate, predict, fit_resumable, models); both are
attributes of this package, imported on first use (without TensorFlow). The reading order shared
with PyTorch/Grain is in `shardfeed.read.order` (global_order, GlobalOrderSampler).
`ReadConfig`/`DecodeConfig` are the former names of `ReadOptions`/`DecodeOptions` (deprecated).
"""

import importlib
from typing import Any

from shardfeed.errors import CacheDiskFull as CacheDiskFull
from shardfeed.errors import ConvertError as ConvertError
from shardfeed.errors import CorruptRecordError as CorruptRecordError
from shardfeed.errors import ManifestError as ManifestError
from shardfeed.errors import MeasurementError as MeasurementError
from shardfeed.errors import MissingDependencyError as MissingDependencyError
from shardfeed.errors import NativeOpError as NativeOpError
from shardfeed.errors import OptionError as OptionError
from shardfeed.errors import RunFolderError as RunFolderError
from shardfeed.errors import ServiceError as ServiceError
from shardfeed.errors import ShardfeedError as ShardfeedError
from shardfeed.errors import SourceError as SourceError
from shardfeed.errors import StorageError as StorageError
from shardfeed.format.manifest import Manifest as Manifest
from shardfeed.format.manifest import read as read_manifest
from shardfeed.format.schema import ForeignKeys as ForeignKeys
from shardfeed.read.augment import Augment as Augment
from shardfeed.read.dataset import load as load
from shardfeed.read.dataset import steps_per_epoch as steps_per_epoch
from shardfeed.read.grain.pipeline import grain_dataset as grain_dataset
from shardfeed.read.indexed import IndexedRecords as IndexedRecords
from shardfeed.read.mixture import Mixture as Mixture
from shardfeed.read.options import DecodeOptions as DecodeOptions
from shardfeed.read.options import ReadOptions as ReadOptions
from shardfeed.read.options import ServiceOptions as ServiceOptions
from shardfeed.read.options import renamed as _renamed
from shardfeed.tools.adopt import AdoptOptions as AdoptOptions
from shardfeed.tools.adopt import adopt as adopt
from shardfeed.version import __version__ as __version__
from shardfeed.write.convert import ConversionResult as ConversionResult
from shardfeed.write.convert import convert as convert
from shardfeed.write.images import ImageOptions as ImageOptions
from shardfeed.write.options import ConvertOptions as ConvertOptions
from shardfeed.write.sources import CsvSource as CsvSource
from shardfeed.write.sources import FilenameSource as FilenameSource
from shardfeed.write.sources import FolderSource as FolderSource
from shardfeed.write.sources import UnlabeledSource as UnlabeledSource
from shardfeed.write.sources.arrays import ArraySource as ArraySource

__all__ = [
    "AdoptOptions",
    "ArraySource",
    "Augment",
    "CacheDiskFull",
    "ConversionResult",
    "ConvertError",
    "ConvertOptions",
    "CorruptRecordError",
    "CsvSource",
    "DecodeOptions",
    "FilenameSource",
    "FolderSource",
    "ForeignKeys",
    "ImageOptions",
    "IndexedRecords",
    "Manifest",
    "ManifestError",
    "MeasurementError",
    "MissingDependencyError",
    "Mixture",
    "NativeOpError",
    "OptionError",
    "ReadOptions",
    "RunFolderError",
    "ServiceError",
    "ServiceOptions",
    "ShardfeedError",
    "SourceError",
    "StorageError",
    "UnlabeledSource",
    "__version__",
    "adopt",
    "convert",
    "grain_dataset",
    "load",
    "read_manifest",
    "steps_per_epoch",
]

_SUBPACKAGES = ("tools", "training")


def __getattr__(name: str) -> Any:
    """`shardfeed.tools` and `shardfeed.training` on first use; the former option names, with a warning."""
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    try:
        return _renamed(name, globals())
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
