"""Reading through the tf.data service: the pipeline runs on remote workers, batches stream back.

`load(..., service="grpc://HOST:PORT")` builds the same pipeline (shard files -> records ->
parse, decode, augment -> batches) and hands it to `tf.data.experimental.service.distribute`,
so parsing and decoding run on the service's workers and the trainer receives finished batches.
The servers are TensorFlow's own (`shardfeed serve`, tools/data_service.py).

Processing modes (TF's sharding policies), by name:
    distributed_epoch  (default) the shard files are split among the workers as they ask for
                       work: each record once per epoch across all workers. If a worker dies
                       mid-epoch, the files it was reading are not handed to another worker, so
                       that epoch misses (part of) them: at-most-once, per TF's documentation.
    parallel_epochs    every worker reads the whole split (each record once per worker per
                       epoch): more throughput for small data, no exactly-once.
    file, data, file_or_data, hint
                       TF's static sharding policies (by file, by element, ...), for jobs with
                       a fixed set of workers.
"""

from __future__ import annotations

from typing import Any

from shardfeed.lazy import tensorflow
from shardfeed.read.options import DecodeConfig, ReadConfig


def check_options(service: str, read: ReadConfig, decode: DecodeConfig) -> None:
    """Refuses what cannot be serialised to the service's workers, saying what to use instead.

    Raises:
        ValueError: an option that runs Python in this process, or a malformed address.
    """
    if not service.startswith(("grpc://", "grpc+local://")) and "://" in service:
        raise ValueError(f"service must look like grpc://HOST:PORT, got {service!r}")
    if read.by_index:
        raise ValueError(
            "shuffle='global' and even splits read records by index in Python (IndexedRecords), which the "
            "service's workers cannot run; use shuffle='buffer' (the default) with service="
        )
    for name, value in (("filter_fn", read.filter_fn), ("map_fn", decode.map_fn)):
        if value is not None:
            raise ValueError(
                f"{name}= is a Python callable of this process and is not sent to the service's workers; "
                "apply it to the batches load returns instead (ds.map/ds.filter), or drop service="
            )
    if read.cache:
        raise ValueError("cache= would cache on each worker separately; drop cache= when reading through a service")


def distribute(ds: Any, service: str, mode: str, *, compress: bool = True) -> Any:
    """`ds` run by the service at `service` in processing mode `mode` (see the module docstring);
    batches travel snappy-compressed unless `compress` is False."""
    tf = tensorflow()
    address = service if "://" in service else f"grpc://{service}"
    policy = tf.data.experimental.service.ShardingPolicy
    policies = {
        "distributed_epoch": policy.DYNAMIC,
        "parallel_epochs": policy.OFF,
        "file": policy.FILE,
        "data": policy.DATA,
        "file_or_data": policy.FILE_OR_DATA,
        "hint": policy.HINT,
    }
    return ds.apply(
        tf.data.experimental.service.distribute(
            processing_mode=policies[mode], service=address, compression="AUTO" if compress else None
        )
    )
