"""Benchmark corpus: a few thousand realistic JPEGs cut from the real photos scikit-image ships."""

from __future__ import annotations

import io
import json
import os
import struct
import zlib

import numpy as np
from PIL import Image

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field", "retina", "cat")


def _photos_for(root: str, count: int) -> list[np.ndarray] | None:
    """The shipped photos to cut a corpus from, into an emptied `root`; None when `root` already
    holds `count` images (re-used as it is)."""
    existing = sum(len(files) for _, _, files in os.walk(root)) if os.path.isdir(root) else 0
    if existing == count:
        return None
    import shutil

    import skimage.data

    shutil.rmtree(root, ignore_errors=True)
    return [getattr(skimage.data, name)()[..., :3] for name in PHOTOS]


def _save(root: str, i: int, classes: int, pixels: np.ndarray) -> None:
    """Image `i` as root/class<i mod classes>/<i>.jpg, quality 90."""
    folder = os.path.join(root, f"class{i % classes:02d}")
    os.makedirs(folder, exist_ok=True)
    Image.fromarray(np.ascontiguousarray(pixels)).save(os.path.join(folder, f"{i:06d}.jpg"), quality=90)


def build_corpus(root: str, count: int, *, classes: int = 10, seed: int = 0) -> str:
    """Writes `count` JPEGs (random crops 200-500 px a side, quality 90) into root/<class>/.

    Re-uses the folder when it already holds that many images.
    """
    photos = _photos_for(root, count)
    if photos is None:
        return root
    rng = np.random.default_rng(seed)
    for i in range(count):
        photo = photos[i % len(photos)]
        h, w = photo.shape[:2]
        ch, cw = int(rng.integers(200, min(h, 500))), int(rng.integers(200, min(w, 500)))
        y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        crop = photo[y : y + ch, x : x + cw]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        _save(root, i, classes, crop)
    return root


def build_distinct_corpus(root: str, count: int, *, classes: int = 10, seed: int = 0) -> str:
    """Writes `count` JPEGs of 200-500 px a side (quality 90) into root/<class>/ that are not near
    copies of each other: each a 2 x 2 mosaic of native-resolution crops from random places of
    random photos (`build_corpus` cuts overlapping crops of 8 photos: a fifth or more of its
    images are near-duplicates, which a dataset seldom has). Re-uses a folder of that many."""
    photos = _photos_for(root, count)
    if photos is None:
        return root
    rng = np.random.default_rng(seed)
    for i in range(count):
        height, width = (int(v) for v in rng.integers(200, 501, 2))
        canvas = np.empty((height, width, 3), np.uint8)
        for y0, y1 in ((0, height // 2), (height // 2, height)):
            for x0, x1 in ((0, width // 2), (width // 2, width)):
                photo = photos[int(rng.integers(len(photos)))]
                py = int(rng.integers(0, photo.shape[0] - (y1 - y0) + 1))
                px = int(rng.integers(0, photo.shape[1] - (x1 - x0) + 1))
                canvas[y0:y1, x0:x1] = photo[py : py + y1 - y0, px : px + x1 - x0]
        _save(root, i, classes, canvas[:, ::-1] if rng.random() < 0.5 else canvas)
    return root


def _mosaic(photos: list[np.ndarray], height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """A height x width image tiled with native-resolution 256 px crops of random photos (no
    upscaling, so every pixel is real photo detail and the file compresses like a photo)."""
    canvas = np.empty((height, width, 3), np.uint8)
    for y in range(0, height, 256):
        for x in range(0, width, 256):
            photo = photos[int(rng.integers(len(photos)))]
            py, px = int(rng.integers(0, photo.shape[0] - 256)), int(rng.integers(0, photo.shape[1] - 256))
            tile = photo[py : py + 256, px : px + 256]
            canvas[y : y + 256, x : x + 256] = tile[: height - y, : width - x]
    return canvas


def build_large_corpus(root: str, count: int, *, classes: int = 10, seed: int = 0) -> str:
    """Writes `count` phone-sized JPEGs (2,000-4,032 px wide, 4:3, 3-12 MP, quality 90) into
    root/<class>/: mosaics of native-resolution crops of the shipped photos (no upscaling, so
    every pixel is real photo detail and the files compress like photos).

    Re-uses the folder when it already holds that many images.
    """
    photos = _photos_for(root, count)
    if photos is None:
        return root
    rng = np.random.default_rng(seed)
    for i in range(count):
        width = int(rng.integers(2000, 4033))
        height = width * 3 // 4
        _save(root, i, classes, _mosaic(photos, height, width, rng))
    return root


def build_coco_sized_corpus(root: str, count: int, *, classes: int = 10, seed: int = 0) -> str:
    """Writes `count` JPEGs the size of COCO's own (640 px on the long side, 360-640 px on the
    other, landscape or portrait; quality 90) into root/<class>/: mosaics of native-resolution
    256 px crops of the shipped photos, so they compress like photos.

    Re-uses the folder when it already holds that many images.
    """
    photos = _photos_for(root, count)
    if photos is None:
        return root
    rng = np.random.default_rng(seed)
    for i in range(count):
        long, short = 640, int(rng.integers(360, 641))
        height, width = (short, long) if rng.random() < 0.7 else (long, short)
        _save(root, i, classes, _mosaic(photos, height, width, rng))
    return root


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bomb(width: int, height: int) -> bytes:
    """A complete, valid grayscale PNG of zeros: a few hundred KB on disk, width*height bytes decoded."""
    row = bytes(width + 1)  # filter byte + pixels
    rows_per_block = max(1, (1 << 22) // len(row))
    compressor = zlib.compressobj(6)
    parts, left = [], height
    while left:
        n = min(rows_per_block, left)
        parts.append(compressor.compress(row * n))
        left -= n
    parts.append(compressor.flush())
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", b"".join(parts))
        + _png_chunk(b"IEND", b"")
    )


def png_text_bomb(image: Image.Image, inflated: int = 200 << 20) -> bytes:
    """A small real PNG with a zTXt chunk that inflates to `inflated` bytes."""
    data = _encoded(image, "PNG")
    text = b"Comment\x00\x00" + zlib.compress(bytes(inflated), 9)
    end = data.index(b"IEND") - 4
    return data[:end] + _png_chunk(b"zTXt", text) + data[end:]


def declared_size(data: bytes, fmt: str, width: int, height: int) -> bytes:
    """A small real GIF or TIFF whose header declares width x height (the pixels stay small)."""
    if fmt == "GIF":  # logical screen size, little-endian 16-bit, at bytes 6..10
        return data[:6] + struct.pack("<HH", width, height) + data[10:]
    ifd = struct.unpack("<I", data[4:8])[0]  # little-endian TIFF as Pillow writes it
    out = bytearray(data)
    for i in range(struct.unpack("<H", data[ifd : ifd + 2])[0]):
        entry = ifd + 2 + 12 * i
        tag, kind = struct.unpack("<HH", data[entry : entry + 4])
        if tag in (256, 257):  # ImageWidth, ImageLength
            value = width if tag == 256 else height
            out[entry + 8 : entry + 12] = struct.pack(
                "<I" if kind == 4 else "<HH", *((value,) if kind == 4 else (value, 0))
            )
    return bytes(out)


def hostile_images(photo: np.ndarray) -> dict[str, bytes]:
    """Files declaring images far over the default pixel limit (89.5 MP), each small on disk; the
    GIF, TIFF and zTXt ones are made from a small real `photo` (uint8 RGB)."""
    import simplejpeg

    small = Image.fromarray(np.ascontiguousarray(photo))
    return {
        "bomb_png_12000x12000.png": png_bomb(12000, 12000),
        "bomb_png_200000x500.png": png_bomb(200000, 500),
        "bomb_jpeg_60000x1600.jpg": simplejpeg.encode_jpeg(
            np.zeros((1600, 60000, 1), np.uint8), quality=50, colorspace="GRAY"
        ),
        "bomb_gif_20000x20000.gif": declared_size(_encoded(small.convert("P"), "GIF"), "GIF", 20000, 20000),
        "bomb_tiff_40000x40000.tif": declared_size(_encoded(small, "TIFF"), "TIFF", 40000, 40000),
        "bomb_ztxt.png": png_text_bomb(small),
    }


def _encoded(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


NEAR_PHOTOS = (
    "astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field", "retina",
    "camera", "coins", "moon", "brick", "grass", "gravel", "cell", "clock",
)  # fmt: skip


def _near_photos() -> list[np.ndarray]:
    """scikit-image's real photos and textures, and scikit-learn's two sample photos, as RGB."""
    import skimage.data
    from sklearn.datasets import load_sample_images

    photos = [getattr(skimage.data, name)() for name in NEAR_PHOTOS] + list(load_sample_images().images)
    return [np.stack([p] * 3, axis=-1) if p.ndim == 2 else p[..., :3] for p in photos]


def _bases(photos: list[np.ndarray], overlap: float) -> list[np.ndarray]:
    """Distinct images that look alike: crops of each photo (up to 320 px a side) on a grid whose
    neighbours overlap by at most `overlap` of a side (the true negatives)."""
    bases = []
    for photo in photos:
        h, w = photo.shape[:2]
        side = min(320, min(h, w) // 2)
        stride = max(1, int(side * (1 - overlap)))
        for y in range(0, h - side + 1, stride):
            for x in range(0, w - side + 1, stride):
                bases.append(photo[y : y + side, x : x + side])
    return bases


def near_copy(image: Image.Image, kind: str, rng: np.random.Generator) -> tuple[Image.Image, str, int]:
    """An edited copy of `image` (kind: jpeg, resize, crop, png, brightness): the image, the file
    format to save it in, and the JPEG quality."""
    w, h = image.size
    if kind == "jpeg":
        return image, "jpeg", int(rng.integers(50, 96))
    if kind == "resize":
        f = float(rng.uniform(0.5, 0.9))
        return image.resize((max(1, round(w * f)), max(1, round(h * f))), Image.Resampling.LANCZOS), "jpeg", 90
    if kind == "crop":
        left, top, right, bottom = (float(v) for v in rng.uniform(0, 0.03, 4))
        box = (round(w * left), round(h * top), w - round(w * right), h - round(h * bottom))
        return image.crop(box), "jpeg", 90
    if kind == "png":
        return image, "png", 0
    if kind == "brightness":
        from PIL import ImageEnhance

        return ImageEnhance.Brightness(image).enhance(float(rng.uniform(0.9, 1.1))), "jpeg", 90
    raise ValueError(kind)


NEAR_EDITS = ("jpeg", "resize", "crop", "png", "brightness")


def build_near_duplicate_corpus(root: str, *, copies: int = 2, overlap: float = 0.25, seed: int = 0) -> dict[str, int]:
    """Writes real-photo bases (JPEG q90) and `copies` edited near-copies of each (`near_copy`,
    edits drawn at random) into root/<class>/; returns {relative file: base id}, the truth a
    near-duplicate search should find (bases are crops of the same photos overlapping by at most
    `overlap`: alike, but different images). Names: <base>-<copy>-<edit>.jpg|png."""
    rng = np.random.default_rng(seed)
    truth: dict[str, int] = {}
    for i, pixels in enumerate(_bases(_near_photos(), overlap)):
        base = Image.fromarray(np.ascontiguousarray(pixels))
        kinds = ["base", *(str(k) for k in rng.choice(NEAR_EDITS, copies, replace=False))]
        versions = [(base, "jpeg", 90)] + [near_copy(base, kind, rng) for kind in kinds[1:]]
        for c, (image, fmt, quality) in enumerate(versions):
            name = f"class{i % 5}/{i:04d}-{c}-{kinds[c]}.{'png' if fmt == 'png' else 'jpg'}"
            os.makedirs(os.path.join(root, os.path.dirname(name)), exist_ok=True)
            image.save(os.path.join(root, name), **({"quality": quality} if fmt == "jpeg" else {}))
            truth[name] = i
    return truth


TAGS = ("red square", "blue disc", "green bar", "yellow triangle")  # the shapes of a tagged corpus
TAG_COLOURS = ((230, 30, 30), (30, 60, 230), (30, 200, 60), (240, 220, 30))


def _crop(photo: np.ndarray, size: int, rng: np.random.Generator) -> Image.Image:
    """A random square crop of `photo`, resized to `size` px."""
    side = int(rng.integers(size, min(photo.shape[:2]) + 1))
    top, left = (int(rng.integers(0, photo.shape[k] - side + 1)) for k in (0, 1))
    return Image.fromarray(photo[top : top + side, left : left + side]).resize((size, size))


def _pasted(image: Image.Image, present: list[int], rng: np.random.Generator) -> Image.Image:
    """`image` with the `TAGS` shapes `present` pasted at random sizes and places (later ones
    over earlier ones), and its mask: each pixel the id of the shape on it (1 + its index in
    TAGS), 0 for the photo."""
    from PIL import ImageDraw

    size = image.width
    mask = Image.new("L", (size, size), 0)
    for k in present:
        s = int(rng.integers(size // 6, size // 3 + 1))
        x, y = int(rng.integers(0, size - s)), int(rng.integers(0, size - s))
        for canvas, fill in ((ImageDraw.Draw(image), TAG_COLOURS[k]), (ImageDraw.Draw(mask), k + 1)):
            if k == 1:
                canvas.ellipse([(x, y), (x + s, y + s)], fill=fill)
            elif k == 3:
                canvas.polygon([(x, y + s), (x + s, y + s), (x + s // 2, y)], fill=fill)
            elif k == 2:
                canvas.rectangle([(x, y + s // 3), (x + s, y + 2 * s // 3)], fill=fill)
            else:
                canvas.rectangle([(x, y), (x + s, y + s)], fill=fill)
    return mask


def build_shapes_coco_corpus(root: str, count: int, *, size: int = 96, seed: int = 0) -> str:
    """A detection corpus in COCO's format: `count` photo crops (`size` px a side, PNG) with 1-3
    of the four `TAGS` shapes pasted at random sizes (a sixth to a third of the side) and places
    that never overlap, so each box (the pixels its shape's drawing covers, ends included) holds
    its shape whole; root/instances.json lists them (`convert instances.json`). Returns the JSON's
    path; re-used when it is there with `count` images."""
    from PIL import ImageDraw

    listing = os.path.join(root, "instances.json")
    if os.path.exists(listing):
        with open(listing) as f:
            if len(json.load(f)["images"]) == count:
                return listing
    photos = _photos_for(os.path.join(root, "images"), -1) or []
    os.makedirs(os.path.join(root, "images"), exist_ok=True)
    rng = np.random.default_rng(seed)
    images: list[dict[str, object]] = []
    annotations: list[dict[str, object]] = []
    for i in range(count):
        image = _crop(photos[i % len(photos)], size, rng)
        draw, placed = ImageDraw.Draw(image), []
        for _ in range(int(rng.integers(1, 4))):
            k, s = int(rng.integers(len(TAGS))), int(rng.integers(size // 6, size // 3 + 1))
            x, y = int(rng.integers(0, size - s)), int(rng.integers(0, size - s))
            if any(x < px + ps and px < x + s and y < py + ps and py < y + s for px, py, ps in placed):
                continue  # shapes never overlap: each box holds its own shape only
            placed.append((x, y, s))
            box = [x, y, s + 1, s + 1]  # PIL draws both ends: s + 1 pixels
            if k == 1:
                draw.ellipse([(x, y), (x + s, y + s)], fill=TAG_COLOURS[k])
            elif k == 3:
                draw.polygon([(x, y + s), (x + s, y + s), (x + s // 2, y)], fill=TAG_COLOURS[k])
            elif k == 2:
                draw.rectangle([(x, y + s // 3), (x + s, y + 2 * s // 3)], fill=TAG_COLOURS[k])
                box = [x, y + s // 3, s + 1, s - 2 * (s // 3) + 1]
            else:
                draw.rectangle([(x, y), (x + s, y + s)], fill=TAG_COLOURS[k])
            annotations.append(
                {"id": len(annotations) + 1, "image_id": i + 1, "category_id": k + 1, "bbox": box, "iscrowd": 0}
            )
        name = f"images/{i:05d}.png"
        image.save(os.path.join(root, name))
        images.append({"id": i + 1, "file_name": name, "width": size, "height": size})
    categories = [{"id": k + 1, "name": name} for k, name in enumerate(TAGS)]
    with open(listing, "w") as f:
        json.dump({"images": images, "annotations": annotations, "categories": categories}, f)
    return listing


def _listed(path: str, count: int) -> bool:
    """Whether `path` exists with `count` lines."""
    if not os.path.exists(path):
        return False
    with open(path) as f:
        return sum(1 for _ in f) == count


def build_tagged_corpus(root: str, count: int, *, size: int = 96, share: float = 0.4, seed: int = 0) -> str:
    """A multi-label corpus: `count` random crops of the shipped photos (`size` px a side, PNG)
    with each of the four `TAGS` shapes pasted on about `share` of them (a random size and
    place, shapes may overlap; an image left without one gets one, as `convert --multi-label`
    reports an image of no class), and root/tags.csv listing each image's shapes (`path,label`,
    `;` between names: `convert tags.csv --multi-label`). Returns the CSV's path; re-used when
    it is there."""
    listing = os.path.join(root, "tags.csv")
    if _listed(listing, count + 1):
        return listing
    photos = _photos_for(os.path.join(root, "images"), -1) or []
    os.makedirs(os.path.join(root, "images"), exist_ok=True)
    rng = np.random.default_rng(seed)
    rows = ["path,label"]
    for i in range(count):
        image = _crop(photos[i % len(photos)], size, rng)
        present = [k for k in range(len(TAGS)) if rng.random() < share] or [int(rng.integers(len(TAGS)))]
        _pasted(image, present, rng)
        name = f"images/{i:05d}.png"
        image.save(os.path.join(root, name))
        rows.append(f'{name},"{";".join(TAGS[k] for k in present)}"')
    with open(listing, "w") as f:
        f.write("\n".join(rows) + "\n")
    return listing


def build_segmentation_corpus(root: str, count: int, *, size: int = 96, share: float = 0.4, seed: int = 0) -> str:
    """A segmentation folder (images/ + masks/ + classes.txt: `convert` reads it): the shapes of
    `build_tagged_corpus` pasted on photo crops, each image's mask their class ids (0:
    background). Returns `root`; re-used when it is there."""
    classes = os.path.join(root, "classes.txt")
    if _listed(classes, len(TAGS) + 1) and len(os.listdir(os.path.join(root, "masks"))) == count:
        return root
    photos = _photos_for(os.path.join(root, "images"), -1) or []
    import shutil

    shutil.rmtree(os.path.join(root, "masks"), ignore_errors=True)
    for folder in ("images", "masks"):
        os.makedirs(os.path.join(root, folder), exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        image = _crop(photos[i % len(photos)], size, rng)
        mask = _pasted(image, [k for k in range(len(TAGS)) if rng.random() < share], rng)
        image.save(os.path.join(root, "images", f"{i:05d}.png"))
        mask.save(os.path.join(root, "masks", f"{i:05d}.png"))
    with open(classes, "w") as f:
        f.write("\n".join(("background", *TAGS)) + "\n")
    return root
