"""`load` against every peer of the speed issue's table, in one command.

    .venv/bin/python bench/bench_peers.py [--images 4000] [--rounds 3] [--threads 2] [--corpus photos] \
        [--ffcv-python /tmp/ffcv-venv/bin/python] [--json bench/results/bench_peers.json]

The same real-photo JPEGs (bench/corpus.py: `photos` 200-500 px, `coco_sized` 640 px on the long
side as COCO's and about ImageNet's, `large` phone-sized 3-12 MP), one training epoch at 224 px, batch 64,
random-resized crop and flip; each pipeline in its own fresh process, rounds interleaved (the
order reversed every other round); best and median images/s and CPU ms an image; the machine's
load average before and after. The pipelines:

  shardfeed       `load` on the folder converted with `shardfeed convert` (bytes kept)
  plain_tfdata    the per-record tf.data pipeline written by hand on the same shards
  tfds_expert     the same images as a prepared TFDS dataset (written here by a TFDS builder),
                  read as the TF Model Garden reads ImageNet: SkipDecoding, decode_and_crop_jpeg
  keras_folder    `image_dataset_from_directory` on the image folder
  hf_tf_dataset   Hugging Face `datasets`' documented TensorFlow path on a save_to_disk copy
  grain_dataset   shardfeed's TensorFlow-free feed (`--threads` threads, no worker processes)
  keras_grain     Keras' own Grain-backed folder loader, `image_dataset_from_directory(...,
                  format="grain")`, on its PyTorch backend (whole images resized, no crop; on
                  the JAX backend it recompiles its resize for each new image size)
  torch_loader    a PyTorch DataLoader over `IndexedRecords` (`--threads` worker processes,
                  the global-order sampler), each record decoded and augmented as torchvision's
                  ImageNet recipe does on PIL images (pil_loader, RandomResizedCrop's
                  parameters, crop + bilinear resize, random flip)
  decode_limit    every JPEG decoded whole from memory by simplejpeg on `--threads` threads:
                  no reading, cropping, resizing or batching (the decode's own cost)
  decode_fastdct  the same with simplejpeg's fast DCT and upsampling
  ffcv            FFCV 1.0.2 on the JPEGs' original bytes (whole-image decode, fast DCT, OpenCV's
                  INTER_AREA resize), `--threads` threads: bench/ffcv_peer.py run by `--ffcv-python`
  ffcv_raw        the same on decoded pixels stored raw (FFCV's write_mode="raw"; ~11x the disk)

FFCV is a bench-only peer built from source (bench/ffcv_peer.py says how); without
`--ffcv-python` the two are left out and the results say so under `not_run`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.bench_convert import _python
from bench.bench_grain import _grain
from bench.bench_hub import _hub_copies
from bench.bench_load import convert_once
from bench.corpus import build_coco_sized_corpus, build_corpus, build_large_corpus
from bench.report import emit
from shardfeed.tools.fresh_runs import ratio, run_fresh, summary
from shardfeed.tools.pipelines import PipelineSpec

TFDS_BUILDER = """import json, os, sys
import tensorflow_datasets as tfds
folder, data_dir = sys.argv[1], sys.argv[2]
classes = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))

class PeerPhotos(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        image, label = tfds.features.Image(encoding_format="jpeg"), tfds.features.ClassLabel(names=classes)
        features = tfds.features.FeaturesDict({"image": image, "label": label})
        return tfds.core.DatasetInfo(builder=self, features=features)

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for label in classes:
            for name in sorted(f for f in os.listdir(os.path.join(folder, label)) if f.endswith((".jpg", ".jpeg"))):
                yield f"{label}/{name}", {"image": os.path.join(folder, label, name), "label": label}

builder = PeerPhotos(data_dir=data_dir)
builder.download_and_prepare(file_format="tfrecord")
print(json.dumps({"data_dir": builder.data_dir}))
"""

DECODE_LIMIT = """import json, os, sys, time
from concurrent.futures import ThreadPoolExecutor
import simplejpeg
folder, threads, fast = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "fast"
data = [open(os.path.join(d, f), "rb").read() for d, _, fs in sorted(os.walk(folder)) for f in sorted(fs)]
decode = lambda b: simplejpeg.decode_jpeg(b, fastdct=fast, fastupsample=fast).shape
with ThreadPoolExecutor(threads) as pool:
    list(pool.map(decode, data[:256]))  # warm-up
    start, cpu0 = time.perf_counter(), time.process_time()
    list(pool.map(decode, data, chunksize=16))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
print(json.dumps({"images": len(data), "images_per_second": len(data) / wall, "cpu_cores_used": cpu / wall}))
"""


KERAS_GRAIN = """import json, os, sys
os.environ["KERAS_BACKEND"] = "torch"
import keras
sys.path.insert(0, sys.argv[2])  # the repository
from bench.report import epoch_rate
ds = keras.utils.image_dataset_from_directory(sys.argv[1], format="grain", batch_size=64, image_size=(224, 224), seed=0)
print(json.dumps(epoch_rate(ds)))
"""

TORCH_LOADER = """import io, json, math, random, sys
import numpy as np, torch
from PIL import Image
from shardfeed import IndexedRecords
sys.path.insert(0, sys.argv[3])  # the repository: its DataLoader workers are other processes, so
from bench.report import epoch_rate, host_cpu_seconds  # the host's busy CPU (/proc/stat) counts theirs

def window(height, width):  # torchvision's RandomResizedCrop.get_params, scale (0.08, 1), ratio (3/4, 4/3)
    area = height * width
    for _ in range(10):
        target = area * random.uniform(0.08, 1.0)
        ratio = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
        w, h = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            return random.randint(0, height - h), random.randint(0, width - w), h, w
    side = min(height, width)
    return (height - side) // 2, (width - side) // 2, side, side

class Photos(torch.utils.data.Dataset):
    def __init__(self, records):
        self.records = records
    def __len__(self):
        return len(self.records)
    def __getitem__(self, index):
        data, label = self.records.encoded(index)
        image = Image.open(io.BytesIO(data)).convert("RGB")  # torchvision's pil_loader
        top, left, h, w = window(image.height, image.width)
        image = image.resize((224, 224), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h))
        if random.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.asarray(image)), label

records = IndexedRecords(sys.argv[1], split="train")
workers = int(sys.argv[2])
loader = torch.utils.data.DataLoader(
    Photos(records), batch_size=64, sampler=records.sampler(seed=0), num_workers=workers, drop_last=True
)
print(json.dumps(epoch_rate(loader, host_cpu_seconds)))
"""


FFCV_TIMEOUT = 3600  # seconds: writing a corpus' FFCV file, then one epoch (a hang fails the round)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPORA = {"photos": build_corpus, "coco_sized": build_coco_sized_corpus, "large": build_large_corpus}


def _script(code: str, *args: str) -> dict[str, Any]:
    """The JSON line a bench script printed last (its own fresh process: bench_convert's runner)."""
    return dict(json.loads(_python(code, *args)))


def tfds_copy(folder: str, work: Path) -> str:
    """The image folder's JPEGs as a prepared TFDS dataset (their bytes as they are); its version folder."""
    data_dir = work / "tfds"
    found = sorted(data_dir.glob("peer_photos/1.0.0"))
    if found and (found[0] / "dataset_info.json").exists():
        return str(found[0])
    return str(_script(TFDS_BUILDER, folder, str(data_dir))["data_dir"])


def _ffcv(python: str, corpus: str, work: Path, mode: str, threads: int) -> dict[str, Any]:
    """FFCV measured once by bench/ffcv_peer.py in a fresh process of FFCV's own interpreter."""
    script = os.path.join(ROOT, "bench", "ffcv_peer.py")
    args = [python, script, corpus, str(work / "ffcv"), mode, str(threads)]
    done = subprocess.run(args, capture_output=True, text=True, check=True, timeout=FFCV_TIMEOUT)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def runners(
    corpus: str, work: Path, images: int, threads: int, ffcv_python: str | None = None
) -> dict[str, Callable[[], dict[str, Any]]]:
    """Every pipeline compared, as a function that measures it once in a fresh process."""
    shards = convert_once(corpus, str(work / "keep"), None)
    saved = str(work / "hub" / "saved")
    if not os.path.exists(os.path.join(saved, "dataset_dict.json")):
        saved, _ = _hub_copies(corpus, work / "hub")
    specs = {
        "shardfeed": PipelineSpec("shardfeed", shards),
        "plain_tfdata": PipelineSpec("plain_tfdata", shards),
        "tfds_expert": PipelineSpec("tfds_expert", tfds_copy(corpus, work)),
        "keras_folder": PipelineSpec("keras_folder", corpus),
        "hf_tf_dataset": PipelineSpec("hf_tf_dataset", saved),
    }
    out: dict[str, Callable[[], dict[str, Any]]] = {name: (lambda s=spec: run_fresh(s)) for name, spec in specs.items()}
    out["grain_dataset"] = lambda: _grain(shards, threads)
    out["keras_grain"] = lambda: _script(KERAS_GRAIN, corpus, ROOT)
    out["torch_loader"] = lambda: _script(TORCH_LOADER, shards, str(threads), ROOT)
    out["decode_limit"] = lambda: _script(DECODE_LIMIT, corpus, str(threads), "exact")
    out["decode_fastdct"] = lambda: _script(DECODE_LIMIT, corpus, str(threads), "fast")
    if ffcv_python:
        out["ffcv"] = lambda: _ffcv(ffcv_python, corpus, work, "jpeg", threads)
        out["ffcv_raw"] = lambda: _ffcv(ffcv_python, corpus, work, "raw", threads)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="photos", help="the JPEGs' sizes (above)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="grain_dataset's and the decode limit's threads")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "shardfeed_bench_peers"))
    parser.add_argument("--ffcv-python", help="an interpreter with FFCV 1.0.2 built (bench/ffcv_peer.py)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    work = Path(args.workdir) / f"{args.corpus}{args.images}"  # its copies (shards, TFDS, Hub) beside it
    work.mkdir(parents=True, exist_ok=True)
    corpus = CORPORA[args.corpus](str(work / "corpus"), args.images)
    measure = runners(corpus, work, args.images, args.threads, args.ffcv_python)
    load_before = list(os.getloadavg())
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in measure}
    names = list(measure)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            print(f"round {r + 1}/{args.rounds}: {name}", file=sys.stderr, flush=True)
            runs[name].append(measure[name]())
    results = {name: summary(rs) for name, rs in runs.items()}
    for name in names:
        results[name]["shardfeed_vs_it"] = ratio(results["shardfeed"], results[name])
    unavailable = {} if args.ffcv_python else {"ffcv": "not measured: no --ffcv-python given (bench/ffcv_peer.py)"}
    settings = {
        "images": args.images,
        "corpus": args.corpus,
        "rounds": args.rounds,
        "threads": args.threads,
        "batch_size": 64,
        "image_size": 224,
    }
    emit(
        {"bench": "peers", **settings, "load_average_before": load_before, "load_average_after": list(os.getloadavg()),
         "not_run": unavailable, **results},
        args.json,
    )  # fmt: skip


if __name__ == "__main__":
    main()
