"""show: a grid of sample images with their class names, as a PNG and/or TensorBoard images.

Without `augmented`, records are picked at random (seeded) through the index files and shown as
stored; with it, the first batch of the real training pipeline is shown, exactly as the model
would see it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardfeed.errors import OptionError
from shardfeed.format import manifest, schema
from shardfeed.format.tasks import task_of
from shardfeed.read.augment import Augment
from shardfeed.read.options import ReadOptions
from shardfeed.read.pixels import decode_image, to_rgb
from shardfeed.read.sampling import sample_examples
from shardfeed.read.shardset import is_converted_folder


@dataclass
class Tile:
    """One image of the grid and where it came from."""

    key: str  # image/filename of the record ('' for augmented batches)
    caption: str  # class name (or file name for unlabeled data)
    image: np.ndarray  # uint8 [H, W, 3]


def sample_tiles(
    path: str,
    *,
    split: str | None = None,
    count: int = 16,
    seed: int = 0,
    augmented: bool = False,
    image_size: int = 160,
    augment: Augment | bool | None = None,
) -> list[Tile]:
    """The tiles `show` draws (from `split`, default the data's main split: `Manifest.main_split`)."""
    m = manifest.read(path)
    split = split or m.main_split()
    if augmented:
        return _augmented_tiles(m, split, count, seed, image_size, augment)
    return [annotated(example, m) for example in sample_examples(m, split, count, seed)]


def annotated(example: dict[str, Any], m: manifest.Manifest) -> Tile:
    """A parsed record as `show` draws it: its image with its boxes drawn or its mask tinted
    over it, captioned with its classes (its file name for unlabeled data)."""
    key = example.get(schema.FILENAME, b"").decode(errors="replace")
    image = to_rgb(decode_image(example))
    spec = task_of(m.header.task)
    if spec.mask_feature is not None:
        return _overlaid(key, image, example[spec.mask_feature], m.labels or [])
    if spec.objects:
        return _boxed(key, image, example, m)
    return Tile(key, _caption(example, key, m), image)


def _caption(example: dict[str, Any], key: str, m: manifest.Manifest) -> str:
    """The class name, or for unlabeled data the file name (empty when the records carry none)."""
    if m.labels is None:
        return key.rsplit("/", 1)[-1]
    return schema.class_text(example, m.labels, m.label_offset)


def _overlaid(key: str, image: np.ndarray, mask: bytes, names: list[str]) -> Tile:
    """A segmentation record's image with its stored mask (a PNG) over it (`tinted`)."""
    import io

    from PIL import Image

    return tinted(key, image, np.asarray(Image.open(io.BytesIO(mask))), names)


def tinted(key: str, image: np.ndarray, mask: np.ndarray, names: list[str]) -> Tile:
    """An image with its mask of class ids over it: each class but 0 (background, by
    convention) and 255 (ignored) tinted in its own colour, captioned with the classes present."""
    tinted = image.astype(np.float32)
    present = [int(c) for c in np.unique(mask) if 0 < c < len(names)]
    for c in present:
        colour = np.array(OVERLAY_COLOURS[(c - 1) % len(OVERLAY_COLOURS)], np.float32)
        tinted[mask == c] = 0.55 * tinted[mask == c] + 0.45 * colour
    caption = ", ".join(names[c] for c in present) or key.rsplit("/", 1)[-1]
    return Tile(key, caption, tinted.round().astype(np.uint8))


def _boxed(key: str, image: np.ndarray, example: dict[str, Any], m: manifest.Manifest) -> Tile:
    """A detection record's image with its instance masks tinted and its boxes drawn (`drawn_boxes`)."""
    from shardfeed.format.annotations import read_objects

    listed = {k: v if isinstance(v, list) else [v] for k, v in example.items()}
    height, width = image.shape[:2]
    objects = read_objects(listed, width=width, height=height, label_offset=m.label_offset)
    if objects.masks:
        image = _instances_tinted(image, objects.masks, objects.classes.tolist())
    return drawn_boxes(key, image, objects.boxes.tolist(), objects.classes.tolist(), m.labels or [])


def _instances_tinted(image: np.ndarray, masks: tuple[bytes, ...], classes: list[int]) -> np.ndarray:
    """An image with each object's instance mask (a PNG the image's size, nonzero on the
    object) tinted in its class's colour, the colour its box is drawn in; a mask of another
    size (which `verify` reports) is left out."""
    import io

    from PIL import Image

    tinted = image.astype(np.float32)
    for data, c in zip(masks, classes, strict=True):
        with Image.open(io.BytesIO(data)) as png:
            on = np.asarray(png) > 0
        if on.shape == image.shape[:2]:
            colour = np.array(OVERLAY_COLOURS[c % len(OVERLAY_COLOURS)], np.float32)
            tinted[on] = 0.55 * tinted[on] + 0.45 * colour
    return tinted.round().astype(np.uint8)


def drawn_boxes(key: str, image: np.ndarray, boxes: list[list[float]], classes: list[int], names: list[str]) -> Tile:
    """An image with (xmin, ymin, xmax, ymax) pixel boxes drawn, each in its class's colour,
    captioned with the classes present (and how many of each); classes below 0 are padding."""
    from collections import Counter

    from PIL import Image, ImageDraw

    canvas = Image.fromarray(image)
    draw = ImageDraw.Draw(canvas)
    kept = [(box, c) for box, c in zip(boxes, classes, strict=True) if c >= 0]
    for box, c in kept:
        draw.rectangle(box, outline=OVERLAY_COLOURS[c % len(OVERLAY_COLOURS)], width=max(1, image.shape[1] // 150))
    counts = Counter(names[c] for _, c in kept if c < len(names))
    caption = ", ".join(f"{n} x{k}" if k > 1 else n for n, k in sorted(counts.items())) or "(no objects)"
    return Tile(key, caption, np.asarray(canvas))


def keep_first(kept: list[Any], item: tuple[Any, ...], limit: int) -> None:
    """Keeps in `kept` the `limit` items whose names (their first field) sort first: a grid of
    the first files drawn from a stream of any length, holding no more than the grid."""
    if len(kept) < limit:
        kept.append(item)
        return
    if limit:
        last = max(range(len(kept)), key=lambda i: kept[i][0])
        if item[0] < kept[last][0]:
            kept[last] = item


OVERLAY_COLOURS = ((230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48), (145, 30, 180))


def _augmented_tiles(
    m: manifest.Manifest, split: str, count: int, seed: int, image_size: int, augment: Augment | bool | None
) -> list[Tile]:
    from shardfeed.read.dataset import load

    read = ReadOptions(drop_remainder=False)
    ds = load(
        m.path,
        split=split,
        batch_size=count,
        image_size=image_size,
        training=True,
        seed=seed,
        read=read,
        augment=augment,
    )
    batch = next(iter(ds))
    images, labels = batch if isinstance(batch, tuple) else (batch, None)
    names, spec = m.labels or [], task_of(m.header.task)
    out = []
    for i in range(int(images.shape[0])):
        image = to_rgb(images[i].numpy())
        if spec.objects:  # the boxes as augmentation moved them
            boxes, classes = labels["boxes"][i].numpy().tolist(), labels["labels"][i].numpy().tolist()
            out.append(drawn_boxes("", image, boxes, classes, names))
        elif spec.mask_feature is not None:
            out.append(tinted("", image, labels[i].numpy(), names))
        elif not spec.one_label:  # a k-hot vector
            out.append(Tile("", ", ".join(names[c] for c in np.flatnonzero(labels[i].numpy())), image))
        else:
            out.append(Tile("", names[int(labels[i])] if labels is not None and names else "", image))
    return out


def show(
    path: str,
    output: str | None = "samples.png",
    *,
    split: str | None = None,
    rows: int = 4,
    cols: int = 4,
    seed: int = 0,
    augmented: bool = False,
    image_size: int = 160,
    tensorboard: str | None = None,
    read: ReadOptions | None = None,
    augment: Augment | bool | None = None,
) -> list[Tile]:
    """Draws `rows` x `cols` sample images with their class names.

    Args:
        path: a converted folder.
        output: the PNG to write (None: none).
        split: default train, else the held-out split, else the only one.
        augmented: show the training pipeline's output instead of the stored images.
        augment: with `augmented`, the augmentation drawn, as `load` takes it (default
            `Augment()`, Inception's crop + flip; False: none). `shardfeed show --augmented`
            draws what `train --augment auto` picks (training.choose_augment) and says so.
        tensorboard: a log folder to also write the images to as TensorBoard image summaries.
        read: for TFRecords another program wrote (`path` a folder, glob or list without a
            manifest): their keys and label offset; the first records of the split are shown,
            captioned with their label ids, at `image_size`.

    Returns:
        The tiles drawn, in grid order (row by row).
    """
    if rows < 1 or cols < 1:
        raise OptionError(f"rows and cols must be >= 1, got {rows}x{cols}")
    if is_converted_folder(path):
        split = split or manifest.read(path).main_split()
        tiles = sample_tiles(
            path, split=split, count=rows * cols, seed=seed, augmented=augmented, image_size=image_size, augment=augment
        )
    else:
        split = split or "train"
        tiles = _foreign_tiles(path, split, rows * cols, seed, augmented, image_size, read or ReadOptions())
    if output:
        draw_grid(tiles, rows, cols, output, f"{path} [{split}]" + (" augmented" if augmented else ""))
    if tensorboard:
        _to_tensorboard(tiles, tensorboard, split, image_size)
    return tiles


def _foreign_tiles(
    path: str, split: str, count: int, seed: int, augmented: bool, image_size: int, read: ReadOptions
) -> list[Tile]:
    """The first batch `load` reads from other people's TFRecords, captioned with label ids (no
    manifest, so no class names: `shardfeed adopt` gives them)."""
    from shardfeed.read.dataset import load

    read = dataclasses.replace(read, drop_remainder=False)
    ds = load(path, split=split, batch_size=count, image_size=image_size, training=augmented, seed=seed, read=read)
    batch = next(iter(ds))
    images, labels = batch if isinstance(batch, tuple) else (batch, None)
    return [
        Tile("", "" if labels is None else str(int(labels[i])), to_rgb(images[i].numpy()))
        for i in range(int(images.shape[0]))
    ]


def draw_grid(tiles: list[Tile], rows: int, cols: int, output: str, title: str) -> None:
    """Draws tiles in a rows x cols grid with their captions to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, cols, figsize=(2.2 * cols, 2.4 * rows), squeeze=False)
    for ax, tile in zip(axes.flat, tiles + [None] * (rows * cols - len(tiles)), strict=True):
        ax.axis("off")
        if tile is not None:
            ax.imshow(tile.image, interpolation="nearest")
            ax.set_title(tile.caption, fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    plt.close(fig)


def _to_tensorboard(tiles: list[Tile], logdir: str, split: str, size: int) -> None:
    from shardfeed.lazy import tensorflow

    tf = tensorflow()
    images = tf.stack([tf.image.resize(t.image, (size, size)) / 255.0 for t in tiles])
    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default():
        tf.summary.image(
            f"shardfeed/{split}",
            images,
            step=0,
            max_outputs=len(tiles),
            description=", ".join(t.caption for t in tiles),
        )
    writer.flush()
