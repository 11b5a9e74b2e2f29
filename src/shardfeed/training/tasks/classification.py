"""Classification: one class an image.

train      softmax over the classes, sparse categorical cross-entropy, accuracy (top-5 past 5
           classes) as Keras logs it; `class_weight` applies; at the end, per-class validation
           recall when the training classes are imbalanced (training/imbalance.py)
evaluate   loss, accuracy, top-k, per-class accuracy and the confusion matrix, drawn
           (training/classification_metrics.py)
predict    a row a file: its top-k classes and their probabilities
report     per-class precision and recall, and the held-out images classified worst
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np
from tqdm import tqdm

from shardfeed.format.schema import CLASSIFICATION
from shardfeed.read.options import ReadOptions
from shardfeed.tools import html_page as h
from shardfeed.training.classification_metrics import metrics_from_probabilities, plot_confusion
from shardfeed.training.imbalance import IMBALANCE_RATIO, imbalance_ratio, per_class_recall
from shardfeed.training.inputs import RunInputs
from shardfeed.training.models import classifier, load_model, predicted
from shardfeed.training.prediction_files import draw_tiles, short, skipped_rows, write_csv
from shardfeed.training.run_folder import CONFUSION, RunFolder, RunRecord
from shardfeed.training.tasks.base import WORST, Evaluation, ModelAsk, Objective, Prediction, Trained

TOP_K = 5  # top-k accuracy is logged past this many classes (with fewer it is always 1.0: noise)


class Classification(Objective):
    """One class an image (module docstring)."""

    task: ClassVar[str] = CLASSIFICATION
    activation: ClassVar[str] = "softmax"
    metric: ClassVar[str] = "accuracy"
    class_weights: ClassVar[bool] = True

    def build(self, ask: ModelAsk) -> Any:
        activation = ask.activation or self.activation
        return classifier(
            ask.name, ask.class_names, ask.image_size, channels=ask.channels, weights=ask.weights, activation=activation
        )

    def compiled(self, keras: Any, classes: int) -> dict[str, Any]:
        metrics: list[Any] = ["accuracy"]
        if classes > TOP_K:
            metrics.append(keras.metrics.SparseTopKCategoricalAccuracy(k=TOP_K, name=f"top{TOP_K}"))
        return {"loss": keras.losses.SparseCategoricalCrossentropy(), "metrics": metrics}

    def results(self, run: Trained) -> dict[str, Any]:
        ratio = imbalance_ratio(run.manifest.split(run.train_split).class_counts)
        if run.validation is None or ratio <= IMBALANCE_RATIO:
            return {}
        recall = per_class_recall(run.net, run.inputs.evaluation(run.validation), run.class_names)
        return {"imbalance_ratio": ratio, "per_class_recall": recall}

    def evaluate(self, net: Any, ds: Any, names: list[str], folder: RunFolder, run: Evaluation) -> dict[str, Any]:
        p, y = self.scored(net, ds, run)
        result = metrics_from_probabilities(p, y, names, run.top_k)
        title = f"{run.split}: accuracy {result['accuracy']:.3f}"
        plot_confusion(np.array(result["confusion_matrix"]), names, os.path.join(run.out, CONFUSION), title)
        return result

    @staticmethod
    def scored(net: Any, ds: Any, run: Evaluation) -> tuple[np.ndarray, np.ndarray]:
        """The model's probabilities over the split's batches and their labels, with a progress bar."""
        probs, labels = [], []
        with tqdm(total=run.total, unit="img", desc=f"evaluate {run.split}", disable=None) as bar:
            for images, y in ds:
                probs.append(predicted(net, images))
                labels.append(y.numpy())
                bar.update(len(labels[-1]))
        return np.concatenate(probs), np.concatenate(labels)

    def predict(self, net: Any, folder: RunFolder, record: RunRecord, names: list[str], ask: Prediction) -> list[dict]:
        """A row a file (`row`), under `columns`; the grid, the files first in the CSV's order."""
        from shardfeed.read.pixels import to_rgb
        from shardfeed.tools.preview import Tile, keep_first

        m, split = ask.manifest, ask.split
        ds = record.inputs(m).evaluation(split, batch_size=ask.batch_size, read=ReadOptions(with_filenames=True))
        rows: list[dict[str, Any]] = []
        shown: list[tuple[str, Any, str]] = []
        scorer = self.rows_for(folder, names, ask.top_k)
        with tqdm(total=m.split(split).num_records, unit="img", desc="predict", disable=None) as bar:
            for batch in ds:
                images, files = batch[0], batch[-1]
                probs = predicted(net, images)
                bar.update(len(probs))
                for i, p in enumerate(probs):
                    rows.append(scorer(files[i].numpy().decode(), p))
                    if ask.grid:
                        keep_first(shown, (rows[-1]["file"], images[i], caption(rows[-1])), ask.grid_size)
        rows = sorted([*rows, *skipped_rows(m.path)], key=lambda r: r["file"])
        write_csv(ask.output, rows, self.columns(names, min(ask.top_k, len(names))))
        if ask.grid:
            tiles = [Tile(f, caption, to_rgb(np.asarray(img))) for f, img, caption in sorted(shown, key=lambda t: t[0])]
            draw_tiles(tiles, ask.grid, f"predictions of {os.path.basename(folder.path)}")
        return rows

    def rows_for(self, folder: RunFolder, names: list[str], top_k: int) -> Any:
        """A file's row from its probabilities: its top-k classes."""
        return lambda file, p: top_classes(file, p, names, top_k)

    def columns(self, names: list[str], top_k: int) -> list[str]:
        """The CSV's columns: the top-k classes and their probabilities."""
        columns = ["file", "class", "probability"]
        for rank in range(2, top_k + 1):
            columns += [f"class_{rank}", f"probability_{rank}"]
        return [*columns, "error"]

    def per_class(self, result: dict[str, Any], split: str) -> str:
        confusion = np.array(result["confusion_matrix"])
        rows = []
        for i, name in enumerate(result["class_names"]):
            true, guessed = confusion[i].sum(), confusion[:, i].sum()
            recall = f"{confusion[i, i] / true:.3f}" if true else "—"
            precision = f"{confusion[i, i] / guessed:.3f}" if guessed else "—"
            rows.append([h.esc(name), f"{true:,}", precision, recall])
        summary = (
            f"{split}: {result['examples']:,} images, accuracy {result['accuracy']:.4f}, loss {result['loss']:.4f}"
        )
        matrix = h.png_file(os.path.join(result["output_dir"], CONFUSION))
        table = h.table(["class", "images", "precision", "recall"], rows, (1, 2, 3))
        undefined = any("—" in row for row in rows)
        note = '<p class="note">—: no image predicted as that class (precision) or none in it (recall)</p>'
        return h.section("Per class", f"<p>{h.esc(summary)}</p>", table, note if undefined else "", matrix)

    def worst(self, folder: RunFolder, inputs: RunInputs, split: str, names: list[str]) -> str:
        """The held-out images with the lowest probability of their true class (`wrong`)."""
        net = load_model(folder.model_file())
        found: list[tuple[float, np.ndarray, str, str, str]] = []
        judge = self.wrong(folder, names)
        for images, labels, files in inputs.evaluation(split, read=ReadOptions(with_filenames=True)):
            for i, p in enumerate(predicted(net, images)):
                verdict = judge(p, labels[i].numpy())
                if verdict is not None:
                    found.append((verdict[0], images[i].numpy(), files[i].numpy().decode(), *verdict[1:]))
            found = sorted(found, key=lambda x: x[0])[:WORST]
        if not found:
            return h.section("Worst classified", f"<p>every {h.esc(split)} image is classified correctly</p>")
        tiles = [
            h.figure(h.thumbnail(img), f"{file}: predicted {guess}, true {true} (p={p:.2f})")
            for p, img, file, guess, true in found
        ]
        return h.section(f"Worst classified ({split})", f'<div class="grid">{"".join(tiles)}</div>')

    def wrong(self, folder: RunFolder, names: list[str]) -> Any:
        """(probabilities, label) -> None when right, else (how right, what was said, what is true)."""

        def judged(p: np.ndarray, label: np.ndarray) -> tuple[float, str, str] | None:
            true, guess = int(label), int(np.argmax(p))
            return None if guess == true else (float(p[true]), names[guess], names[true])

        return judged


def top_classes(file: str, p: np.ndarray, names: list[str], top_k: int) -> dict[str, Any]:
    """A classification row: the file's top-k classes and their probabilities."""
    order = np.argsort(-p)[: min(top_k, len(names))]
    row: dict[str, Any] = {"file": file, "class": names[order[0]], "probability": float(p[order[0]])}
    for rank, index in enumerate(order[1:], start=2):
        row[f"class_{rank}"] = names[index]
        row[f"probability_{rank}"] = float(p[index])
    return row


def caption(row: dict[str, Any]) -> str:
    """A grid tile's caption: the file's name and its prediction."""
    said = (row["labels"] or "(none)") if "labels" in row else f"{row['class']} ({row['probability']:.2f})"
    return f"{short(row['file'])}\n{said}"
