"""Readable views of run history for people: tables with rich."""

from __future__ import annotations

from typing import IO, Any

from rich.console import Console
from rich.table import Table

from trainguard.goodput import describe as describe_goodput


def console_for(stream: IO[str]) -> Console:
    """A console that keeps tables readable when output goes to a file or a CI log."""
    return Console(file=stream, highlight=False, width=None if stream.isatty() else 160)


def print_report(report: dict[str, Any], console: Console) -> None:
    """Print a job's status line and one table row per round (and the failure, if any)."""
    colour = {"succeeded": "green", "failed": "red"}.get(report["status"], "yellow")
    console.print(f"job [cyan]{report['job_id']}[/]: [{colour}]{report['status']}[/], "
                  f"{len(report['rounds'])} round(s), {report['restarts']} budgeted restart(s)")
    rows = list(report["rounds"]) + ([report["failure"]] if "failure" in report else [])
    if report.get("goodput"):
        console.print(describe_goodput(report["goodput"]), markup=False)
    if report.get("sanity_check"):
        print_sanity(report["sanity_check"], console)
    if not rows:
        return
    table = Table("round", "detected", "source", "error code", "action", "node", "instance", "result",
                  "stages (s)", "reason")
    for r in rows:
        stages = " ".join(f"{k}={v:.2f}" for k, v in r["stages"].items())
        table.add_row(str(r["round"]), r["started_at"][11:23], r["error_source"], r["error_code"], r["action"],
                      r["node"] or "-", r["instance"] or "-", r["result"], stages, r["reason"])
    console.print(table)
    for r in rows:
        for note in r.get("notes") or ():
            console.print(f"  round {r['round']}: {note}", markup=False)


def print_sanity(check: dict[str, Any], console: Console) -> None:
    """The pre-start sanity check: one row per item and node, measured against the peers."""
    verdict = "[green]passed[/]" if check["passed"] else f"[red]failed[/] ({check['fail_action']})"
    console.print(f"sanity check {verdict} in {check['duration']:.1f} s: {check['reason']}")
    table = Table("item", "node", "value", "peers' median", "unit", "verdict")
    for item in check["items"]:
        for row in item["nodes"]:
            value, median = row["value"], row["peers_median"]
            table.add_row(item["item"], row["node"], "-" if value is None else f"{value:g}",
                          "-" if median is None else f"{median:g}", item["unit"], row["verdict"])
    console.print(table)
