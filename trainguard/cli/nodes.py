"""``trainguard nodes``: the bad-node ledger of a whole store, and releasing a node from it.

A node isolated by one job is avoided by every job of the same store until its isolation window
(``--isolate-window``, a day by default) ends, or until someone releases it here:

    trainguard nodes [list] [--json] [--all]     nodes isolated now (--all: ended ones too)
    trainguard nodes release NODE                end NODE's isolations now
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from trainguard.errors import PolicyError, TrainguardError
from trainguard.store import RunStore, default_state_dir, default_state_url


def add_nodes_parser(sub: Any) -> None:
    """Register ``nodes`` on the CLI's subparsers."""
    nodes = sub.add_parser("nodes", help="list nodes isolated by any job of the store, or release one")
    nodes.add_argument("action", nargs="?", choices=["list", "release"], default="list")
    nodes.add_argument("node", nargs="?", help="with release: the node to release")
    nodes.add_argument("--state-dir", default=None)
    nodes.add_argument("--state-url", default=None, metavar="postgresql://...")
    nodes.add_argument("--all", action="store_true", help="also isolations that ended or were released")
    nodes.add_argument("--json", action="store_true")


def open_store(state_dir_arg: str | None, state_url: str | None) -> RunStore:
    """The store a read-only subcommand names; an absent SQLite history is an error, not created."""
    state_dir = Path(state_dir_arg) if state_dir_arg else default_state_dir()
    url = state_url or default_state_url()
    if not url and not (state_dir / RunStore.FILENAME).exists():
        raise TrainguardError(f"no run history in {state_dir} (use --state-dir or --state-url)")
    return RunStore(state_dir, url=url)


def run_nodes(args: argparse.Namespace, console: Console) -> int:
    if args.action == "release":
        if not args.node:
            raise PolicyError("nodes release", "needs a NODE, e.g. trainguard nodes release node-3")
        with open_store(args.state_dir, args.state_url) as store:
            count = store.release_node(args.node)
        if args.json:
            print(json.dumps({"node": args.node, "released": count}))
        elif count:
            console.print(f"{args.node}: {count} isolation(s) ended; jobs may place ranks on it again")
        else:
            console.print(f"{args.node} is not isolated")
        return 0
    if args.node:
        raise PolicyError("nodes", f"unexpected argument {args.node!r} (did you mean: nodes release {args.node})")
    with open_store(args.state_dir, args.state_url) as store:
        entries = store.isolations(include_inactive=args.all)
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    if not entries:
        console.print("no node is isolated")
        return 0
    table = Table("node", "job", "round", "since", "until", "state", "reason")
    for e in entries:
        state = "isolated" if e["active"] else ("released" if e["released_at"] else "expired")
        table.add_row(e["node"], e["job_id"], str(e["round"]), e["at"], e["expires_at"], state, e["reason"] or "")
    console.print(table)
    return 0
