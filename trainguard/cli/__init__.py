"""The ``trainguard`` command line.

| module | subcommand |
| --- | --- |
| ``dispatch`` | the entry point: parse, dispatch, errors as one line with an exit code |
| ``parser`` | every subcommand's options |
| ``run`` | ``run`` (here, or ``--submit`` to Slurm) |
| ``sbatch`` | ``sbatch`` |
| ``views`` | ``history``, ``stacks``, ``classify`` |
| ``nodes`` | ``nodes`` (the store's bad nodes) |
| ``hosts`` | ``hosts`` (Horovod host discovery); framework options of ``run`` |
| ``replay`` | ``replay`` |
| ``controller`` | ``controller`` (annotated Volcano and batch Jobs) |
"""

from __future__ import annotations

from trainguard.cli.dispatch import main
from trainguard.cli.parser import build_parser

__all__ = ["build_parser", "main"]
