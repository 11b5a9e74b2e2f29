"""The zygote the tests fork TensorFlow commands from (tests/zygote.py) behaves as `subprocess`
does where the tests rely on it: exit codes, signals, streams, environment, folder, argv, and a
process of its own; a different import-time environment gets a different zygote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import zygote

pytestmark = pytest.mark.slow  # a process that imports TensorFlow: `make test`, not `make test-quick`

PROBE = """
import json, os, sys
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "pid": os.getpid(), "ppid": os.getppid(),
                  "flag": os.environ.get("ZYGOTE_TEST_FLAG"), "tf": "tensorflow" in sys.modules}))
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def test_a_forked_command_gets_its_argv_environment_folder_and_exit_code(tmp_path: Path) -> None:
    import json

    env = {**os.environ, "ZYGOTE_TEST_FLAG": "on"}
    done = zygote.run([sys.executable, "-c", PROBE, "3", "x"], capture_output=True, text=True, env=env, cwd=tmp_path)
    seen = json.loads(done.stdout)
    assert done.returncode == 3 and done.stderr == "to stderr\n"
    assert seen["argv"] == ["-c", "3", "x"] and seen["cwd"] == str(tmp_path) and seen["flag"] == "on"
    assert seen["tf"] is True  # what it is there for: TensorFlow already imported
    assert seen["pid"] != os.getpid() and seen["ppid"] != os.getpid()  # its own process, forked by the zygote
    again = zygote.run([sys.executable, "-c", PROBE, "0"], capture_output=True, text=True)
    assert again.returncode == 0 and json.loads(again.stdout)["flag"] is None  # nothing left from the last one


def test_an_uncaught_error_is_a_traceback_and_exit_1_and_a_kill_is_minus_the_signal() -> None:
    failed = zygote.run([sys.executable, "-c", "raise ValueError('bad input')"], capture_output=True, text=True)
    assert failed.returncode == 1 and failed.stderr.strip().endswith("ValueError: bad input")
    slow = zygote.popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"], stdout=subprocess.PIPE
    )
    assert slow.stdout is not None and slow.stdout.readline() == b"up\n"
    assert slow.poll() is None
    slow.send_signal(signal.SIGKILL)
    assert slow.wait(timeout=30) == -signal.SIGKILL
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1)


def test_the_cli_runs_as_python_dash_m_and_only_python_commands_are_forked() -> None:
    done = zygote.run([sys.executable, "-m", "shardfeed", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("shardfeed ")
    with pytest.raises(ValueError, match="a zygote runs"):
        zygote.run(["true"])


def test_an_import_time_variable_gets_a_zygote_of_its_own() -> None:
    probe = [sys.executable, "-c", "import os; print(os.getppid())"]
    plain = zygote.run(probe, capture_output=True, text=True).stdout
    other = zygote.run(probe, capture_output=True, text=True, env={**os.environ, "KERAS_BACKEND": "jax"}).stdout
    assert plain != other  # forked from two zygotes: Keras read its backend while the zygote imported it
    assert zygote.run(probe, capture_output=True, text=True).stdout == plain  # and each is kept for the next
