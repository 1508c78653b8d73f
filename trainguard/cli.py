"""``trainguard``: supervise a job, read its history, classify a log, run the demo.

Bad input is one line on stderr and exit code 2, never a traceback; a job that fails for good
exits 1; an interrupted supervisor exits 128 + the signal number.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any, NoReturn, Sequence

from rich.console import Console
from rich.table import Table

from trainguard.detectors import advise_hang_interval
from trainguard.engine import SupervisorInterrupted, supervise
from trainguard.errors import PolicyError, TrainguardError
from trainguard.hooks import PluginHost
from trainguard.logtail import read_tail
from trainguard.model import ErrorSource, Fault, JobSpec, JobStatus
from trainguard.render import print_report, console_for
from trainguard.policy import BOOLEAN_PARAMETERS, PARSERS, build_policy, flag, load_policy_file, parse_aimaster_args
from trainguard.plugins.notifiers import WebhookNotifier
from trainguard.stacks import format_groups
from trainguard.store import RunStore, default_state_dir

_REPEATED = {"retryable_errors": "--retryable-error", "preload": "--preload"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"trainguard: error: {message}\n")
        raise SystemExit(2)


def _add_policy_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("fault tolerance (AIMaster names and defaults)")
    for attr in PARSERS:
        if attr in _REPEATED:
            group.add_argument(_REPEATED[attr], dest=attr, action="append", metavar="VALUE",
                               default=argparse.SUPPRESS)
        elif attr in BOOLEAN_PARAMETERS:
            group.add_argument(flag(attr), dest=attr, nargs="?", const="True", metavar="BOOL",
                               default=argparse.SUPPRESS)
        else:
            group.add_argument(flag(attr), dest=attr, metavar="VALUE", default=argparse.SUPPRESS)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="trainguard", description="Fault tolerance for distributed training jobs.")
    levels = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
    default_level = os.environ.get("TRAINGUARD_LOG_LEVEL", "INFO").upper()
    parser.add_argument("--log-level", type=str.upper, choices=levels,
                        default=default_level if default_level in levels else "INFO")
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="supervise COMMAND as --nproc ranks: trainguard run [options] -- COMMAND ...")
    run.add_argument("--nproc", type=int, default=1, help="ranks (RANK 0..N-1)")
    run.add_argument("--nodes", type=int, default=1, help="(virtual) nodes the ranks spread over")
    run.add_argument("--slots-per-node", type=int, default=0,
                     help="ranks a node holds; more than nproc/nodes leaves spare capacity (default: even)")
    run.add_argument("--adapter", default="local")
    run.add_argument("--job-id", default=None)
    run.add_argument("--state-dir", default=None, help="run history (default $TRAINGUARD_STATE_DIR or .trainguard)")
    run.add_argument("--events-file", default=None, help="append every event as a JSON line")
    run.add_argument("--policy", default=None, metavar="FILE.yaml")
    run.add_argument("--aimaster-args", default=None, metavar="STRING",
                     help='AIMaster-style arguments, e.g. "--job-execution-mode=Sync --enable-job-restart=True"')
    run.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    run.add_argument("--submit", action="store_true",
                     help="with --adapter slurm, from outside an allocation: submit, watch, resubmit away from "
                          "bad nodes")
    run.add_argument("--sbatch-option", action="append", default=[], metavar="--NAME=VALUE",
                     help="with --submit: an sbatch option (repeatable), e.g. --sbatch-option=--nodes=3")
    run.add_argument("--notify-webhook", action="append", default=[], metavar="URL",
                     help="POST every event as JSON to URL (repeatable)")
    _add_policy_flags(run)

    history = sub.add_parser("history", help="show a job's restart records (all jobs without JOB_ID)")
    history.add_argument("job_id", nargs="?")
    history.add_argument("--state-dir", default=None)
    history.add_argument("--json", action="store_true")

    sbatch = sub.add_parser(
        "sbatch", help="submit COMMAND to Slurm under trainguard: trainguard sbatch [run options] -- "
                       "[sbatch --options=value ...] COMMAND ...",
        description="Write a batch script that runs COMMAND under 'trainguard run --adapter slurm' with the "
                    "run options given, and submit it. After --, sbatch options come first, in --name=value "
                    "form; the first word that is not an option starts COMMAND.")
    sbatch.add_argument("--dry-run", action="store_true", help="print the batch script, submit nothing")

    stacks = sub.add_parser("stacks", help="show the call stacks captured when a job hung")
    stacks.add_argument("job_id")
    stacks.add_argument("--round", type=int, default=None, help="only this round")
    stacks.add_argument("--state-dir", default=None)
    stacks.add_argument("--json", action="store_true")

    classify = sub.add_parser("classify", help="classify a failure log")
    classify.add_argument("logfile")
    classify.add_argument("--exit-code", type=int, default=None)
    classify.add_argument("--signal", default=None, help="fatal signal, by number or name (SIGSEGV)")
    classify.add_argument("--tail-bytes", type=int, default=None)
    classify.add_argument("--json", action="store_true")

    demo = sub.add_parser("demo", help="supervise a real 4-rank PyTorch job through injected faults")
    demo.add_argument("--state-dir", default=None)
    demo.add_argument("--steps", type=int, default=30)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if _subcommand(args_in) == "sbatch":
        return _sbatch_main(args_in)
    command: list[str] = []
    if "--" in args_in:
        cut = args_in.index("--")
        args_in, command = args_in[:cut], args_in[cut + 1:]
    parser = build_parser()
    args = parser.parse_args(_join_aimaster_args(args_in))
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    console = console_for(sys.stdout)
    try:
        if args.cmd == "run" and args.submit:
            return _submit(args, args_in, command, console)
        if args.cmd == "run":
            return _run(args, command, console)
        if command:
            parser.error(f"unexpected arguments after --: {' '.join(command)}")
        if args.cmd == "history":
            return _history(args, console)
        if args.cmd == "classify":
            return _classify(args, console)
        if args.cmd == "stacks":
            return _stacks(args, console)
        from trainguard.demo.run import run_demo

        return run_demo(state_dir=args.state_dir, steps=args.steps, console=console)
    except SupervisorInterrupted as exc:
        sys.stderr.write(f"trainguard: {exc}\n")
        return exc.exit_code
    except TrainguardError as exc:
        sys.stderr.write(f"trainguard: error: {exc}\n")
        return exc.exit_code


def _submit(args: argparse.Namespace, args_in: list[str], command: list[str], console: Console) -> int:
    """``run --adapter slurm --submit``: the in-allocation supervisor, submitted and watched."""
    if args.adapter != "slurm":
        raise PolicyError("--submit", "works with --adapter slurm only")
    if not command:
        raise TrainguardError("run needs a command after --, e.g. trainguard run --nproc 2 -- python train.py")
    policy = _policy_from(args)
    state_dir = Path(args.state_dir or default_state_dir()).resolve()
    job_id = args.job_id or time.strftime("tg-%Y%m%d-%H%M%S-") + secrets.token_hex(2)
    inner = _inner_run_options(args_in, job_id)
    from trainguard.adapters.slurm_submit import SlurmSubmitter, batch_script

    submitter = SlurmSubmitter(job_id=job_id, script=lambda: batch_script(inner, state_dir, command),
                               state_dir=state_dir, policy=policy, sbatch_options=args.sbatch_option)
    console.print(f"[bold]trainguard[/] job [cyan]{job_id}[/]: submitting to Slurm; history in {state_dir}")
    status = submitter.run()
    _print_history(state_dir, job_id, console)
    return 0 if status is JobStatus.SUCCEEDED else 1


def _print_history(state_dir: Path, job_id: str, console: Console) -> None:
    """The job's restart records, if it has begun (an allocation may end before it does)."""
    with RunStore(state_dir) as store:
        if store.job(job_id) is not None:
            print_report(store.report(job_id), console)


def _inner_run_options(args_in: list[str], job_id: str) -> list[str]:
    """The ``run`` options as given, less the outside-only ones, with the job id pinned."""
    start = args_in.index("run") + 1
    end = args_in.index("--") if "--" in args_in else len(args_in)
    out, tokens = [], args_in[start:end]
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--submit" or token.startswith("--sbatch-option=") or token.startswith("--adapter="):
            i += 1
        elif token in ("--sbatch-option", "--adapter", "--job-id"):
            i += 2
        elif token.startswith("--job-id="):
            i += 1
        else:
            out.append(token)
            i += 1
    return ["--job-id", job_id, *out]


def _subcommand(args: list[str]) -> str | None:
    """The subcommand word, past the global options (``--log-level LEVEL``)."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] == "--log-level" else 1
    return args[i] if i < len(args) else None


def _sbatch_main(args_in: list[str]) -> int:
    """``trainguard sbatch``: options for ``run`` before ``--``; sbatch options and COMMAND after."""
    cut = args_in.index("--") if "--" in args_in else len(args_in)
    head, tail = args_in[:cut], args_in[cut + 1:]
    at = head.index("sbatch")
    run_options = [a for a in head[at + 1:] if a != "--dry-run"]
    dry_run = "--dry-run" in head[at + 1:]
    try:
        parser = build_parser()
        # Check the run options now, so a typo fails here and not in the queue hours later.
        checked = parser.parse_args([*head[:at], "run", *_join_aimaster_args(run_options)])
        _policy_from(checked)
        sbatch_options = []
        while tail and tail[0].startswith("-"):
            sbatch_options.append(tail.pop(0))
        if not tail:
            raise TrainguardError("sbatch needs a command after --, e.g. trainguard sbatch --nproc 4 -- "
                                  "--nodes=3 python train.py")
        state_dir = Path(checked.state_dir or default_state_dir()).resolve()
        from trainguard.adapters.slurm_submit import batch_script

        script = batch_script(run_options, state_dir, tail)
        if dry_run:
            print(script, end="")
            return 0
        folder = state_dir / "sbatch"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / (time.strftime("trainguard-%Y%m%d-%H%M%S-") + secrets.token_hex(2) + ".sh")
        path.write_text(script)
        path.chmod(0o755)
        from trainguard.adapters.slurm import slurm_command

        job = slurm_command("sbatch", "--parsable", *sbatch_options, str(path)).strip().split(";")[0]
    except TrainguardError as exc:
        sys.stderr.write(f"trainguard: error: {exc}\n")
        return exc.exit_code
    print(f"submitted Slurm job {job}; trainguard job slurm-{job}; history: trainguard history slurm-{job} "
          f"--state-dir {state_dir}")
    return 0


def _join_aimaster_args(args: list[str]) -> list[str]:
    """AIMaster strings start with ``--``, which argparse refuses as a separate value."""
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i] == "--aimaster-args" and i + 1 < len(args):
            out.append(f"--aimaster-args={args[i + 1]}")
            i += 2
        else:
            out.append(args[i])
            i += 1
    return out


def _policy_from(args: argparse.Namespace) -> Any:
    layers: list[dict[str, Any]] = []
    if args.policy:
        layers.append(load_policy_file(args.policy))
    if args.aimaster_args:
        layers.append(parse_aimaster_args(args.aimaster_args))
    layers.append({attr: getattr(args, attr) for attr in PARSERS if hasattr(args, attr)})
    return build_policy(*layers)


def _run(args: argparse.Namespace, command: list[str], console: Console) -> int:
    if not command:
        raise TrainguardError("run needs a command after --, e.g. trainguard run --nproc 2 -- python train.py")
    if args.nproc < 1 or args.nodes < 1 or args.slots_per_node < 0:
        raise PolicyError("--nproc/--nodes", "must be at least 1 (--slots-per-node at least 0)")
    policy = _policy_from(args)
    env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise PolicyError("--env", f"{item!r} is not KEY=VALUE")
        env[key] = value
    slurm_job = os.environ.get("SLURM_JOB_ID") if args.adapter == "slurm" else None
    # Under Slurm the job id survives a requeue, so the history (budgets, bad nodes) carries on.
    job_id = args.job_id or (f"slurm-{slurm_job}" if slurm_job else
                             time.strftime("tg-%Y%m%d-%H%M%S-") + secrets.token_hex(2))
    spec = JobSpec(job_id=job_id, command=tuple(command), nproc=args.nproc, nodes=args.nodes,
                   slots_per_node=args.slots_per_node, env=env, cwd=os.getcwd())
    if spec.slots * spec.nodes < spec.nproc:
        raise PolicyError("--slots-per-node", f"{spec.nodes} node(s) x {spec.slots} slot(s) cannot hold "
                                              f"{spec.nproc} rank(s)")
    state_dir = Path(args.state_dir) if args.state_dir else default_state_dir()
    console.print(f"[bold]trainguard[/] job [cyan]{job_id}[/]: {' '.join(command)} "
                  f"({spec.nproc} rank(s), {spec.nodes} node(s)); history in {state_dir}")
    try:
        webhooks = {f"webhook-{i}": WebhookNotifier(url) for i, url in enumerate(args.notify_webhook)}
    except ValueError as exc:
        raise PolicyError("--notify-webhook", str(exc)) from None
    host = PluginHost(plugins=webhooks)
    status = supervise(spec, policy, state_dir=state_dir, adapter=args.adapter, events_file=args.events_file,
                       host=host)
    _print_history(state_dir, job_id, console)
    if status is JobStatus.RUNNING:
        console.print(f"job {job_id} was requeued; it resumes with its history when the scheduler starts it again")
    return 1 if status is JobStatus.FAILED else 0


def _open_store(state_dir_arg: str | None) -> RunStore:
    state_dir = Path(state_dir_arg) if state_dir_arg else default_state_dir()
    if not (state_dir / RunStore.FILENAME).exists():
        raise TrainguardError(f"no run history in {state_dir} (use --state-dir)")
    return RunStore(state_dir)


def _stacks(args: argparse.Namespace, console: Console) -> int:
    store = _open_store(args.state_dir)
    try:
        report = store.report(args.job_id)
    finally:
        store.close()
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


def _history(args: argparse.Namespace, console: Console) -> int:
    store = _open_store(args.state_dir)
    try:
        if args.job_id is None:
            reports = [store.report(job_id) for job_id in store.job_ids()]
            if args.json:
                print(json.dumps(reports, indent=2))
            else:
                table = Table("job", "status", "rounds", "created", "command")
                for r in reports:
                    table.add_row(r["job_id"], r["status"], str(len(r["rounds"])), r["created_at"],
                                  " ".join(r["command"] or []))
                console.print(table)
            return 0
        report = store.report(args.job_id)
    finally:
        store.close()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report, console)
    return 0


def _signal_number(text: str | None) -> int | None:
    if text is None:
        return None
    import signal

    name = text.upper()
    try:
        return int(name) if name.isdigit() else int(signal.Signals[name if name.startswith("SIG") else "SIG" + name])
    except (KeyError, ValueError):
        raise PolicyError("--signal", f"{text!r} is not a signal") from None


def _classify(args: argparse.Namespace, console: Console) -> int:
    path = Path(args.logfile)
    if not path.is_file():
        raise TrainguardError(f"{path}: no such file")
    policy = build_policy({"log_tail_bytes": args.tail_bytes} if args.tail_bytes else {})
    signum = _signal_number(args.signal)
    source = ErrorSource.EXIT_CODE if args.exit_code is not None or signum else ErrorSource.LOG
    fault = Fault(source, time.time(), exit_code=args.exit_code, signal=signum, log_path=str(path),
                  message=f"{path.name}")
    tail = read_tail(path, policy.log_tail_bytes)
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


if __name__ == "__main__":
    sys.exit(main())
