"""Reading through the tf.data service: the pipeline runs on remote workers, batches stream back.

`load(..., service="grpc://HOST:PORT")` (or `service=ServiceOptions(address, mode, compress)`)
builds the same pipeline (shard files -> records -> parse, decode, augment -> batches) and hands
it to `tf.data.experimental.service.distribute`, so parsing and decoding run on the service's
workers and the trainer receives finished batches.
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

import socket
from typing import Any

from shardfeed.errors import ServiceError
from shardfeed.lazy import tensorflow
from shardfeed.read.options import ServiceOptions


def distribute(ds: Any, service: ServiceOptions) -> Any:
    """`ds` run by the service at `service.address` in processing mode `service.mode` (see the
    module docstring); batches travel snappy-compressed unless `service.compress` is False.

    Raises:
        ServiceError: nothing answers at the address (TF's client would wait for it silently).
    """
    tf = tensorflow()
    address = service.address if "://" in service.address else f"grpc://{service.address}"
    if not reachable(address):
        raise ServiceError(
            f"no tf.data service dispatcher answers at {address}; start one (`shardfeed serve dispatcher`) "
            "or check the address"
        )
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
            processing_mode=policies[service.mode], service=address, compression="AUTO" if service.compress else None
        )
    )


def reachable(address: str, timeout: float = 5.0) -> bool:
    """Whether something accepts TCP connections at grpc://HOST:PORT (or HOST:PORT)."""
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False
