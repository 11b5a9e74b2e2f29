"""shardfeed: image datasets -> sharded TFRecords -> fast tf.data input pipelines."""

from shardfeed.augment import Augment as Augment
from shardfeed.convert import ConversionResult as ConversionResult
from shardfeed.convert import ConvertError as ConvertError
from shardfeed.convert import ConvertOptions as ConvertOptions
from shardfeed.convert import convert as convert
from shardfeed.dataset import load as load
from shardfeed.dataset import steps_per_epoch as steps_per_epoch
from shardfeed.evaluate import evaluate as evaluate
from shardfeed.images import ImageOptions as ImageOptions
from shardfeed.indexed import GlobalOrderSampler as GlobalOrderSampler
from shardfeed.indexed import IndexedRecords as IndexedRecords
from shardfeed.indexed import global_order as global_order
from shardfeed.info import info as info
from shardfeed.manifest import Manifest as Manifest
from shardfeed.manifest import ManifestError as ManifestError
from shardfeed.manifest import read as read_manifest
from shardfeed.models import build_model as build_model
from shardfeed.models import load_model as load_model
from shardfeed.predict import predict as predict
from shardfeed.resume import fit_resumable as fit_resumable
from shardfeed.resume import read_resume_point as read_resume_point
from shardfeed.show import show as show
from shardfeed.sources import ArraySource as ArraySource
from shardfeed.sources import CsvSource as CsvSource
from shardfeed.sources import FilenameSource as FilenameSource
from shardfeed.sources import FolderSource as FolderSource
from shardfeed.sources import SourceError as SourceError
from shardfeed.sources import UnlabeledSource as UnlabeledSource
from shardfeed.train import train as train
from shardfeed.verify import verify as verify
from shardfeed.version import __version__ as __version__

__all__ = [
    "ArraySource",
    "Augment",
    "ConversionResult",
    "ConvertError",
    "ConvertOptions",
    "CsvSource",
    "FilenameSource",
    "FolderSource",
    "GlobalOrderSampler",
    "ImageOptions",
    "IndexedRecords",
    "Manifest",
    "ManifestError",
    "SourceError",
    "UnlabeledSource",
    "__version__",
    "build_model",
    "convert",
    "evaluate",
    "fit_resumable",
    "global_order",
    "info",
    "load",
    "load_model",
    "predict",
    "read_manifest",
    "read_resume_point",
    "show",
    "steps_per_epoch",
    "train",
    "verify",
]
