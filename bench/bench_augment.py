"""Which augmentation fits which data: validation accuracy of each `train --augment` preset, and
what `--augment auto` picks, on three real corpora.

    .venv/bin/python bench/bench_augment.py [--json bench/results/bench_augment.json]

- digits: scikit-learn's 1,797 handwritten digits as 32-px PNGs (the demo's data and split);
- faces: scikit-image's LFW subset, 100 faces and 100 non-faces, 25 px;
- photos: 1,200 JPEG crops (128-400 px) of the 8 real photos scikit-image ships, labelled by photo.

Every run: small_cnn, seed 0, learning rate 1e-2, the same converted split. Accuracy, not speed,
so runs share one process (each `train` seeds itself).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import PHOTOS
from bench.report import emit

PRESETS = ("inception", "light", "none")


def digits(root: Path) -> Path:
    from shardfeed.training.samples import write_digits_folders

    return Path(write_digits_folders(str(root), holdout=100)[0])


def faces(root: Path) -> Path:
    import skimage.data

    images = (skimage.data.lfw_subset() * 255).round().astype(np.uint8)
    for i, image in enumerate(images):
        folder = root / ("face" if i < 100 else "not_face")
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(folder / f"{i:03d}.png")
    return root


def photos(root: Path, count: int = 1200) -> Path:
    import skimage.data

    rng = np.random.default_rng(0)
    sources = {name: getattr(skimage.data, name)()[..., :3] for name in PHOTOS}
    for i in range(count):
        name = PHOTOS[i % len(PHOTOS)]
        photo = sources[name]
        h, w = photo.shape[:2]
        ch, cw = int(rng.integers(128, min(h, 400))), int(rng.integers(128, min(w, 400)))
        y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        crop = np.ascontiguousarray(photo[y : y + ch, x : x + cw])
        Image.fromarray(crop).save(folder / f"{i:05d}.jpg", quality=90)
    return root


CORPORA = {  # name: (builder, image_size, epochs, batch_size)
    "digits": (digits, 32, 20, 64),
    "faces": (faces, 32, 30, 16),
    "photos": (photos, 64, 15, 64),
}


def measure(name: str, work: Path) -> dict[str, object]:
    from shardfeed import ConvertOptions, convert
    from shardfeed.training import evaluate, train
    from shardfeed.training.augment_choice import choose_augment
    from shardfeed.training.options import TrainOptions

    build, size, epochs, batch = CORPORA[name]
    source = build(work / name / "images")
    shards = str(work / name / "shards")
    convert(str(source), shards, ConvertOptions(split="train=0.8,validation=0.2", shards=4, seed=0), progress=False)
    choice = choose_augment(shards, "train")
    accuracy = {}
    for preset in PRESETS:
        run = str(work / name / f"run-{preset}")
        options = TrainOptions(
            epochs=epochs, batch_size=batch, image_size=size, learning_rate=1e-2, augment=preset, crop_fraction=1.0
        )
        train(shards, run, options, verbose=0)
        accuracy[preset] = round(evaluate(run, shards, split="validation")["accuracy"], 4)
    return {"image_size": size, "epochs": epochs, "auto": choice.preset, "reason": choice.reason, "accuracy": accuracy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--corpora", default=",".join(CORPORA))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {name: measure(name, Path(tmp)) for name in args.corpora.split(",")}
    emit({"bench": "augment", "results": results}, args.json)


if __name__ == "__main__":
    main()
