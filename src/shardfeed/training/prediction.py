"""predict: class names and top-k probabilities for a folder of images (or unlabeled shards);
a multi-label run's label sets at its thresholds and every class's score; a segmentation run's
masks; a detection run's boxes (CSV and COCO's results JSON). What a row holds is the run's
task's (training/tasks/); the CSV and grid are written by training/prediction_files.py.

A folder of images is first converted (to a temporary folder, unlabeled) with the same checks as
`convert`, so odd images (CMYK, EXIF-rotated, PNG named .jpg...) are handled the same way and
unusable files get a row with the reason instead of stopping the run. Images then get exactly the
evaluation preprocessing the run was trained with.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from shardfeed.deprecation import renamed
from shardfeed.format import manifest
from shardfeed.format.image_limits import DEFAULT_MAX_PIXELS
from shardfeed.read.shardset import is_converted_folder
from shardfeed.training.models import load_model
from shardfeed.training.run_folder import MODEL, RunFolder
from shardfeed.training.tasks import Prediction, objective_for
from shardfeed.write.convert import convert
from shardfeed.write.images import ImageOptions
from shardfeed.write.options import ConvertOptions
from shardfeed.write.sources import UnlabeledSource


@renamed(output_csv="output")
def predict(
    run_dir: str,
    source: str,
    output: str = "predictions.csv",
    *,
    top_k: int = 3,
    split: str | None = None,
    grid: str | None = None,
    grid_size: int = 16,
    batch_size: int | None = None,
    model_file: str = MODEL,
    workers: int | None = None,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
) -> list[dict[str, Any]]:
    """Predicts every image of `source` and writes one CSV row per input file.

    Columns: file, class, probability, then class_2/probability_2 ... up to top_k (at most the
    number of classes), and error
    (why a file could not be read; its other columns are empty). A multi-label run's rows
    are: file, labels (the classes scored at or above the run's thresholds, `;` between
    them), one `score:<class>` column per class, and error. A segmentation run's: file, mask
    (its PNG of class ids, the file's size, in the folder OUTPUT_masks beside the CSV: the image
    is letterboxed whole into the model and the mask cut back out), classes (those it shows).
    A detection run's: a row per box, file, class, score, xmin, ymin, xmax, ymax in the file's
    own pixels (the image read whole at the model's size, as it trained; the boxes scaled back;
    a file with no box gets a row with none), and
    the same boxes as COCO's results document, OUTPUT_coco.json.

    Args:
        run_dir: a training run folder.
        source: a folder of images, or a converted folder (its `split`, default its only/first one).
        output: the CSV file written (old name `output_csv=`).
        grid: also draw the first `grid_size` images with their predicted classes to this PNG.
        max_pixels: larger images get a row with the reason and are never decoded (None: no limit).
    """
    folder = RunFolder(run_dir)
    record = folder.read_record()
    net = load_model(folder.model_file(model_file))
    objective = objective_for(record.task)
    names = objective.class_names(record, net)
    with tempfile.TemporaryDirectory(prefix="shardfeed-predict-") as tmp:
        data = source
        if not is_converted_folder(source):
            data = os.path.join(tmp, "shards")
            options = ConvertOptions(image=ImageOptions(max_pixels=max_pixels))
            convert(UnlabeledSource(source), data, options, workers=workers, progress=False)
        m = manifest.read(data)
        split = split or ("test" if "test" in m.split_names else m.split_names[0])
        ask = Prediction(m, split, output, top_k, batch_size, grid, grid_size)
        return objective.predict(net, folder, record, names, ask)
