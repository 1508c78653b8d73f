"""``trainguard hosts JOB_ID``: the job's healthy hosts as Horovod's host discovery script
prints them, and the ``run`` options that choose a framework and an elastic size.

    trainguard hosts JOB_ID [--virtual] [--json]    host:slots per line, isolated nodes left out

The hosts are those the job's adapter offered it (its latest ``job_started`` or ``job_resumed``
event), less the nodes isolated now: by any job of the store until the isolation's window ends
(``--isolate-window``) or it is released (``trainguard nodes release``). See
:mod:`trainguard.frameworks.horovod`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console

from trainguard.cli.nodes import open_store
from trainguard.errors import PolicyError, TrainguardError
from trainguard.frameworks import FRAMEWORKS, parse_roles
from trainguard.frameworks.horovod import hosts_lines
from trainguard.policy import build_policy


class _Nnodes(argparse.Action):
    """torchrun's ``--nnodes MIN:MAX`` (or ``N``): the elastic bounds ``--min-nodes``/``--max-nodes``."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None) -> None:
        try:
            policy = build_policy({"nnodes": values})
        except PolicyError as exc:
            parser.error(str(exc))
        namespace.min_nodes, namespace.max_nodes = policy.min_nodes, policy.max_nodes


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    """``run``'s framework and elastic options."""
    run.add_argument("--framework", choices=FRAMEWORKS, default="pytorch",
                     help="how ranks are launched and told about each other (default pytorch)")
    run.add_argument("--roles", default=None, metavar="ROLE=N,...",
                     help="tensorflow: the tasks in rank order, e.g. chief=1,worker=4,ps=2,evaluator=1 "
                          "(sets --nproc)")
    run.add_argument("--nnodes", action=_Nnodes, metavar="MIN:MAX", default=argparse.SUPPRESS,
                     help="elastic job: go on with at least MIN nodes, at most MAX (torchrun's spelling of "
                          "--min-nodes/--max-nodes)")


def framework_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The ``JobSpec`` fields of ``run``'s framework options; ``--roles`` sets ``--nproc``."""
    if args.roles is None:
        if args.framework == "tensorflow":
            raise TrainguardError("--framework tensorflow needs --roles, e.g. --roles chief=1,worker=2,ps=1")
        return {"framework": args.framework}
    if args.framework != "tensorflow":
        raise TrainguardError("--roles is for --framework tensorflow")
    roles = parse_roles(args.roles)
    total = sum(count for _, count in roles)
    if args.nproc is not None and args.nproc != total:
        raise TrainguardError(f"--nproc {args.nproc} but --roles {args.roles} has {total} task(s)")
    args.nproc = total
    return {"framework": args.framework, "roles": roles}


def add_hosts_parser(sub: Any) -> None:
    """Register ``hosts`` on the CLI's subparsers."""
    hosts = sub.add_parser("hosts", help="a job's healthy hosts as host:slots lines (Horovod host discovery)")
    hosts.add_argument("job_id")
    hosts.add_argument("--state-dir", default=None)
    hosts.add_argument("--state-url", default=None, metavar="postgresql://...")
    hosts.add_argument("--virtual", action="store_true",
                       help="local adapter: one line per virtual node instead of one localhost line")
    hosts.add_argument("--json", action="store_true")


def healthy_hosts(store: Any, job_id: str, *, virtual: bool = False) -> list[str]:
    """``host:slots`` lines of the job's hosts not isolated now."""
    if store.job(job_id) is None:
        raise TrainguardError(f"no job {job_id!r} in {store.location}")
    offered = [e["data"] for e in store.events(job_id) if e["type"] in ("job_started", "job_resumed")
               and "hosts" in e["data"]]
    if not offered:
        raise TrainguardError(f"job {job_id!r} has not started yet: its hosts are not known")
    latest = offered[-1]
    isolated = {entry["node"] for entry in store.isolations() if entry["active"]}
    return hosts_lines(latest["hosts"], int(latest["slots_per_node"]), isolated,
                       merge_local=latest.get("adapter") == "local" and not virtual)


def run_hosts(args: argparse.Namespace, console: Console) -> int:
    with open_store(args.state_dir, args.state_url) as store:
        lines = healthy_hosts(store, args.job_id, virtual=args.virtual)
    if args.json:
        print(json.dumps([{"host": h, "slots": int(s)} for h, s in (line.rsplit(":", 1) for line in lines)]))
    else:
        for line in lines:  # plain lines, no markup: Horovod parses this output
            print(line)
    return 0
