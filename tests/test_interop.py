"""Every snippet of docs/interop.md, run as written on a real conversion."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shardfeed import ConvertOptions, ImageOptions, convert, read_manifest

DOC = Path(__file__).resolve().parent.parent / "docs" / "interop.md"
NEEDS = {"tfds": "tensorflow_datasets", "tfrecord": "tfrecord", "grain": "grain", "tfslim": "tensorflow"}
SLOW = {"dali": "nvidia.dali", "model_garden": "official"}


def snippets() -> dict[str, str]:
    """`# snippet: NAME` python blocks of the doc, by name."""
    blocks = re.findall(r"```python\n# snippet: (\w+)\n(.*?)```", DOC.read_text(), re.S)
    return dict(blocks)


@pytest.fixture(scope="module")
def out(photo_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("interop") / "out"
    convert(
        str(photo_tree),
        str(folder),
        ConvertOptions(shards=2, image=ImageOptions(image_format="jpeg")),
        workers=1,
        progress=False,
    )
    return folder


def test_the_doc_has_one_snippet_per_reader() -> None:
    assert set(snippets()) == set(NEEDS) | set(SLOW)


def _run(name: str, out: Path) -> str:
    """Runs the snippet in a fresh Python, as a user of that reader would (vahidk's `tfrecord`
    cannot even be imported beside TensorFlow: both register tensorflow.BytesList)."""
    labels = read_manifest(str(out)).labels or []
    code = f"OUT = {str(out)!r}\nNUM_CLASSES = {len(labels)}\n" + snippets()[name]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NEEDS))
def test_snippet_runs(name: str, out: Path) -> None:
    printed = _run(name, out)
    assert printed.strip(), "the snippet printed nothing"
    if name == "tfrecord":
        assert printed.split()[0] == str(read_manifest(str(out)).split("train").num_records)
    if name == "tfslim":
        assert "b'astronaut'" in printed or "b'c" in printed  # the synset key holds the class name


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW))
def test_heavy_snippet_runs(name: str, out: Path) -> None:
    module = SLOW[name]
    try:  # the whole dotted name: 'nvidia' alone is a namespace that CUDA wheels (PyTorch's) also fill
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        pytest.skip(f"{module} is not installed (too large for CI: pip install it to run this snippet)")
    assert _run(name, out).strip()
