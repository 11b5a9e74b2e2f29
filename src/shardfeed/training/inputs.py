"""How a training run reads its data: the one place `train`, `fit_resumable`, evaluate and predict
call `load`, so the training stream and the evaluation pipeline cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardfeed.deprecation import RenamedAttribute
from shardfeed.read.augment import Augment
from shardfeed.read.dataset import load, steps_per_epoch
from shardfeed.read.options import DecodeOptions, ReadOptions, ServiceOptions
from shardfeed.read.shardset import DataPath


@dataclass(frozen=True)
class RunInputs:
    """A run's data and preprocessing.

    Attributes:
        path: a converted folder, or its `Manifest` (read once per run); `data`, its old name.
        batch_size, image_size, seed, augment, decode: as for `load`.
        train_data: what the training stream reads when it is not `path` (a `Mixture` whose
            first source is `path`: evaluation reads that source alone).
    """

    path: DataPath
    batch_size: int
    image_size: int | tuple[int, int]
    seed: int | None = None
    augment: bool | Augment | None = None
    decode: DecodeOptions | None = None
    train_data: DataPath | None = None

    data = RenamedAttribute("path")

    @property
    def trained_on(self) -> DataPath:
        """What the training stream reads (`train_data`, else `path`)."""
        return self.train_data if self.train_data is not None else self.path

    def training(
        self,
        split: str,
        *,
        read: ReadOptions | None = None,
        repeat: bool = True,
        service: str | ServiceOptions | None = None,
    ) -> Any:
        """The training stream of `split` (augmented, shuffled, whole batches)."""
        return load(
            self.trained_on,
            split=split,
            batch_size=self.batch_size,
            image_size=self.image_size,
            training=True,
            augment=self.augment,
            seed=self.seed,
            repeat=repeat,
            read=read,
            decode=self.decode,
            service=service,
        )

    def evaluation(self, split: str, *, batch_size: int | None = None, read: ReadOptions | None = None) -> Any:
        """`split` with evaluation preprocessing (centre crop, file order, every record)."""
        return load(
            self.path,
            split=split,
            batch_size=batch_size or self.batch_size,
            image_size=self.image_size,
            training=False,
            read=read,
            decode=self.decode,
        )

    def steps_per_epoch(self, split: str, read: ReadOptions | None = None) -> int:
        """Batches of one training epoch of `split` (what `training` yields per epoch)."""
        return steps_per_epoch(self.trained_on, split, self.batch_size, training=True, read=read)
