"""Which storage a URL path lives on, and how its failures and secrets are told to the user.

One rule for every URL path: object stores and the other schemes fsspec knows (`s3://`, `gs://`,
`az://`, `abfs://`, `hdfs://`, `http(s)://`, `memory://`) go through fsspec; the schemes only
TensorFlow implements (`ram://`, its in-memory filesystem) through `tf.io.gfile`. TensorFlow
2.21 cannot read `s3://` at all (tensorflow-io is needed for it since TF 2.6, and its last
release fails to load beside TF >= 2.18), so tf.data never reads a bucket: `load` reads shards
from a bucket through a local, verified shard cache (read/remote/cache.py). `gs://` follows the
same rule, so every bucket is read, verified and cached alike.

Endpoints and credentials come from each backend's usual environment (boto's `AWS_*` with
`AWS_ENDPOINT_URL` for S3-compatible stores; gcsfs's `GOOGLE_APPLICATION_CREDENTIALS` and
`STORAGE_EMULATOR_HOST`; adlfs's `AZURE_STORAGE_*`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from shardfeed.errors import ShardfeedError, StorageError
from shardfeed.redaction import redact as redact
from shardfeed.redaction import s3_credentials

TF_ONLY_SCHEMES = frozenset({"ram"})
# scheme -> the shardfeed extra that installs its fsspec backend
EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure", "abfss": "azure"}
# What each backend reads from the environment: named when credentials are missing.
CREDENTIAL_VARIABLES = {
    "s3": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE / ~/.aws/credentials; "
    "AWS_ENDPOINT_URL for an S3-compatible store)",
    "gcs": "GOOGLE_APPLICATION_CREDENTIALS (or gcloud's application-default login; STORAGE_EMULATOR_HOST for an "
    "emulator)",
    "azure": "AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_CONNECTION_STRING or "
    "AZURE_STORAGE_SAS_TOKEN",
}
# Bounded waits: a store that is down ends in an error after seconds, never a hang. botocore's
# own retries (3 attempts) sit under s3fs's (5, with backoff); measured here against a closed
# loopback port: the error after 6.8 s.
# No listings cache: other processes (conversion workers, other hosts) write into the same
# folders, and a cached listing would hide their objects.
OPTIONS: dict[str, dict[str, Any]] = {
    "s3": {"config_kwargs": {"connect_timeout": 10, "read_timeout": 60}, "use_listings_cache": False},
    "gcs": {"use_listings_cache": False},
    "azure": {"use_listings_cache": False},
}


def scheme(path: str) -> str:
    """The URL scheme of `path` ('' for a local path)."""
    return path.split("://", 1)[0].lower() if "://" in path else ""


def is_url(path: str) -> bool:
    """True for a URL path (anything with a scheme but file://)."""
    return scheme(path) not in ("", "file")


def via_fsspec(path: str) -> bool:
    """True for a URL path read and written through fsspec (every scheme but TensorFlow's own)."""
    return is_url(path) and scheme(path) not in TF_ONLY_SCHEMES


_filesystems: dict[tuple[str, str, int], Any] = {}


def filesystem(path: str) -> tuple[Any, str]:
    """The fsspec filesystem of `path` and the path as that filesystem names it.

    `s3://KEY:SECRET@bucket/...` (Hadoop's spelling) passes the credentials to the S3 client;
    they never appear in what we write or print (`redact`).

    Raises:
        StorageError: the scheme's backend is not installed (naming the extra to install).
    """
    name = scheme(path)
    credentials = s3_credentials(path)
    userinfo = credentials.userinfo if credentials else ""
    if credentials:
        path = credentials.url
    key = (name, userinfo, os.getpid())  # a forked worker builds its own (the parent's event loop is not its)
    if key not in _filesystems:
        import fsspec

        options = dict(OPTIONS.get(EXTRAS.get(name, ""), {}))
        if credentials:
            options.update(key=credentials.key, secret=credentials.secret)
        try:
            _filesystems[key] = (
                _emulated_gcs(options)
                if _gcs_emulator(name)
                else fsspec.filesystem(name, skip_instance_cache=True, **options)
            )
        except ImportError as e:
            extra = EXTRAS.get(name)
            hint = f"pip install 'shardfeed[{extra}]'" if extra else f"install fsspec's backend for {name}://"
            raise StorageError(f"{redact(path)}: {name}:// needs a package that is not installed; {hint}") from e
        except ValueError as e:
            raise StorageError(f"{redact(path)}: fsspec knows no {name}:// filesystem ({e})") from e
    fs = _filesystems[key]
    return fs, fs._strip_protocol(path)


def with_userinfo_of(original: str, url: str) -> str:
    """`url` (a path fsspec listed under `original`) with the credentials `original` carries."""
    credentials = s3_credentials(original)
    if not credentials or s3_credentials(url):
        return url
    return url.replace("://", f"://{credentials.userinfo}", 1)


def _gcs_emulator(name: str) -> bool:
    """True for gs:// while STORAGE_EMULATOR_HOST points gcsfs at an emulator."""
    return EXTRAS.get(name) == "gcs" and bool(os.environ.get("STORAGE_EMULATOR_HOST"))


def _emulated_gcs(options: dict[str, Any]) -> Any:
    """gcsfs's plain filesystem, for an emulator. gcsfs >= 2025.x by default asks each bucket's
    type over gRPC (for hierarchical-namespace buckets) before any call, which an HTTP emulator
    cannot answer: every new bucket then cost a 60 s timeout (measured with fake-gcs-server).
    Moves copy then delete: the emulator has no `moveTo`, and gcsfs logs a traceback per move
    before falling back to that."""
    from fsspec.asyn import sync_wrapper
    from gcsfs.core import GCSFileSystem

    class EmulatorGCS(GCSFileSystem):
        async def _mv_file(self, path1: str, path2: str, **kwargs: Any) -> None:
            await self._cp_file(path1, path2)
            await self._rm_file(path1)

        mv_file = sync_wrapper(_mv_file)

    return EmulatorGCS(skip_instance_cache=True, **options)


@contextlib.contextmanager
def errors(path: str, action: str = "read") -> Iterator[None]:
    """Turns a backend's exception on `path` into a StorageError naming the URL, the endpoint and
    what to do; FileNotFoundError and ShardfeedErrors pass through unchanged (callers handle a
    missing file as they do locally)."""
    try:
        yield
    except (ShardfeedError, FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise
    except Exception as e:
        raise StorageError(explain(path, e, action)) from e


def explain(path: str, error: BaseException, action: str = "read") -> str:
    """One line on why `path` could not be used: unreachable endpoint, missing credentials, no
    permission, or the backend's own words (secrets redacted)."""
    name = type(error).__name__
    text = redact(str(error) or name)
    family = EXTRAS.get(scheme(path), scheme(path))
    if name == "NoCredentialsError" or "Unable to locate credentials" in text:
        variables = CREDENTIAL_VARIABLES.get(family, "the backend's credential variables")
        return f"cannot {action} {redact(path)}: no credentials found; set {variables}"
    if "Could not connect" in text or "Connect timeout" in text or isinstance(error, ConnectionError):
        return f"cannot {action} {redact(path)}: the store is unreachable ({text}); check the endpoint and network"
    if isinstance(error, PermissionError) or "AccessDenied" in text or "Forbidden" in text:
        return f"cannot {action} {redact(path)}: permission denied ({text}); check the credentials' rights"
    return f"cannot {action} {redact(path)}: {text}"
