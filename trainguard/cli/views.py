"""Reading what happened: ``history``, ``stacks`` and ``classify``."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from trainguard.cli.nodes import open_store
from trainguard.detectors import advise_hang_interval
from trainguard.errors import PolicyError, TrainguardError
from trainguard.hooks import PluginHost
from trainguard.logtail import read_stream_tail, read_tail
from trainguard.model import ErrorSource, Fault
from trainguard.policy import build_policy
from trainguard.render import print_report
from trainguard.stacks import format_groups


def history(args: argparse.Namespace, console: Console) -> int:
    with open_store(args.state_dir, args.state_url) as store:
        if args.job_id is None:
            reports = [store.report(job_id) for job_id in store.job_ids()]
            if args.json:
                print(json.dumps(reports, indent=2))
                return 0
            table = Table("job", "status", "rounds", "created", "command")
            for r in reports:
                table.add_row(r["job_id"], r["status"], str(len(r["rounds"])), r["created_at"],
                              " ".join(r["command"] or []))
            console.print(table)
            return 0
        report = store.report(args.job_id)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report, console)
    return 0


def stacks(args: argparse.Namespace, console: Console) -> int:
    with open_store(args.state_dir, args.state_url) as store:
        report = store.report(args.job_id)
    records = [r for r in [*report["rounds"], report.get("failure")] if r and "stacks" in r]
    if args.round is not None:
        records = [r for r in records if r["round"] == args.round]
    if args.json:
        print(json.dumps([{"round": r["round"], "stacks": r["stacks"]} for r in records], indent=2))
        return 0
    if not records:
        console.print(f"job {args.job_id}: no hang round with stacks")
        return 0
    for r in records:
        console.print(f"[bold]round {r['round']}[/] ({r['error_source']}, {r['started_at']}): {r['error_message']}")
        console.print(format_groups(r["stacks"]) or "  (no Python stacks could be read)", markup=False)
    return 0


def _signal_number(text: str | None) -> int | None:
    if text is None:
        return None
    name = text.upper()
    try:
        return int(name) if name.isdigit() else int(signal.Signals[name if name.startswith("SIG") else "SIG" + name])
    except (KeyError, ValueError):
        raise PolicyError("--signal", f"{text!r} is not a signal") from None


def classify(args: argparse.Namespace, console: Console) -> int:
    stdin = args.logfile == "-"  # a pipe: kubectl logs POD | trainguard classify -
    path = Path(args.logfile)
    if not stdin and path.is_dir():
        raise TrainguardError(f"{path}: is a directory")
    if not stdin and not path.exists():
        raise TrainguardError(f"{path}: no such file")
    try:
        policy = build_policy({"log_tail_bytes": args.tail_bytes} if args.tail_bytes else {})
    except PolicyError as exc:
        raise PolicyError("--tail-bytes", str(exc).split(": ", 1)[-1]) from None
    signum = _signal_number(args.signal)
    source = ErrorSource.EXIT_CODE if args.exit_code is not None or signum else ErrorSource.LOG
    fault = Fault(source, time.time(), exit_code=args.exit_code, signal=signum, log_path=None if stdin else str(path),
                  message="standard input" if stdin else path.name)
    tail = read_stream_tail(sys.stdin.buffer, policy.log_tail_bytes) if stdin else read_tail(path, policy.log_tail_bytes)
    verdict = PluginHost().classify(fault, tail, policy)
    if args.json:
        print(json.dumps(verdict.to_json(), indent=2))
        return 0
    console.print(f"[bold]{verdict.category.value}[/] ({verdict.fault_code}), confidence {verdict.confidence:.2f}")
    console.print(f"  retryable: {verdict.retryable}   node fault: {verdict.node_fault}"
                  f"{' (' + verdict.node + ')' if verdict.node else ''}   user error: {verdict.user_error}")
    console.print(f"  evidence: {verdict.evidence or '-'}")
    advice = advise_hang_interval(tail)
    if advice:
        console.print(f"  advice: the collective timeout is {advice[0]:g} s; set --job-hang-interval to about "
                      f"{advice[1]:g} s so hangs are caught (with stacks) before the watchdog kills the job")
    return 0
