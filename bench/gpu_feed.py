"""Does the input keep the accelerator busy? Training steps/s of a model fed three ways.

    .venv/bin/python bench/gpu_feed.py [--data DIR] [--models resnet50,mobilenet_v2] [--size 224]
                                       [--batch 64] [--steps 40] [--rounds 3] [--cores 2,4,8]
                                       [--json FILE]

Feeds, each run a fresh process, rounds interleaved (A B C, A B C, ...):

- synthetic: one batch already on the device, repeated: the model's own limit;
- load: `shardfeed.load` with TensorFlow's CPU decode (the default path);
- dali: `shardfeed.load(decode=DecodeOptions(decoder="dali"))`, nvJPEG on the GPU (DALI's CPU
  mode where no GPU is visible; skipped where DALI is not installed: `make dali`).

Mixed precision on a GPU, float32 without one. Reported per model and feed: images/s (best,
median), CPU seconds per image, and the ratios load/synthetic and dali/synthetic ("the
accelerator never waits" means >= 0.95), with the CPU cores `load` would need to reach 0.95 of
the model's limit on this host (its CPU seconds per image x 0.95 x the synthetic images/s).
`--cores 2,4,8` adds the load feed run on only that many cores (the process pinned with
sched_setaffinity before TensorFlow starts, so tf.data's autotuning and TF's thread pools see
that many), to show how the CPU path scales towards the host's count.
Without --data a corpus of 2,000 real photo crops is built and converted (bench/corpus.py).

`--backend jax` (or `torch`) measures the TensorFlow-free path instead (for a machine with JAX
or PyTorch but no TensorFlow): Keras 3 on that backend, mixed bfloat16 on a GPU, the same
keras.applications backbone behind a rescaling layer, fed two ways:

- synthetic: one batch already on the device (keras.ops.convert_to_tensor), repeated;
- grain: `shardfeed.grain_dataset` (simplejpeg decode, random-resized crop and flip on as many
  threads as the process has cores); `--cores 4,8` adds it pinned to that many cores and threads;
- grain-workers: the same in Grain worker processes (`num_workers` = cores - 1, 2 threads each);
  CPU per image is the host's (all processes, /proc/stat), so the workers' is counted;
- load (only with `--feeds load`, TensorFlow installed): `shardfeed.load`'s tf.data pipeline on
  the CPU read as numpy batches, as Keras reads a tf.data.Dataset on JAX or PyTorch;
  load-unfused: the same with `DecodeOptions(fused_resize=False)` (TensorFlow's resize, round and
  flip ops instead of the compiled op: the same pixels).

`--models retinanet` (with `--backend jax` or `torch`, KerasHub installed) measures detection:
`train`'s detector (training/detector.py) fed uint8 images and xyxy boxes (padded to 4) by
`grain_dataset` with flips; without --data a corpus of 1,200 256-px photo crops with shapes
pasted at known boxes is built and converted to JPEG. (The H100 figures in
docs/benchmarks/gpu.md were made with bench_detection_training.py's earlier copy of the model,
fed 0-1 pixels scaled on the device and yxyx boxes.)

On this backend each run reads one iterator through the warm-up and the timed steps (Keras
would start a new one, and new worker processes, at each `fit`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.corpus import build_corpus
from bench.report import emit, host_cpu_seconds
from shardfeed.read import dali
from shardfeed.tools.bottleneck import cores_needed

FEEDS = ("synthetic", "load", "dali")
KERAS_FEEDS = ("synthetic", "grain", "grain-workers")  # and "load" (tf.data) when asked for
WARMUP = 5


def one_run(feed: str, model: str, data: str, size: int, batch: int, steps: int) -> dict[str, Any]:
    """One measurement, in this (fresh) process: steps/s of `model` fed by `feed` ('load@N': load
    on N cores)."""
    if "@" in feed:
        feed, cores = feed.split("@")
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: int(cores)])
    import keras
    import tensorflow as tf

    import shardfeed
    from shardfeed.format import manifest
    from shardfeed.read.options import DecodeOptions
    from shardfeed.training import build_model

    gpu = bool(tf.config.list_physical_devices("GPU"))
    keras.mixed_precision.set_global_policy("mixed_float16" if gpu else "float32")
    names = manifest.read(data).labels or ["0"]
    net = build_model(model, names, (size, size), weights=None)
    net.compile(keras.optimizers.SGD(0.01), "sparse_categorical_crossentropy")
    if feed == "synthetic":
        first = shardfeed.load(data, batch_size=batch, image_size=size, seed=0).take(1).get_single_element()
        ds = tf.data.Dataset.from_tensors(first).repeat()
        if gpu:
            ds = ds.apply(tf.data.experimental.prefetch_to_device("/gpu:0"))
    else:
        decode = DecodeOptions(decoder="dali", device="gpu" if gpu else "cpu") if feed == "dali" else None
        ds = shardfeed.load(data, batch_size=batch, image_size=size, seed=0, repeat=True, decode=decode)
    return {**_timed_fit(net, ds, steps, batch), "gpu": gpu}


def _timed_fit(net: Any, ds: Any, steps: int, batch: int) -> dict[str, Any]:
    """Images/s and host CPU seconds per image of `steps` training steps, after WARMUP untimed
    ones and `steps` more untimed (so that what the feed made ahead while the model compiled,
    in its prefetch buffers, is used up before the clock starts). Keras' own `fit` is called
    (a KerasHub task's would wrap a Python iterator as if it were arrays)."""
    import keras

    keras.Model.fit(net, ds, epochs=1, steps_per_epoch=WARMUP, verbose=0)
    keras.Model.fit(net, ds, epochs=1, steps_per_epoch=steps, verbose=0)
    cpu0, t0 = host_cpu_seconds(), time.perf_counter()
    keras.Model.fit(net, ds, epochs=1, steps_per_epoch=steps, verbose=0)
    seconds = time.perf_counter() - t0
    cpu1 = host_cpu_seconds()
    images = steps * batch
    return {
        "images_per_second": images / seconds,
        "cpu_s_per_image": (cpu1 - cpu0) / images,
        "cores": len(os.sched_getaffinity(0)),
    }


def one_run_keras(backend: str, feed: str, model: str, data: str, size: int, batch: int, steps: int) -> dict[str, Any]:
    """One measurement on Keras' `backend` ('jax' or 'torch'), in this (fresh) process: steps/s
    of `model` fed by `feed` ('grain@N': Grain on N cores and N threads). TensorFlow is never
    imported."""
    threads = len(os.sched_getaffinity(0))
    if "@" in feed:
        feed, cores = feed.split("@")
        threads = int(cores)
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    os.environ["KERAS_BACKEND"] = backend
    import keras

    import shardfeed

    gpu, device = _accelerator(backend)
    keras.mixed_precision.set_global_policy("mixed_bfloat16" if gpu else "float32")
    detection = model == "retinanet"
    net = _detector(size) if detection else _classifier(keras, model, data, size)
    per_epoch = len(shardfeed.IndexedRecords(data, split="train")) // batch
    workers = threads - 1 if feed == "grain-workers" else 0
    ds = (
        None
        if feed.startswith("load")
        else shardfeed.grain_dataset(
            data,
            batch_size=batch,
            image_size=size,
            seed=0,
            epochs=(WARMUP + 2 * steps) // per_epoch + 2,
            num_threads=2 if workers else threads,
            num_workers=workers,
            # detection: flips only (train's default for boxes), a fixed object count so that JAX
            # compiles one step
            **({"augment": shardfeed.Augment(crop=False), "max_objects": 4} if detection else {}),
        )
    )
    tf_data = feed.startswith("load")
    batches = iter(_tf_data_batches(data, batch, size, detection, fused=feed == "load") if tf_data else ds)

    def on_device(batch_: Any) -> Any:
        """The batch as the backend's tensors (uint8 images: the models take them as they are)."""
        images, targets = batch_
        return keras.ops.convert_to_tensor(images), keras.tree.map_structure(keras.ops.convert_to_tensor, targets)

    if feed == "synthetic":
        first = on_device(next(batches))

        def repeated() -> Any:
            while True:
                yield first

        ds = repeated()
    else:
        ds = (on_device(b) for b in batches)
    return {
        **_timed_fit(net, ds, steps, batch),
        "gpu": gpu,
        "device": device,
        "backend": backend,
        "tensorflow_imported": "tensorflow" in sys.modules,
    }


def _tf_data_batches(data: str, batch: int, size: int, detection: bool, fused: bool = True) -> Any:
    """`shardfeed.load`'s tf.data pipeline (TensorFlow on the CPU) as numpy batches for a Keras
    model on another backend, as Keras' own `fit` reads a tf.data.Dataset there; uint8 images,
    as the Grain feeds give them. `fused`: with the compiled resize op (the default), else
    TensorFlow's ops."""
    import tensorflow as tf

    import shardfeed
    from shardfeed.read.options import DecodeOptions

    tf.config.set_visible_devices([], "GPU")  # TensorFlow stays off the accelerator JAX holds
    decode = DecodeOptions(fused_resize=fused, **({"max_objects": 4} if detection else {}))
    augment = shardfeed.Augment(crop=False) if detection else None
    ds = shardfeed.load(data, batch_size=batch, image_size=size, seed=0, repeat=True, augment=augment, decode=decode)
    return ds.as_numpy_iterator()


def _classifier(keras: Any, model: str, data: str, size: int) -> Any:
    """A keras.applications backbone behind a rescaling layer, from random weights, compiled."""
    from shardfeed.format import manifest

    classes = len(manifest.read(data).labels or []) or 1
    backbone = {"resnet50": keras.applications.ResNet50, "mobilenet_v2": keras.applications.MobileNetV2}[model]
    inputs = keras.Input((size, size, 3), dtype="uint8")
    x = keras.layers.Rescaling(1 / 127.5, offset=-1.0)(inputs)
    x = backbone(include_top=False, weights=None, input_shape=(size, size, 3), pooling="avg")(x)
    net = keras.Model(inputs, keras.layers.Dense(classes, activation="softmax", dtype="float32")(x))
    net.compile(keras.optimizers.SGD(0.01), "sparse_categorical_crossentropy")
    return net


def _detector(size: int) -> Any:
    """`train`'s detector (training/detector.py), compiled as bench_detection_training.py trains it."""
    from bench.bench_detection_training import detector

    return detector(size)


def _accelerator(backend: str) -> tuple[bool, str]:
    """Whether `backend` computes on a GPU, and the name of the device it computes on."""
    if backend == "jax":
        import jax

        first = jax.devices()[0]
        return first.platform == "gpu", str(first.device_kind)
    import torch

    gpu = torch.cuda.is_available()
    return gpu, torch.cuda.get_device_name(0) if gpu else "cpu"


def fresh(feed: str, model: str, args: argparse.Namespace, data: str) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", feed, "--models", model, "--data", data]
    cmd += ["--backend", args.backend]
    cmd += ["--size", str(args.size), "--batch", str(args.batch), "--steps", str(args.steps)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{feed} / {model} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data")
    parser.add_argument("--models", default="resnet50,mobilenet_v2")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--cores", default="", help="also the load feed on only these many cores, e.g. 2,4,8")
    parser.add_argument("--backend", choices=("tensorflow", "jax", "torch"), default="tensorflow")
    parser.add_argument("--feeds", default="", help="only these feeds (synthetic is always run), e.g. grain-workers")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        shape = (args.one, args.models, args.data, args.size, args.batch, args.steps)
        measured = one_run(*shape) if args.backend == "tensorflow" else one_run_keras(args.backend, *shape)
        print(json.dumps(measured))
        return
    models = args.models.split(",")
    data = {m: args.data or (_detection_corpus() if m == "retinanet" else _corpus()) for m in models}
    if args.backend != "tensorflow":
        feeds, cpu_feed = list(KERAS_FEEDS), "grain"
    else:
        feeds, cpu_feed = [f for f in FEEDS if f != "dali" or dali.installed()], "load"
    if args.feeds:
        feeds = ["synthetic", *(f for f in args.feeds.split(",") if f != "synthetic")]
    feeds += [f"{cpu_feed}@{n}" for n in args.cores.split(",") if n and int(n) < len(os.sched_getaffinity(0))]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {m: {f: [] for f in feeds} for m in models}
    for r in range(args.rounds):
        for model in models:
            for feed in feeds:
                print(f"round {r + 1}/{args.rounds}: {model} / {feed}", file=sys.stderr, flush=True)
                runs[model][feed].append(fresh(feed, model, args, data[model]))
    results: dict[str, Any] = {"bench": "gpu_feed", "backend": args.backend, "cores": os.cpu_count()}
    results |= {"size": args.size, "batch": args.batch, "steps": args.steps, "rounds": args.rounds}
    results["load_average"] = os.getloadavg()
    results["models"] = {m: _summary(runs[m], cpu_feed) for m in models}
    emit(results, args.json)


def _summary(by_feed: dict[str, list[dict[str, Any]]], cpu_feed: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for feed, measured in by_feed.items():
        speeds = [m["images_per_second"] for m in measured]
        out[feed] = {
            "median_images_per_second": statistics.median(speeds),
            "best_images_per_second": max(speeds),
            "cpu_s_per_image": statistics.median(m["cpu_s_per_image"] for m in measured),
            "gpu": measured[0]["gpu"],
            "cores": measured[0]["cores"],
            "device": measured[0].get("device", "gpu" if measured[0]["gpu"] else "cpu"),
            "tensorflow_imported": measured[0].get("tensorflow_imported", True),
        }
    limit = out["synthetic"]["median_images_per_second"]
    for feed in out.copy():
        if feed != "synthetic":
            out[f"{feed}_over_synthetic"] = out[feed]["median_images_per_second"] / limit
    if cpu_feed in out:
        out[f"cores_for_{cpu_feed}_at_0.95"] = cores_needed(limit, out[cpu_feed]["cpu_s_per_image"])
    return out


def _corpus() -> str:
    root = "/tmp/gpu_feed"
    source = build_corpus(f"{root}/src", 2000, classes=10)
    out = f"{root}/shards"
    if not os.path.exists(f"{out}/manifest.json"):
        subprocess.run([sys.executable, "-m", "shardfeed", "convert", source, out, "-q", "--no-report"], check=True)
    return out


def _detection_corpus() -> str:
    """1,200 photo crops of 256 px with 1-3 shapes pasted at known boxes (COCO JSON), converted
    to JPEG (quality 90), 960 train / 240 validation."""
    from bench.corpus import build_shapes_coco_corpus

    root = "/tmp/gpu_feed_detection"
    listing = build_shapes_coco_corpus(f"{root}/src", 1200, size=256)
    out = f"{root}/shards"
    if not os.path.exists(f"{out}/manifest.json"):
        convert = [listing, out, "--split", "train=0.8,validation=0.2", "--format", "jpeg", "--quality", "90"]
        subprocess.run([sys.executable, "-m", "shardfeed", "convert", *convert, "-q", "--no-report"], check=True)
    return out


if __name__ == "__main__":
    main()
