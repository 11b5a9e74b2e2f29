"""The install a user makes, tested: the built wheel with only the `cpu` extra in a fresh venv.

`make test` runs with the dev tools installed, so it cannot see a runtime dependency that only a
dev extra brings (matplotlib was one: `show`, `train` and `evaluate` failed in a user's install).
Here the wheel is built from this tree, installed into a new virtual environment with nothing
but `shardfeed[cpu]`, and the README's everyday commands run in that environment's own processes
on real photos: convert -> info -> verify -> show -> train (1 epoch) -> evaluate -> predict ->
report. Each must exit 0, and write what it says it writes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTALL_TIMEOUT_S = 1200  # a fresh machine downloads TensorFlow; a warm pip cache takes ~1 min
COMMAND_TIMEOUT_S = 600


def _run(command: list[str], *, cwd: Path, timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Runs `command`; its combined output, or a failure that shows it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{output[-4000:]}"
    return output


@pytest.fixture(scope="module")
def user_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel built from this tree with only the `cpu` extra."""
    base = tmp_path_factory.mktemp("user_install")
    wheels = base / "wheels"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
        cwd=base,
        timeout=INSTALL_TIMEOUT_S,
    )
    (wheel,) = wheels.glob("shardfeed-*.whl")
    env_dir = base / "venv"
    venv.create(env_dir, with_pip=True, symlinks=True)
    python = env_dir / "bin" / "python"
    _run(
        [str(python), "-m", "pip", "install", "-q", f"shardfeed[cpu] @ {wheel.as_uri()}"],
        cwd=base,
        timeout=INSTALL_TIMEOUT_S,
    )
    return env_dir


def test_the_user_install_has_no_dev_tools(user_env: Path) -> None:
    """The environment is the user's, not ours: none of the dev extra's packages are in it (else
    this test would prove nothing about the runtime dependencies)."""
    python = str(user_env / "bin" / "python")
    probe = "import importlib.util as u; print([m for m in ('pytest', 'sklearn', 'skimage', 'moto') if u.find_spec(m)])"
    assert _run([python, "-c", probe], cwd=user_env).strip() == "[]"


def test_everyday_commands_run_in_the_user_install(user_env: Path, photo_tree: Path, tmp_path: Path) -> None:
    """convert -> info -> verify -> show -> train -> evaluate -> predict -> report, each exit 0."""
    cli = str(user_env / "bin" / "shardfeed")
    data, run = tmp_path / "data", tmp_path / "run"
    _run(
        [cli, "convert", str(photo_tree), str(data), "--split", "train=0.75,validation=0.25", "--seed", "0"],
        cwd=tmp_path,
    )
    assert (data / "manifest.json").is_file() and (data / "report.html").is_file()
    assert "astronaut" in _run([cli, "info", str(data)], cwd=tmp_path)
    _run([cli, "verify", str(data)], cwd=tmp_path)
    _run([cli, "show", str(data), "-o", str(tmp_path / "grid.png")], cwd=tmp_path)
    assert (tmp_path / "grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    train = [
        cli,
        "train",
        str(data),
        "--out",
        str(run),
        "--model",
        "small_cnn",
        "--epochs",
        "1",
        "--image-size",
        "32",
        "--batch-size",
        "8",
    ]
    _run(train, cwd=tmp_path)
    assert (run / "model.keras").is_file()
    _run([cli, "evaluate", str(run)], cwd=tmp_path)
    assert (run / "eval-validation" / "confusion_matrix.png").is_file()
    predictions = tmp_path / "predictions.csv"
    _run([cli, "predict", str(run), str(photo_tree / "coffee"), "-o", str(predictions)], cwd=tmp_path)
    assert len(predictions.read_text().splitlines()) == 1 + len(list((photo_tree / "coffee").iterdir()))
    _run([cli, "report", str(data), "-o", str(tmp_path / "data.html")], cwd=tmp_path)
    _run([cli, "report", str(run), "-o", str(tmp_path / "run.html")], cwd=tmp_path)
    assert "<html" in (tmp_path / "run.html").read_text()
