"""The ``trainguard`` argument parser: every subcommand and its options, in one place.

Adapter, framework and sanity-check options are contributed by their own modules; policy flags
are generated from :data:`trainguard.policy.PARSERS` with AIMaster's names.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

from trainguard.adapters.kubernetes import options as k8s_options
from trainguard.cli.hosts import add_hosts_parser, add_run_arguments
from trainguard.cli.nodes import add_nodes_parser
from trainguard.cli.replay import add_replay_parser
from trainguard.policy import BOOLEAN_PARAMETERS, PARSERS, flag
from trainguard.sanity import add_arguments as add_sanity_arguments

_REPEATED = {"retryable_errors": "--retryable-error", "preload": "--preload"}


class Parser(argparse.ArgumentParser):
    """Usage errors are one line and exit 2, as every other bad input."""

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


def _add_state(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", default=None, help="run history (default $TRAINGUARD_STATE_DIR or .trainguard)")
    parser.add_argument("--state-url", default=None, metavar="postgresql://...",
                        help="keep the run history in PostgreSQL, shared by many supervisors (default "
                             "$TRAINGUARD_STATE_URL); logs stay under --state-dir")


def _add_run(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="supervise COMMAND as --nproc ranks: trainguard run [options] -- COMMAND ...")
    run.add_argument("--nproc", type=int, default=None,
                     help="ranks (RANK 0..N-1; default: the Slurm allocation's tasks, else 1)")
    run.add_argument("--nodes", type=int, default=None,
                     help="(virtual) nodes the ranks spread over (default: the Slurm allocation's, else 1)")
    run.add_argument("--slots-per-node", type=int, default=0,
                     help="ranks a node holds; more than nproc/nodes leaves spare capacity (default: even)")
    run.add_argument("--adapter", default=None, help="default: slurm inside a Slurm allocation, else local")
    run.add_argument("--job-id", default=None)
    _add_state(run)
    run.add_argument("--takeover", action="store_true",
                     help="take the job over even if another supervisor still owns it (exit code 3 without)")
    run.add_argument("--events-file", default=None, help="append every event as a JSON line")
    run.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                     help="serve Prometheus metrics (rounds, faults by class, isolated nodes, ETTR) on PORT")
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
    run.add_argument("--tee", default=None, metavar="SPEC",
                     help="show ranks' output on stdout, prefixed [default<rank>]: (torchrun's --tee: 0-3 or "
                          "RANK:LEVEL,...; default 3 when stdout is a terminal, else 0); logs are kept either way")
    run.add_argument("--local-ranks-filter", default=None, metavar="RANKS",
                     help="with --tee: only these ranks, e.g. 0,1")
    _add_policy_flags(run)
    add_run_arguments(run)
    add_sanity_arguments(run)
    k8s_options.add_arguments(run)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="trainguard", description="Fault tolerance for distributed training jobs.")
    levels = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
    default_level = os.environ.get("TRAINGUARD_LOG_LEVEL", "INFO").upper()
    parser.add_argument("--log-level", type=str.upper, choices=levels,
                        default=default_level if default_level in levels else "INFO")
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=Parser)
    _add_run(sub)

    history = sub.add_parser("history", help="show a job's restart records (all jobs without JOB_ID)")
    history.add_argument("job_id", nargs="?")
    _add_state(history)
    history.add_argument("--json", action="store_true")

    sbatch = sub.add_parser(
        "sbatch", help="submit COMMAND to Slurm under trainguard: trainguard sbatch [run options] -- "
                       "[sbatch --options=value ...] COMMAND ...",
        description="Write a batch script that runs COMMAND under 'trainguard run --adapter slurm' with the "
                    "run options given, and submit it. After --, sbatch options come first, in --name=value "
                    "form; the first word that is not an option starts COMMAND.")
    sbatch.add_argument("--dry-run", action="store_true", help="print the batch script, submit nothing")
    sub.add_parser("controller", help="watch annotated Volcano and batch Jobs and supervise them "
                                      "(trainguard controller --help)", add_help=False)

    stacks = sub.add_parser("stacks", help="show the call stacks captured when a job hung")
    stacks.add_argument("job_id")
    stacks.add_argument("--round", type=int, default=None, help="only this round")
    _add_state(stacks)
    stacks.add_argument("--json", action="store_true")

    classify = sub.add_parser("classify", help="classify a failure log")
    classify.add_argument("logfile", help="the log to read (only its tail), or - for standard input")
    classify.add_argument("--exit-code", type=int, default=None)
    classify.add_argument("--signal", default=None, help="fatal signal, by number or name (SIGSEGV)")
    classify.add_argument("--tail-bytes", type=int, default=None)
    classify.add_argument("--json", action="store_true")

    demo = sub.add_parser("demo", help="supervise a real 4-rank PyTorch job through injected faults")
    demo.add_argument("--state-dir", default=None)
    demo.add_argument("--steps", type=int, default=30)
    add_nodes_parser(sub)
    add_hosts_parser(sub)
    add_replay_parser(sub)
    return parser


def subcommand(args: list[str]) -> str | None:
    """The subcommand word, past the global options (``--log-level LEVEL``)."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] == "--log-level" else 1
    return args[i] if i < len(args) else None


def join_aimaster_args(args: list[str]) -> list[str]:
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
