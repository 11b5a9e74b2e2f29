"""FFCV 1.0.2 on bench_peers' corpus: one training epoch measured, run by an interpreter that has FFCV.

    FFCV_PYTHON bench/ffcv_peer.py CORPUS BETON_DIR {jpeg,raw} THREADS

bench/bench_peers.py runs this in a fresh process per round when given `--ffcv-python`; it is
not part of the project's environment (FFCV is a bench-only peer, never installed by CI). FFCV's
only release is built from source against OpenCV's and libjpeg-turbo's headers; on this Debian
machine (the commands that built the one measured in docs/benchmarks/load.md):

    apt-get install -y --no-install-recommends libopencv-dev libturbojpeg0-dev pkg-config
    python3.11 -m venv /tmp/ffcv-venv
    /tmp/ffcv-venv/bin/pip install torch==2.13.0 numpy numba terminaltables pytorch_pfn_extras \
        fastargs opencv-python-headless assertpy tqdm psutil pillow setuptools wheel
    /tmp/ffcv-venv/bin/pip install --no-deps --no-build-isolation ffcv==1.0.2

(`--no-deps`: FFCV's metadata also asks for `opencv-python`, which the headless wheel stands in
for.) The dataset file is written once into BETON_DIR and kept for later rounds:

  jpeg  every JPEG's original bytes, as `load`'s shards keep them (FFCV's own `RGBImageField`
        always re-encodes at quality 90: a subclass here stores the bytes as they are); FFCV
        decodes each whole (libjpeg-turbo, fast DCT), crops and resizes with OpenCV's INTER_AREA
  raw   decoded pixels (FFCV's `write_mode="raw"`): no decode when reading, a file ~11x the JPEGs

Read as FFCV's ImageNet example reads: `RandomResizedCropRGBImageDecoder((224, 224))` (scale
0.08-1, ratio 3/4-4/3, as `load`'s), `RandomHorizontalFlip`, `ToTensor`, batch 64, random order,
THREADS threads (FFCV's `num_workers` are threads of this process, so its CPU time counts them).
The first two batches (numba compiles FFCV's pipeline then) are not timed: bench/report.py's
`epoch_rate`, as bench_peers' other script pipelines. Prints one JSON line: images,
images_per_second, cpu_cores_used.
"""

import json
import os
import sys

import numpy as np
from ffcv.fields import IntField, RGBImageField
from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
from ffcv.fields.rgb_image import IMAGE_MODES
from ffcv.loader import Loader, OrderOption
from ffcv.transforms import RandomHorizontalFlip, ToTensor
from ffcv.writer import DatasetWriter
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
from bench.report import epoch_rate  # standard library only: importable from FFCV's venv


class OriginalJpegField(RGBImageField):
    """An `RGBImageField` that stores a JPEG file's bytes as they are (no decode, no re-encode)."""

    def encode(self, destination, path, malloc):
        with Image.open(path) as image:
            width, height = image.size
        data = np.fromfile(path, dtype=np.uint8)
        destination["mode"] = IMAGE_MODES["jpg"]
        destination["height"], destination["width"] = height, width
        destination["data_ptr"], storage = malloc(data.nbytes)
        storage[:] = data


class Photos:
    """The corpus' JPEGs (one folder a class) as FFCV's writer takes an indexed dataset."""

    def __init__(self, folder: str, mode: str):
        classes = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
        self.items = [
            (os.path.join(folder, label, name), index)
            for index, label in enumerate(classes)
            for name in sorted(os.listdir(os.path.join(folder, label)))
        ]
        self.mode = mode

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        path, label = self.items[index]
        if self.mode == "jpeg":
            return path, label
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB")), label


def page_size(photos: Photos) -> int:
    """FFCV's page size for these images: a power of two holding the largest stored image twice
    over (FFCV's writer waits forever on an image larger than a page; its default is 8 MiB, less
    than one raw phone photo)."""
    largest = 0
    for path, _ in photos.items:
        if photos.mode == "jpeg":
            largest = max(largest, os.path.getsize(path))
        else:
            with Image.open(path) as image:
                largest = max(largest, image.size[0] * image.size[1] * 3)
    return max(1 << 23, 1 << (2 * largest).bit_length())


def beton(folder: str, out_dir: str, mode: str, threads: int) -> str:
    """The corpus as an FFCV dataset file, written once."""
    path = os.path.join(out_dir, f"{mode}.beton")
    if not os.path.exists(path):
        os.makedirs(out_dir, exist_ok=True)
        field = OriginalJpegField() if mode == "jpeg" else RGBImageField(write_mode="raw")
        photos = Photos(folder, mode)
        fields = {"image": field, "label": IntField()}
        writer = DatasetWriter(path + ".partial", fields, page_size=page_size(photos), num_workers=threads)
        writer.from_indexed_dataset(photos)
        os.replace(path + ".partial", path)
    return path


def main() -> None:
    folder, out_dir, mode, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    loader = Loader(
        beton(folder, out_dir, mode, threads),
        batch_size=64,
        num_workers=threads,
        order=OrderOption.RANDOM,
        drop_last=True,
        seed=0,
        custom_fields={"image": OriginalJpegField} if mode == "jpeg" else {},
        pipelines={
            "image": [RandomResizedCropRGBImageDecoder((224, 224)), RandomHorizontalFlip(), ToTensor()],
            "label": [IntDecoder(), ToTensor()],
        },
    )
    print(json.dumps(epoch_rate(loader)))


if __name__ == "__main__":
    main()
