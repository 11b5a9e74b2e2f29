"""The verdicts of tools/bottleneck.py: which side limits training, how many cores CPU decoding
would need, and the way out this host has (the GPU decode path only where a GPU is visible)."""

from __future__ import annotations

import pytest
import zygote

from shardfeed.tools.bottleneck import Host, cores_needed, gpu_decode_verdict, probe_batches, this_host, verdict

CPU_ONLY = Host(cores=2, gpu=False, dali=False)
GPU_NO_DALI = Host(cores=16, gpu=True, dali=False)
GPU_DALI = Host(cores=16, gpu=True, dali=True)


def test_cores_needed_is_the_cpu_time_for_95_percent_of_the_model() -> None:
    # 2,000 images/s at 0.01 CPU s per image: 95% of it is 1,900 images/s = 19 cores of decoding
    assert cores_needed(2000.0, 0.01) == pytest.approx(19.0)
    assert cores_needed(2000.0, 0.01, share=1.0) == pytest.approx(20.0)


@pytest.mark.parametrize(
    ("host", "advice"),
    [
        (None, "use convert --resize, more cores, or the tf.data service"),
        (CPU_ONLY, "use convert --resize, more cores, or the tf.data service"),
        (GPU_NO_DALI, "this host has a GPU: decode on it (make dali, then train --decode-on gpu)"),
        (GPU_DALI, "decode on the GPU (train --decode-on gpu; bench --decode-on gpu measures it)"),
    ],
)
def test_an_input_bound_verdict_names_the_ways_out_this_host_has(host: Host | None, advice: str) -> None:
    line = verdict(300.0, 2000.0, host=host, cores=cores_needed(2000.0, 0.01))
    assert line.startswith("input-bound: the pipeline delivers 300 images/s, the model consumes 2,000/s")
    assert "95% of it needs ~19.0 CPU cores of input work" in line and advice in line
    assert ("(this host has" in line) == (host is not None)
    if host is None or not host.gpu:
        assert "GPU" not in line


def test_trains_probe_adds_a_twentieth_of_a_short_run_and_ten_batches_to_a_long_one() -> None:
    # (steps an epoch, steps the run trains) -> batches timed
    assert probe_batches(1000, 100_000) == 10  # a long run: the full probe
    assert probe_batches(100, 120) == 6  # 5% of 120 steps
    assert probe_batches(7, 42) == 3  # 5% would be 2: never fewer than 3
    assert probe_batches(2, 1000) == 2  # no more than an epoch holds
    assert probe_batches(1, 1) == 1


def test_model_bound_and_balanced_verdicts() -> None:
    assert verdict(2000.0, 300.0).endswith("input is not what limits training")
    assert verdict(2000.0, 300.0, host=GPU_DALI).endswith("decoding on the GPU would not help")
    assert verdict(2000.0, 300.0, host=GPU_DALI, gpu_decode=True).endswith(
        "CPU decode may free it (bench --model compares)"
    )
    assert verdict(1000.0, 1050.0, host=GPU_DALI).startswith("balanced:")


def test_a_pipeline_that_already_decodes_on_the_gpu_is_not_told_to() -> None:
    line = verdict(300.0, 2000.0, host=GPU_DALI, gpu_decode=True)
    assert line.endswith("decoding already runs on the GPU: use convert --resize (smaller images to read and decode)")


@pytest.mark.parametrize(
    ("cpu", "gpu", "ending"),
    [
        (1950.0, 2000.0, "CPU decode already keeps the accelerator busy; decoding on the GPU would not help"),
        (500.0, 520.0, "decoding on the GPU would not help here"),
        (500.0, 1900.0, "decode on the GPU (train --decode-on gpu)"),
    ],
)
def test_the_gpu_decode_verdict(cpu: float, gpu: float, ending: str) -> None:
    line = gpu_decode_verdict(cpu, gpu, 2000.0)
    assert line.startswith(f"GPU decode feeds {gpu / 2000:.2f} of the model's rate, CPU decode {cpu / 2000:.2f}")
    assert line.endswith(ending)


def test_this_host_reports_what_tensorflow_and_the_installed_packages_see() -> None:
    import tensorflow as tf

    from shardfeed.read import dali

    host = this_host()
    assert host.gpu == bool(tf.config.list_physical_devices("GPU")) and host.dali == dali.installed()
    assert host.cores >= 1


PROBED_AS_TRAINED = """
import contextlib, logging, sys
import keras, numpy as np
from shardfeed.tools.bottleneck import model_rate

scope = contextlib.nullcontext
if sys.argv[1] == "2":  # two logical CPUs under MirroredStrategy, as train --devices 2
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    scope = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope

def fitted():
    with scope():
        return _fitted()

def _fitted():
    keras.utils.set_random_seed(0)
    layers = [keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dropout(0.5), keras.layers.Dense(4)]
    net = keras.Sequential(layers)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    net.compile(keras.optimizers.Adam(0.01), loss, metrics=["acc"])
    net.fit(images, labels, batch_size=8, epochs=1, verbose=0)
    return net

def values(net):
    moved = [*net.variables, *net.optimizer.variables, *net.metrics_variables]
    return [v.numpy() for v in moved]

rng = np.random.default_rng(0)
images, labels = rng.random((32, 8, 8, 3)).astype("float32"), rng.integers(0, 4, 32)
probed, plain = fitted(), fitted()
state = values(probed)
compiled = []
if keras.backend.backend() == "jax":  # a copy would compile its train step again
    import jax
    class Compiles(logging.Handler):
        def emit(self, record):
            compiled.append(record.getMessage())
    logging.getLogger("jax").addHandler(Compiles())
    jax.config.update("jax_log_compiles", True)
assert model_rate(probed, (images[:8], labels[:8]), steps=4, warmup=1) > 0
assert not [m for m in compiled if "train_step" in m], compiled
assert all(np.array_equal(a, b) for a, b in zip(state, values(probed), strict=True))
for net in (probed, plain):
    keras.utils.set_random_seed(1)  # the same order of batches for both (JAX shuffles with NumPy's global RNG)
    net.fit(images, labels, batch_size=8, epochs=1, verbose=0)
for a, b in zip(values(probed), values(plain), strict=True):
    np.testing.assert_array_equal(a, b)
print("same")
"""


@pytest.mark.parametrize(("backend", "devices"), [("tensorflow", 1), ("tensorflow", 2), ("jax", 1), ("torch", 1)])
def test_the_models_rate_is_timed_on_the_model_and_leaves_it_as_it_was(backend: str, devices: int) -> None:
    """After `fit`, the model is timed on its own train function (on JAX: no train step compiled
    again) and every variable a step moves comes back: weights, the dropout's seed, Adam's moments
    and step count, the metrics. The next epoch then trains exactly as it would have without the
    probe. Each backend in its own process; TensorFlow also on two devices (MirroredStrategy)."""
    import os
    import sys

    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = zygote.run(
        [sys.executable, "-c", PROBED_AS_TRAINED, str(devices)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("same"), done.stderr[-3000:]
