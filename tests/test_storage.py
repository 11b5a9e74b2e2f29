"""URL paths through fsspec, against real stores on loopback: S3 (moto's server) and GCS (fake-gcs-server)."""

from __future__ import annotations

import os
from pathlib import Path

import fsspec
import pytest
import zygote
from conftest import shard_bytes

from shardfeed import ConvertOptions, convert, read_manifest
from shardfeed.format import fileio, storage
from shardfeed.tools import info, verify

pytestmark = pytest.mark.slow  # training runs, fresh processes or servers: `make test`, not `make test-quick`


def _bucket_bytes(url: str) -> dict[str, bytes]:
    fs, root = storage.filesystem(url)
    fs.invalidate_cache()
    return {path[len(root) + 1 :]: fs.cat_file(path) for path in fs.find(root)}


def test_convert_into_a_bucket_is_byte_identical_to_local(any_bucket: str, photo_tree: Path, tmp_path: Path) -> None:
    out = f"{any_bucket}/photos"
    options = ConvertOptions(shards=2)
    remote = convert(str(photo_tree), out, options, workers=2, progress=False)
    local = convert(str(photo_tree), str(tmp_path / "local"), options, workers=1, progress=False)
    assert remote.num_written == local.num_written == 44
    written = _bucket_bytes(out)
    expected = shard_bytes(tmp_path / "local")
    differ = {"manifest.json", "report.json", "dataset_info.json"}  # they name the output folder
    assert {k: v for k, v in written.items() if k not in differ} == {
        k: v for k, v in expected.items() if k not in differ
    }
    assert not any(".incomplete" in name or name.startswith(".shardfeed") for name in written)
    assert read_manifest(out).data["splits"] == local.manifest.data["splits"]
    assert verify(out, workers=1, progress=False).ok
    assert info(out)["records"] == 44
    assert convert(str(photo_tree), out, options, workers=1, progress=False).already_complete


def test_source_in_a_bucket_gives_the_same_shards(any_bucket: str, photo_tree: Path, tmp_path: Path) -> None:
    fs, root = storage.filesystem(any_bucket)
    fs.put(str(photo_tree), f"{root}/photos", recursive=True)
    a = convert(f"{any_bucket}/photos", str(tmp_path / "a"), ConvertOptions(shards=2), workers=2, progress=False)
    b = convert(str(photo_tree), str(tmp_path / "b"), ConvertOptions(shards=2), workers=1, progress=False)
    assert a.num_written == b.num_written == 44
    differ = {"manifest.json", "report.json", "dataset_info.json"}
    assert {k: v for k, v in shard_bytes(tmp_path / "a").items() if k not in differ} == {
        k: v for k, v in shard_bytes(tmp_path / "b").items() if k not in differ
    }


def test_missing_backend_names_the_extra() -> None:
    with pytest.raises(storage.StorageError, match=r"pip install 'shardfeed\[azure\]'"):
        fileio.exists("az://container/folder")


def test_unreachable_store_is_one_error_naming_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.store_servers import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    storage._filesystems.clear()
    fsspec.filesystem("s3").clear_instance_cache()
    try:
        with pytest.raises(storage.StorageError, match=r"cannot read s3://nowhere/x: the store is unreachable"):
            fileio.exists("s3://nowhere/x")
    finally:
        storage._filesystems.clear()
        fsspec.filesystem("s3").clear_instance_cache()


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("s3://AKIA123:secretkey@bucket/out", "s3://***@bucket/out"),
        (
            "https://acct.blob.core.windows.net/c/x?sv=2022-11-02&se=2026&sp=r&sig=abc%2Fdef",
            "https://acct.blob.core.windows.net/c/x?sv=***&se=***&sp=***&sig=***",
        ),
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=ff00&X-Amz-Expires=60",
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Expires=***",
        ),
        ("data/flowers", "data/flowers"),
        ("s3://AKIA:ab/cd+ef@bucket/x", "s3://***@bucket/x"),  # AWS secrets hold '/'
        ("s3://k:s@cret@bucket/x", "s3://***@bucket/x"),
        ("error: s3://k:se/cr@et@bucket/a.jpg failed", "error: s3://***@bucket/a.jpg failed"),
        ("s3://bucket/user@example.com/x.jpg", "s3://bucket/user@example.com/x.jpg"),  # no credentials here
        ("https://TOKEN@host/x", "https://***@host/x"),
        ("https://h/x?key=abc&y=1&access_token=zz", "https://h/x?key=***&y=1&access_token=***"),
    ],
)
def test_redact(text: str, shown: str) -> None:
    assert storage.redact(text) == shown


def test_errors_raised_by_the_python_api_never_show_a_secret() -> None:
    """A notebook prints the exception, a log keeps it: the message is redacted in the error itself."""
    from shardfeed.errors import ManifestError, OptionError

    for error in (ManifestError, OptionError, storage.StorageError):
        with pytest.raises(error) as raised:
            raise error(f"s3://AKIA:{SECRET}@bucket/x: bad; also https://h/x?sig={SECRET}")
        assert SECRET not in str(raised.value) and "s3://***@bucket/x" in str(raised.value)


def test_credentials_holding_slashes_and_escapes_reach_the_client() -> None:
    from shardfeed.redaction import s3_credentials

    found = s3_credentials("s3://AKIA:ab%2Fcd/ef+g%40h@my-bucket/a/b.jpg")
    assert found is not None and (found.url, found.key, found.secret) == (
        "s3://my-bucket/a/b.jpg",
        "AKIA",
        "ab/cd/ef+g@h",
    )
    assert s3_credentials("s3://my-bucket/user@example.com/x.jpg") is None


def test_a_second_writer_into_a_bucket_folder_is_refused_and_a_stale_lock_taken_over(
    bucket: str, photo_tree: Path
) -> None:
    import json
    import socket
    import subprocess
    import sys

    from shardfeed.errors import ConvertError

    out = f"{bucket}/locked"
    fs = fsspec.filesystem("s3")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        holder = {"host": socket.gethostname(), "pid": live.pid, "token": "x"}
        fs.pipe_file(f"{out}/.lock.shardfeed", json.dumps(holder).encode())
        with pytest.raises(ConvertError, match=rf"another conversion \(pid {live.pid} on host .*remove .*lock"):
            convert(str(photo_tree), out, ConvertOptions(shards=2), workers=1, progress=False)
    finally:
        live.kill()
        live.wait()
    # the holder is gone (a killed run): the next conversion takes the lock over and finishes
    assert convert(str(photo_tree), out, ConvertOptions(shards=2), workers=1, progress=False).num_written == 44
    assert not fs.exists(f"{out}/.lock.shardfeed")


KILLED_ARGS = ["--format", "png", "--shards", "12", "--workers", "2", "-q", "--no-report"]


@pytest.fixture(scope="module")
def killed_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """600 photo crops (their conversion to PNG takes seconds: long enough to be stopped midway)
    and their uninterrupted local conversion, shared by the S3 and GCS runs."""
    import os
    import subprocess
    import sys

    from bench.corpus import build_corpus

    root = tmp_path_factory.mktemp("killed")
    source = build_corpus(str(root / "src"), 600, classes=4)
    command = [sys.executable, "-m", "shardfeed", "convert", source, str(root / "local"), *KILLED_ARGS]
    subprocess.run(command, check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=300)
    return source, root / "local"


def test_a_conversion_into_a_bucket_killed_midway_resumes_to_the_same_bytes(
    any_bucket: str, killed_source: tuple[str, Path]
) -> None:
    """kill -9 after two shards committed: nothing under a shard's final name is partial, and
    the same command resumes to the bytes of an uninterrupted local conversion."""
    import os
    import signal
    import subprocess
    import sys
    import time

    source, local = killed_source
    command = [sys.executable, "-m", "shardfeed", "convert", source]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = f"{any_bucket}/killed"
    fs, folder = storage.filesystem(out)
    proc = subprocess.Popen([*command, out, *KILLED_ARGS], env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(fs.glob(f"{folder}/.shardfeed/parts/*.json")) < 2:
        fs.invalidate_cache()
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    time.sleep(1)  # the workers get their parent-death signal
    fs.invalidate_cache()
    assert not fs.exists(f"{folder}/manifest.json"), "killed too late: the conversion had finished"
    listed = fs.find(folder)
    committed = {p.rsplit("/", 1)[1] for p in listed if "/.shardfeed/" not in p and not p.endswith(".incomplete")}
    for name in committed & {p.name for p in local.iterdir() if p.name.startswith(("train", "validation"))}:
        assert fs.cat_file(f"{folder}/{name}") == (local / name).read_bytes(), f"{name} is partial under its final name"
    subprocess.run([*command, out, *KILLED_ARGS], check=True, env=env, timeout=300)
    kept = ("train", "validation", "index/")
    written = {k: v for k, v in _bucket_bytes(out).items() if k.startswith(kept)}
    assert written == {k: v for k, v in shard_bytes(local).items() if k.startswith(kept)}
    assert len(written) == 2 * 12 * 2  # shards and their index files, both splits


SECRET = "SeCrEt/Key+0123456789"  # AWS secret keys hold '/' and '+'


def test_credentials_in_urls_never_reach_what_we_write_or_print(bucket: str, tmp_path: Path) -> None:
    """convert into s3://KEY:SECRET@bucket (its report.html written there), report the folder,
    train and evaluate from it, evaluate, report and predict from the run alone (run.json keeps
    the URL without its credentials; these come from the environment), and failing commands (one
    with a signed https URL): the secret appears in no file left behind and no output line."""
    import json
    import os
    import sys

    from shardfeed.training.samples import write_digits_folders

    labeled, unlabeled = write_digits_folders(str(tmp_path / "images"), size=16, holdout=6)
    data = bucket.replace("s3://", f"s3://testing:{SECRET}@") + "/digits"
    run = tmp_path / "run"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "SHARDFEED_CACHE_DIR": str(tmp_path / "cache")}
    train_cache = tmp_path / "train-cache"
    commands = [
        ["convert", labeled, data, "--shards", "2"],
        ["info", data],
        ["report", data, "-o", str(tmp_path / "data.html")],
        ["train", data, "--out", str(run), "--epochs", "1", "--image-size", "16", "--cache-dir", str(train_cache)],
        ["evaluate", str(run), data],
        ["evaluate", str(run)],
        ["report", str(run)],
        ["report", str(run), "--data", data, "-o", str(tmp_path / "run-again.html")],
        ["predict", str(run), unlabeled, "-o", str(tmp_path / "predictions.csv")],
        ["evaluate", str(run), "--no-such-flag", data],
        ["info", data.replace("/digits", "/missing")],
        ["info", f"https://127.0.0.1:1/data?sv=2022&sig={SECRET}"],
        ["info", f"s3://testing:{SECRET}@no-such-bucket-{os.getpid()}/x"],
    ]
    output = ""
    for i, args in enumerate(commands):
        done = zygote.run(
            [sys.executable, "-m", "shardfeed", *args], capture_output=True, text=True, env=env, timeout=600
        )
        assert (done.returncode == 0) == (i < 9), (args, done.stderr[-2000:].replace(SECRET, "<the secret>"))
        output += done.stdout + done.stderr
    assert "s3://***@" in output and SECRET not in output and SECRET.split("/")[1] not in output
    assert len(list(train_cache.glob("*.tfrecord"))) == 4  # --cache-dir: both splits' shards
    assert list((tmp_path / "cache").glob("*.tfrecord"))  # $SHARDFEED_CACHE_DIR: evaluate reads through it
    assert json.loads((run / "run.json").read_text())["path"] == f"{bucket}/digits"
    fs = fsspec.filesystem("s3")
    fs.invalidate_cache()
    written = {p: fs.cat_file(p) for p in fs.find(bucket.removeprefix("s3://"))}
    assert any(p.endswith("/digits/report.html") for p in written)
    written |= {str(p): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and "images" not in p.parts}
    assert any(p.endswith("run/report.html") for p in written) and any(p.endswith("data.html") for p in written)
    assert [name for name, content in written.items() if SECRET.split("/")[1].encode() in content] == []


def test_missing_credentials_are_one_line_naming_the_variables(s3_endpoint: str, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ACCESS") and not k.startswith("AWS_SECRET")}
    env |= {
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    done = subprocess.run(
        [sys.executable, "-m", "shardfeed", "info", "s3://somebucket/data"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: cannot read s3://somebucket/data/manifest.json: no credentials found"
    )
    assert "AWS_ACCESS_KEY_ID" in lines[0] and "Traceback" not in done.stderr


def test_a_bad_cache_limit_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from shardfeed.cli.main import main

    with pytest.raises(SystemExit) as stopped:
        main(["train", "data", "--out", "run", "--cache-limit", "lots"])
    assert stopped.value.code == 2
    assert "--cache-limit: expected a size such as 20GB or 512MiB, got 'lots'" in capsys.readouterr().err


def test_a_glob_keeps_the_credentials_its_pattern_carries(bucket: str) -> None:
    fs, root = storage.filesystem(bucket)
    for name in ("a.tfrecord", "b.tfrecord", "c.txt"):
        fs.pipe_file(f"{root}/g/{name}", b"x")
    pattern = bucket.replace("s3://", f"s3://testing:{SECRET}@") + "/g/*.tfrecord"
    found = fileio.glob(pattern)
    assert found == [pattern.replace("*", "a"), pattern.replace("*", "b")]
    assert fileio.glob(f"{bucket}/g/*.txt") == [f"{bucket}/g/c.txt"]
    assert all(fileio.exists(f) for f in found)


def test_a_missing_bucket_or_folder_is_said_as_such(bucket: str) -> None:
    """Both said 'no TFRecord files match'."""
    from shardfeed.errors import SourceError

    with pytest.raises(SourceError, match=r"the bucket s3://no-such-bucket-\d+ does not exist"):
        info(f"s3://no-such-bucket-{os.getpid()}/photos")
    with pytest.raises(SourceError, match=rf"{bucket}/missing does not exist; pass a folder written by"):
        info(f"{bucket}/missing")
