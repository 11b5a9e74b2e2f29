"""Precise BatchNorm: moving statistics recomputed from the trained weights (training/batchnorm.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shardfeed.training.batchnorm import batches_for, batchnorm_layers, recompute


def test_recompute_sets_the_image_weighted_mean_of_batch_statistics() -> None:
    """One BatchNorm layer over real digit images: after `recompute` its moving mean and variance
    are the image-weighted means of the batches' own statistics, a partial last batch included."""
    import keras
    from sklearn.datasets import load_digits

    x = load_digits().data.astype("float32")[:70]  # 70 real images, 64 features
    inputs = keras.Input((64,))
    net = keras.Model(inputs, keras.layers.BatchNormalization(momentum=0.99)(inputs))
    (bn,) = batchnorm_layers(net)
    batches = [x[:32], x[32:64], x[64:]]  # 32 + 32 + 6
    assert recompute(net, iter(batches)) == 70
    weights = np.array([32, 32, 6]) / 70
    mean = sum(w * b.mean(axis=0) for w, b in zip(weights, batches, strict=True))
    var = sum(w * b.var(axis=0) for w, b in zip(weights, batches, strict=True))
    np.testing.assert_allclose(bn.moving_mean.numpy(), mean, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bn.moving_variance.numpy(), var, rtol=1e-4, atol=1e-4)
    assert bn.momentum == 0.99  # restored


def test_frozen_batchnorm_keeps_its_statistics() -> None:
    """A frozen layer (a pre-trained backbone while only the head learns) is left alone."""
    import keras

    inputs = keras.Input((4,))
    net = keras.Model(inputs, keras.layers.BatchNormalization()(inputs))
    net.layers[-1].trainable = False
    assert batchnorm_layers(net) == []
    assert recompute(net, iter([np.ones((8, 4), "float32")])) == 0
    np.testing.assert_array_equal(net.layers[-1].moving_mean.numpy(), np.zeros(4))


def test_batches_for_holds_the_images() -> None:
    assert batches_for(293, 64) == 5 and batches_for(1024, 64) == 16 and batches_for(3, 64) == 1


@pytest.mark.slow
def test_a_short_run_scores_in_inference_mode_what_it_reached_while_fitting(photo_tree: Path, tmp_path: Path) -> None:
    """small_cnn on 44 photos at batch 8 for 3 epochs (15 steps): Keras' moving averages (momentum
    0.9) are still far from the weights' statistics; with precise BN (the default) the
    inference-mode accuracy on the training images is close to what fitting reached, without it it
    is far below (the control: the test can tell the two apart)."""
    from shardfeed import ConvertOptions, convert
    from shardfeed.training import TrainOptions, train

    data = tmp_path / "data"
    convert(str(photo_tree), str(data), ConvertOptions(split="train=1"), workers=1, progress=False)
    scores = {}
    for precise in (True, False):
        options = TrainOptions(
            epochs=3, batch_size=8, image_size=64, augment="none", validation_split=None, precise_bn=precise
        )
        metrics = train(str(data), str(tmp_path / f"run-{precise}"), options, verbose=0)
        scores[precise] = (metrics["accuracy"], metrics["train_accuracy_inference"], metrics["precise_bn_images"])
    fitted, inference, images = scores[True]
    assert images == 44 and inference >= fitted - 0.1, scores
    assert scores[False][2] == 0 and scores[False][1] < inference - 0.2, scores


def test_moving_averages_settle_after_five_over_one_minus_momentum_steps() -> None:
    from shardfeed.training.batchnorm import settled

    assert not settled(0.9, 49) and settled(0.9, 50)
    assert not settled(0.99, 499) and settled(0.99, 500)


def test_recompute_leaves_dropouts_random_state_as_it_was() -> None:
    """Running the model in training mode draws dropout masks; the random state is put back, so
    a recomputation mid-fit does not change the rest of the run (it moved the digits demo by two
    validation images before)."""
    import keras

    inputs = keras.Input((8,))
    net = keras.Model(inputs, keras.layers.Dropout(0.5)(keras.layers.BatchNormalization()(inputs)))
    (state,) = [v for v in net.non_trainable_variables if "seed_generator" in v.path]
    before = state.numpy().copy()
    recompute(net, iter([np.ones((4, 8), "float32"), np.zeros((4, 8), "float32")]))
    np.testing.assert_array_equal(state.numpy(), before)


@pytest.mark.slow
def test_the_summary_validation_score_is_the_saved_models(digits_tree: Path, tmp_path: Path) -> None:
    """Precise BN recomputes the statistics at the end over more images (240) than before each
    validation (64): the validation figures train reports are then measured again, so `evaluate`
    on the saved model gives the same ones (they differed: 0.9500 printed, 0.9667 evaluated)."""
    from shardfeed import ConvertOptions, convert
    from shardfeed.training import TrainOptions, evaluate, train

    data = tmp_path / "data"
    convert(str(digits_tree), str(data), ConvertOptions(split="train=0.8,validation=0.2"), workers=1, progress=False)
    options = TrainOptions(model="small_cnn", epochs=2, batch_size=16, image_size=32, augment="none", seed=0)
    metrics = train(str(data), str(tmp_path / "run"), options, verbose=0)
    assert metrics["precise_bn_images"] == 240  # the recompute at the end ran over every training image
    evaluated = evaluate(str(tmp_path / "run"), str(data), split="validation")
    assert metrics["val_accuracy"] == pytest.approx(evaluated["accuracy"], abs=1e-6)
    assert metrics["val_loss"] == pytest.approx(evaluated["loss"], rel=1e-4)
