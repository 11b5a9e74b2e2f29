"""shardfeed: image datasets -> sharded TFRecords -> fast tf.data input pipelines.

The top level holds what a data pipeline needs every day: `convert` (with `ConvertOptions`,
`ImageOptions` and the source classes), `load`/`steps_per_epoch` (with `ReadConfig`,
`DecodeConfig`, `Augment`), the TensorFlow-free reader `IndexedRecords`, the manifest and the
errors. Tools live in `shardfeed.tools` (info, verify, show, shuffle_report, bench), Keras
training in `shardfeed.training` (train, evaluate, predict, fit_resumable, models), and the
reading order shared with PyTorch/Grain in `shardfeed.read.order` (global_order, GlobalOrderSampler).
"""

from shardfeed.errors import ConvertError as ConvertError
from shardfeed.errors import CorruptRecordError as CorruptRecordError
from shardfeed.errors import ManifestError as ManifestError
from shardfeed.errors import ShardfeedError as ShardfeedError
from shardfeed.errors import SourceError as SourceError
from shardfeed.format.manifest import Manifest as Manifest
from shardfeed.format.manifest import read as read_manifest
from shardfeed.read.augment import Augment as Augment
from shardfeed.read.dataset import load as load
from shardfeed.read.dataset import steps_per_epoch as steps_per_epoch
from shardfeed.read.indexed import IndexedRecords as IndexedRecords
from shardfeed.read.options import DecodeConfig as DecodeConfig
from shardfeed.read.options import ReadConfig as ReadConfig
from shardfeed.version import __version__ as __version__
from shardfeed.write.array_source import ArraySource as ArraySource
from shardfeed.write.convert import ConversionResult as ConversionResult
from shardfeed.write.convert import convert as convert
from shardfeed.write.images import ImageOptions as ImageOptions
from shardfeed.write.options import ConvertOptions as ConvertOptions
from shardfeed.write.sources import CsvSource as CsvSource
from shardfeed.write.sources import FilenameSource as FilenameSource
from shardfeed.write.sources import FolderSource as FolderSource
from shardfeed.write.sources import UnlabeledSource as UnlabeledSource

__all__ = [
    "ArraySource",
    "Augment",
    "ConversionResult",
    "ConvertError",
    "ConvertOptions",
    "CorruptRecordError",
    "CsvSource",
    "DecodeConfig",
    "FilenameSource",
    "FolderSource",
    "ImageOptions",
    "IndexedRecords",
    "Manifest",
    "ManifestError",
    "ReadConfig",
    "ShardfeedError",
    "SourceError",
    "UnlabeledSource",
    "__version__",
    "convert",
    "load",
    "read_manifest",
    "steps_per_epoch",
]
