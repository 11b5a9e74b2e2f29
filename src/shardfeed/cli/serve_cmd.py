"""`shardfeed serve dispatcher|worker`: run a tf.data service server until Ctrl-C / SIGTERM."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from shardfeed.cli.options import add_cache_flags

log = logging.getLogger("shardfeed")
# A worker is often started before its dispatcher (cluster launchers start everything at once);
# two minutes covers a dispatcher's start-up, and a typo'd address still fails within a coffee.
DISPATCHER_TIMEOUT = 120.0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run a tf.data service dispatcher or worker (decode on other machines)",
        description="TensorFlow's tf.data service servers. They have NO authentication and listen on all "
        "interfaces: run them on a private network or behind a firewall.",
    )
    roles = p.add_subparsers(dest="role", required=True, metavar="ROLE")
    d = roles.add_parser("dispatcher", help="the coordinator trainers and workers connect to")
    d.add_argument("--port", type=int, default=5050, help="default 5050 (0: any free port)")
    d.add_argument("--work-dir", help="journal its state here, so that a restarted dispatcher resumes")
    d.add_argument("--worker-timeout", type=float, metavar="SECONDS", help="a worker silent this long counts as gone")
    w = roles.add_parser("worker", help="runs input pipelines for the dispatcher's jobs")
    w.add_argument("--dispatcher", required=True, help="HOST:PORT of the dispatcher")
    w.add_argument("--port", type=int, default=0, help="default: any free port")
    w.add_argument("--worker-address", help="HOST:PORT trainers use to reach this worker (default localhost:PORT)")
    w.add_argument(
        "--dispatcher-timeout",
        type=float,
        default=DISPATCHER_TIMEOUT,
        metavar="SECONDS",
        help=f"give up (exit 1) when the dispatcher has not answered within this long (default {DISPATCHER_TIMEOUT:g}; "
        "0: wait for it forever). Once registered, a worker outlives its dispatcher: a restarted one takes it back",
    )
    w.add_argument(
        "--mirror",
        action="append",
        metavar="URL",
        help="a converted folder in a bucket (s3://, gs://, ...) that trainers read through this service: all its "
        "shards are fetched, verified, into --cache-dir before the worker serves, and kept there while it runs. "
        "Trainers pass the same folder as ServiceOptions(mirror_dir=...) or --cache-dir (repeatable)",
    )
    add_cache_flags(w)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Starts the server and serves until SIGINT/SIGTERM, which always end it (see
    `data_service.wait_until_reachable` for why a worker waits for its dispatcher first)."""
    from shardfeed.tools import data_service as ds

    with ds.stop_on_signals() as stop:
        ds.check_port_free(args.port)
        if args.role == "dispatcher":
            with ds.uninterruptible_call(ds.START_SECONDS):
                server = ds.start_dispatcher(args.port, work_dir=args.work_dir, worker_timeout=args.worker_timeout)
            what = "dispatcher"
        else:
            for url in args.mirror or []:
                _mirror(url)
            timeout = args.dispatcher_timeout or None
            limit = f"{timeout:g} s" if timeout else "never: --dispatcher-timeout 0"

            def waiting() -> None:
                log.info(
                    "waiting for the dispatcher at %s (nothing answers there yet; giving up after %s)",
                    args.dispatcher,
                    limit,
                )

            if not ds.wait_until_reachable(args.dispatcher, timeout, stop, waiting):
                log.info("stopped before the server had started")
                return 0
            with ds.uninterruptible_call(ds.START_SECONDS):
                server = ds.start_worker(args.dispatcher, args.port, worker_address=args.worker_address)
            what = f"worker (for {args.dispatcher})"
        log.info("serving tf.data %s at %s (Ctrl-C to stop)\nwarning: %s", what, ds.address(server), ds.SECURITY_NOTE)
        ds.serve_until(server, stop)
    log.info("stopped")
    return 0


def _mirror(url: str) -> None:
    """Fetches the folder's shards into this host's shard cache (the --cache-dir/--cache-limit the
    process was given) and keeps them pinned while the worker runs (read/remote/mirror.py)."""
    from shardfeed.read.options import ReadOptions
    from shardfeed.read.remote.mirror import mirror

    mirror(url, ReadOptions().shard_cache())
