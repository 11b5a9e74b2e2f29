"""Two real worker processes (MultiWorkerMirroredStrategy on loopback) read every record exactly once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import zygote

from shardfeed import ConvertOptions, convert

WORKER = """
import json, os, sys
import tensorflow as tf
import shardfeed
path, out = sys.argv[1], sys.argv[2]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
dist = strategy.distribute_datasets_from_function(
    lambda ctx: shardfeed.load(path, split="train", batch_size=4, image_size=16, training=False,
                               input_context=ctx, read=shardfeed.ReadOptions(with_filenames=True)))
seen = []
for batch in dist:
    for files in strategy.experimental_local_results(batch[2]):
        seen.extend(f.decode() for f in files.numpy())
with open(out, "w") as f:
    json.dump(seen, f)
"""


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.slow
def test_two_workers_read_every_record_exactly_once(photo_tree: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    convert(str(photo_tree), str(data), ConvertOptions(split="train=1", shards=5), workers=1, progress=False)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in _free_ports(2)]}
    procs = []
    for index in range(2):
        env = dict(
            os.environ,
            TF_CPP_MIN_LOG_LEVEL="2",
            TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
        )
        procs.append(
            zygote.popen(
                [sys.executable, "-c", WORKER, str(data), str(tmp_path / f"seen{index}.json")],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    for proc in procs:
        output, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, output[-3000:]
    seen = [json.loads((tmp_path / f"seen{i}.json").read_text()) for i in range(2)]
    assert seen[0] and seen[1] and not set(seen[0]) & set(seen[1])  # disjoint whole shards
    expected = Counter(f"{p.parent.name}/{p.name}" for p in photo_tree.rglob("*") if p.is_file())
    assert Counter(seen[0] + seen[1]) == expected
