"""HTML reports of a conversion and of a training run, opened in a real browser (headless Chromium)."""

from __future__ import annotations

import html
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import zygote
from conftest import copy_tree, jpeg_bytes, photos

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _browser() -> str:
    """A headless-capable Chromium; installed from Debian's package when absent and possible."""
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if found is None and shutil.which("apt-get") and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "chromium"], capture_output=True)
        found = shutil.which("chromium")
    if found is None:
        pytest.skip("no Chromium, and it cannot be installed here (apt-get install chromium needs root)")
    return found


def open_in_browser(page: Path, screenshot: Path) -> tuple[str, str]:
    """(the DOM after rendering, the browser's console log) of `page` opened from disk."""
    browser = _browser()
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"]
    url = page.resolve().as_uri()
    dom = subprocess.run([browser, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    shot = subprocess.run(
        [browser, *flags, f"--screenshot={screenshot}", "--window-size=1200,2000", url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=screenshot.parent,
    )
    assert dom.returncode == 0 and shot.returncode == 0, dom.stderr[-2000:]
    assert screenshot.exists() and screenshot.stat().st_size > 10_000
    return dom.stdout, dom.stderr + shot.stderr


def _console_errors(log: str) -> list[str]:
    return [line for line in log.splitlines() if "CONSOLE" in line or "Uncaught" in line]


def shardfeed(*args: str) -> subprocess.CompletedProcess[str]:
    return zygote.run([sys.executable, "-m", "shardfeed", *args], capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_conversion_report_renders_with_counts_problems_and_escaped_names(odd_tree: Path, tmp_path: Path) -> None:
    src = copy_tree(odd_tree, tmp_path / "src")
    hostile = src / "<script>alert(1)"  # a class folder name (no "/" possible in it)
    hostile.mkdir()
    for i, crop in enumerate((photos()["coffee"][:150, :150], photos()["coffee"][100:250, 100:250])):
        (hostile / f"<b>{i}.jpg").write_bytes(jpeg_bytes(crop.copy()))
    out = tmp_path / "out"
    done = shardfeed("convert", str(src), str(out), "--shards", "1", "-q")
    assert done.returncode == 0, done.stderr
    page = out / "report.html"
    assert page.exists() and "report: " in done.stdout
    assert page.stat().st_size < 1_000_000
    assert "<script>alert" not in page.read_text()  # escaped in the file itself
    dom, log = open_in_browser(page, tmp_path / "shot.png")
    shutil.copy(
        tmp_path / "shot.png", Path(os.environ.get("SHARDFEED_SCREENSHOTS", tmp_path)) / "conversion_report.png"
    )
    assert not _console_errors(log), _console_errors(log)
    assert "<script>alert" not in dom and html.escape("<script>alert(1)") in dom  # shown as text
    for text in ("Images per class", "cat", "dog", "Skipped (not in any shard)", "bad_text.jpg", "Re-encoded on write"):
        assert text in dom, text
    assert ("odd_cmyk.jpg" in dom and "image does not decode" in dom) or "not an image" in dom
    assert "most common" in dom and "images" in dom  # the imbalance line and the bar labels


@pytest.mark.slow
def test_training_run_report(digits_tree: Path, tmp_path: Path) -> None:
    out, run = tmp_path / "out", tmp_path / "run"
    assert shardfeed("convert", str(digits_tree), str(out), "--shards", "2", "-q", "--no-report").returncode == 0
    assert not (out / "report.html").exists()
    trained = shardfeed("train", str(out), "--out", str(run), "--epochs", "2", "--image-size", "16")
    assert trained.returncode == 0, trained.stderr
    assert (run / "curves.png").stat().st_size > 5_000
    done = shardfeed("report", str(run))
    assert done.returncode == 0, done.stderr
    dom, log = open_in_browser(run / "report.html", tmp_path / "run.png")
    assert not _console_errors(log)
    for text in ("Per epoch", "val_accuracy", "precision", "recall", "Worst classified", "predicted", "learning_rate"):
        assert text in dom, text
    assert ">nan<" not in (run / "report.html").read_text()  # an undefined precision is '—', explained


def test_curves_have_an_epoch_axis_and_points_where_their_values_are() -> None:
    """The run report's curves: epochs numbered under the plot (at most ~10 numbers), each value
    drawn at its epoch's x and at a height proportional to it; a missing epoch (NaN) is skipped."""
    import re

    from shardfeed.tools.html_page import line_chart

    svg = line_chart({"loss": [1.0, 0.5, 0.3], "val_loss": [1.1, float("nan"), 0.4]}, width=480, height=200)
    ticks = re.findall(r'<text x="([\d.]+)" y="184"[^>]*>(\d+)</text>', svg)
    assert [(float(x), int(n)) for x, n in ticks] == [(44.0, 1), (254.0, 2), (464.0, 3)]
    assert ">epoch</text>" in svg
    lines = [[tuple(map(float, p.split(","))) for p in pts.split()] for pts in re.findall(r'points="([^"]+)"', svg)]
    top, bottom = 12, 164  # 1.1 (the highest value) is drawn at the top, 0.3 (the lowest) at the bottom
    y = lambda v: bottom - (bottom - top) * (v - 0.3) / (1.1 - 0.3)  # noqa: E731
    flat = [[c for point in line for c in point] for line in lines]
    assert flat[0] == pytest.approx([44, y(1.0), 254, y(0.5), 464, y(0.3)], abs=0.05)
    assert flat[1] == pytest.approx([44, y(1.1), 464, y(0.4)], abs=0.05)
    many = line_chart({"loss": [float(i) for i in range(37)]})
    numbered = [int(n) for n in re.findall(r'text-anchor="middle">(\d+)</text>', many)]
    assert numbered[0] == 1 and numbered[-1] == 37 and len(numbered) <= 11


def test_problem_tables_have_no_empty_column() -> None:
    """Tables whose rows have nothing to draw (duplicate groups, a bucket's inputs) had a third,
    empty column; a table with thumbnails names it."""
    import re

    from shardfeed.tools.dataset_report import _problem_table

    headers = lambda table: re.findall(r"<th[^>]*>(.*?)</th>", table)  # noqa: E731
    assert headers(_problem_table("Duplicate groups", [("a.jpg, b.jpg", "same split")], None)) == ["input", "reason"]
    drawn = _problem_table("Skipped", [("a.jpg", "not an image")], lambda key: "<img>")
    assert headers(drawn) == ["input", "reason", "image"]
