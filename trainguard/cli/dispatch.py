"""The ``trainguard`` entry point: parse, run the subcommand, turn errors into one line.

Bad input is one line on stderr and exit code 2, never a traceback; a job that fails for good
exits 1; a job another live supervisor owns exits 3 (``--takeover`` takes it over); an
interrupted supervisor exits 128 + the signal number, and a reader that closes the output pipe
early ends the command quietly with 141 (128 + SIGPIPE), as it would a shell tool.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Sequence

from trainguard.cli import hosts, nodes, replay, run, views
from trainguard.cli.controller import controller_main
from trainguard.cli.parser import build_parser, join_aimaster_args, subcommand
from trainguard.cli.sbatch import sbatch_main
from trainguard.engine import SupervisorInterrupted
from trainguard.errors import TrainguardError
from trainguard.render import console_for

# Subcommands that take (args, console); ``run`` and ``demo`` need more.
_VIEWS = {"history": views.history, "classify": views.classify, "stacks": views.stacks,
          "nodes": nodes.run_nodes, "hosts": hosts.run_hosts, "replay": replay.run_replay}


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if subcommand(args_in) == "controller":
        return controller_main(args_in[args_in.index("controller") + 1:])
    if subcommand(args_in) == "sbatch":
        return sbatch_main(args_in)
    command: list[str] = []
    if "--" in args_in:
        cut = args_in.index("--")
        args_in, command = args_in[:cut], args_in[cut + 1:]
    parser = build_parser()
    args = parser.parse_args(join_aimaster_args(args_in))
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    console = console_for(sys.stdout)
    try:
        if args.cmd == "run":
            return run.submit(args, args_in, command, console) if args.submit else run.run(args, command, console)
        if command:
            parser.error(f"unexpected arguments after --: {' '.join(command)}")
        if args.cmd in _VIEWS:
            return _VIEWS[args.cmd](args, console)
        from trainguard.demo.run import run_demo

        return run_demo(state_dir=args.state_dir, steps=args.steps, console=console)
    except SupervisorInterrupted as exc:
        sys.stderr.write(f"trainguard: {exc}\n")
        return exc.exit_code
    except BrokenPipeError:
        # The reader went away (`trainguard history --json | head`): stop quietly, as a shell
        # tool does on SIGPIPE, and keep Python from complaining again when it flushes at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except TrainguardError as exc:
        sys.stderr.write(f"trainguard: error: {exc}\n")
        return exc.exit_code
