"""``trainguard replay JOB_ID --policy NEW.yaml``: what another policy would have decided.

The recorded faults of the job go, in order, through the real strategies under the job's
policy with ``NEW.yaml`` laid over it (only the parameters you change need to be in it); the
output shows, round by round, the decision taken then and the one the new policy takes, and
the simulated ETTR of each (see :mod:`trainguard.replay`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from trainguard.cli.nodes import open_store
from trainguard.errors import JobStateError
from trainguard.policy import build_policy, load_policy_file
from trainguard.replay import recorded_policy, replay
from trainguard.timefmt import iso_ms


def add_replay_parser(sub: Any) -> None:
    """Register ``replay`` on the CLI's subparsers."""
    parser = sub.add_parser("replay", help="re-decide a recorded job's faults under another policy")
    parser.add_argument("job_id")
    parser.add_argument("--policy", required=True, metavar="NEW.yaml",
                        help="parameters to change, laid over the policy the job ran under")
    parser.add_argument("--spare-nodes", type=int, default=None,
                        help="nodes beyond the job's own (default: as many as the recording isolated)")
    parser.add_argument("--state-dir", default=None)
    parser.add_argument("--state-url", default=None, metavar="postgresql://...")
    parser.add_argument("--json", action="store_true")


def run_replay(args: argparse.Namespace, console: Console) -> int:
    store = open_store(args.state_dir, args.state_url)
    try:
        job = store.job(args.job_id)
        if job is None:
            raise JobStateError(args.job_id, f"no such job in {store.location}")
        policy = build_policy(load_policy_file(args.policy), base=recorded_policy(job))
        result = replay(store, args.job_id, policy, spare_nodes=args.spare_nodes)
    finally:
        store.close()
    if args.json:
        print(json.dumps({**result.to_json(), "policy": args.policy}, indent=2))
        return 0
    table = Table("#", "detected", "fault", "node", "recorded", f"under {args.policy}", title=f"job {args.job_id}")
    for r in result.rounds:
        replayed = r.replayed or "—"
        style = "bold yellow" if r.changed else ""
        table.add_row(str(r.index), iso_ms(r.at)[11:23], r.error_code, r.node or "", r.recorded,
                      f"[{style}]{replayed}[/]" if style else replayed)
    console.print(table)
    for r in result.rounds:
        if r.changed:
            console.print(f"  #{r.index}: {r.recorded} → {r.replayed or 'nothing (job ended)'}: {r.replayed_reason}",
                          markup=False)
    rec, new = result.recorded, result.replayed
    console.print(f"{result.changed} of {len(result.rounds)} decision(s) change. Simulated ETTR: recorded policy "
                  f"{_ettr(rec)}, {args.policy} {_ettr(new)} (measured: {rec.get('measured_ettr')})", markup=False)
    return 0


def _ettr(sim: dict[str, Any]) -> str:
    text = f"{sim['ettr_simulated']}"
    return text if sim["finished"] else f"{text} (gives up at #{sim['failed_at']})"
