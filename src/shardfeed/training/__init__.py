"""Keras training on converted shards: models, fit (with exact resume), evaluation, prediction."""

from shardfeed.training.evaluation import evaluate as evaluate
from shardfeed.training.inputs import RunInputs as RunInputs
from shardfeed.training.models import load_model as load_model
from shardfeed.training.options import TrainOptions as TrainOptions
from shardfeed.training.prediction import predict as predict
from shardfeed.training.resume import fit_resumable as fit_resumable
from shardfeed.training.resume import read_resume_point as read_resume_point
from shardfeed.training.run_folder import RunFolder as RunFolder
from shardfeed.training.run_folder import RunRecord as RunRecord
from shardfeed.training.tasks import build_model as build_model
from shardfeed.training.trainer import train as train

__all__ = [
    "RunFolder",
    "RunInputs",
    "RunRecord",
    "TrainOptions",
    "build_model",
    "evaluate",
    "fit_resumable",
    "load_model",
    "predict",
    "read_resume_point",
    "train",
]
