"""``trainguard controller``: supervise annotated Volcano Jobs and batch/v1 Jobs in a cluster.

    trainguard controller [--namespace NS] [--kubeconfig FILE] [--state-dir DIR | --state-url URL]
                          [--lease-namespace NS] [--lease-duration S] [--identity ID] [--kinds volcano,batch]

In a pod it uses the service account; outside, ``--kubeconfig``, ``KUBECONFIG`` or ``~/.kube/config``.
Without ``--namespace`` it watches all namespaces. ``trainguard history --state-dir DIR`` reads the
rounds it records. SIGTERM or SIGINT stop it cleanly (the lease is released).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

from trainguard.errors import PolicyError, TrainguardError
from trainguard.store import default_state_dir, default_state_url


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainguard controller",
                                     description="supervise Volcano and batch/v1 Jobs carrying trainguard annotations")
    parser.add_argument("--namespace", default=None, help="watch only this namespace (default: all)")
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--context", default=None)
    parser.add_argument("--state-dir", default=None)
    parser.add_argument("--state-url", default=None, metavar="postgresql://...")
    parser.add_argument("--lease-namespace", default=None,
                        help="where the leader-election Lease lives (default: --namespace, the pod's, or default)")
    parser.add_argument("--lease-name", default="trainguard-controller")
    parser.add_argument("--lease-duration", type=float, default=15.0)
    parser.add_argument("--identity", default="", help="this replica's name in the Lease (default: host-pid)")
    parser.add_argument("--kinds", default="volcano,batch", help="comma-separated: volcano, batch")
    parser.add_argument("--watch-timeout", type=int, default=300)
    parser.add_argument("--log-level", default="INFO")
    return parser


def _pod_namespace() -> str | None:
    path = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    return path.read_text().strip() if path.exists() else None


def controller_main(argv: Sequence[str]) -> int:
    """Entry point for ``trainguard controller ...`` (``argv`` without the word ``controller``)."""
    args = build_parser().parse_args(list(argv))
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    try:
        return _run(args)
    except TrainguardError as exc:
        sys.stderr.write(f"trainguard: error: {exc}\n")
        return exc.exit_code


def _run(args: argparse.Namespace) -> int:
    from trainguard.adapters.kubernetes.client import load_api_client
    from trainguard.adapters.volcano import KINDS
    from trainguard.controller import Controller, ControllerOptions

    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise PolicyError("--kinds", f"{args.kinds!r}: choose from {', '.join(KINDS)}")
    options = ControllerOptions(
        namespace=args.namespace, state_dir=Path(args.state_dir) if args.state_dir else default_state_dir(),
        state_url=args.state_url or default_state_url(), identity=args.identity,
        lease_namespace=args.lease_namespace or args.namespace or _pod_namespace() or "default",
        lease_name=args.lease_name, lease_duration=args.lease_duration, watch_timeout=args.watch_timeout,
        kinds=kinds)
    options.state_dir.mkdir(parents=True, exist_ok=True)
    controller = Controller(load_api_client(args.kubeconfig, args.context), options)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return controller.run(stop)
