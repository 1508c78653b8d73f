"""``trainguard run``: supervise COMMAND here, or (``--submit``) as a Slurm batch job watched
from outside. Also the policy the run options describe, used by ``sbatch`` to check them."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from trainguard.adapters.kubernetes import options as k8s_options
from trainguard.adapters.slurm_alloc import run_shape
from trainguard.cli.hosts import framework_fields
from trainguard.engine import supervise
from trainguard.errors import PolicyError, TrainguardError
from trainguard.hooks import PluginHost
from trainguard.ids import mint_job_id, validate_job_id
from trainguard.model import JobSpec, JobStatus
from trainguard.plugins.notifiers import WebhookNotifier, events_file_plugin
from trainguard.policy import PARSERS, Policy, build_policy, load_policy_file, parse_aimaster_args
from trainguard.render import print_report
from trainguard.sanity import config_from_args
from trainguard.store import RunStore, default_state_dir
from trainguard.tee import Tee, parse_ranks_filter, parse_tee

_NEEDS_COMMAND = "run needs a command after --, e.g. trainguard run --nproc 2 -- python train.py"


def policy_from(args: argparse.Namespace) -> Policy:
    """Defaults, then ``--policy``, then ``--aimaster-args``, then the flags."""
    layers: list[dict[str, Any]] = []
    if args.policy:
        layers.append(load_policy_file(args.policy))
    if args.aimaster_args:
        layers.append(parse_aimaster_args(args.aimaster_args))
    layers.append({attr: getattr(args, attr) for attr in PARSERS if hasattr(args, attr)})
    return build_policy(*layers)


def run(args: argparse.Namespace, command: list[str], console: Console) -> int:
    if not command:
        raise TrainguardError(_NEEDS_COMMAND)
    spec = _spec(args, command)
    policy = policy_from(args)
    if args.dry_run and args.adapter == "kubernetes":
        print(k8s_options.dry_run(spec, args), end="")
        return 0
    if args.dry_run:  # elsewhere: supervise, deciding and logging every recovery, carrying none out
        policy = policy.replace(decide_only=True)
    state_dir = Path(args.state_dir) if args.state_dir else default_state_dir()
    try:
        webhooks = {f"webhook-{i}": WebhookNotifier(url) for i, url in enumerate(args.notify_webhook)}
    except ValueError as exc:
        raise PolicyError("--notify-webhook", str(exc)) from None
    # The events file is opened here, so that a path it cannot write is said before anything starts.
    events = events_file_plugin(args.events_file) if args.events_file is not None else {}
    host = PluginHost(plugins={**webhooks, **events})
    host.adapters().check(args.adapter)  # a wrong name is said before the job is announced or a store opened
    console.print(f"[bold]trainguard[/] job [cyan]{spec.job_id}[/]: {' '.join(command)} "
                  f"({spec.nproc} rank(s), {spec.nodes} node(s)); history in {state_dir}")
    metrics = None
    if args.metrics_port is not None:
        from trainguard.metrics import serve_metrics

        metrics = serve_metrics(state_dir, args.metrics_port, [spec.job_id], state_url=args.state_url)
    try:
        status = supervise(spec, policy, state_dir=state_dir, adapter=args.adapter,
                           host=host, adapter_options=k8s_options.adapter_options(args),
                           tee=_tee(args, spec), state_url=args.state_url, takeover=args.takeover,
                           sanity=config_from_args(args))
    finally:
        if metrics is not None:
            metrics[0].shutdown()
            metrics[1].close()
    print_history(state_dir, spec.job_id, console, args.state_url)
    if status is JobStatus.RUNNING:
        console.print(f"job {spec.job_id} was requeued; it resumes with its history when the scheduler starts "
                      "it again")
    return 1 if status is JobStatus.FAILED else 0


def _spec(args: argparse.Namespace, command: list[str]) -> JobSpec:
    """The job the options describe; what is not given comes from the Slurm allocation, if
    any, as it does for srun."""
    framework = framework_fields(args)  # --roles sets --nproc
    shape = run_shape(args.adapter, args.nproc, args.nodes, os.environ)
    args.adapter, args.nproc, args.nodes = shape.adapter, shape.nproc, shape.nodes
    if args.nproc < 1 or args.nodes < 1 or args.slots_per_node < 0:
        raise PolicyError("--nproc/--nodes", "must be at least 1 (--slots-per-node at least 0)")
    env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise PolicyError("--env", f"{item!r} is not KEY=VALUE")
        env[key] = value
    slurm_job = os.environ.get("SLURM_JOB_ID") if args.adapter == "slurm" else None
    # Under Slurm the job id survives a requeue, so the history (budgets, bad nodes) carries on.
    job_id = validate_job_id(args.job_id) if args.job_id else (f"slurm-{slurm_job}" if slurm_job else mint_job_id())
    spec = JobSpec(job_id=job_id, command=tuple(command), nproc=args.nproc, nodes=args.nodes,
                   slots_per_node=args.slots_per_node, env=env, cwd=os.getcwd(), **framework)
    if spec.slots * spec.nodes < spec.nproc:
        raise PolicyError("--slots-per-node", f"{spec.nodes} node(s) x {spec.slots} slot(s) cannot hold "
                                              f"{spec.nproc} rank(s)")
    return spec


def _tee(args: argparse.Namespace, spec: JobSpec) -> Tee | None:
    """torchrun's ``--tee``: on by default when a person is watching the terminal."""
    shown = parse_tee(args.tee if args.tee is not None else ("3" if sys.stdout.isatty() else "0"))
    ranks = parse_ranks_filter(args.local_ranks_filter) if args.local_ranks_filter else None
    return Tee(shown, spec.role, ranks) if any(shown.values()) else None


def submit(args: argparse.Namespace, args_in: list[str], command: list[str], console: Console) -> int:
    """``run --adapter slurm --submit``: the in-allocation supervisor, submitted and watched."""
    if args.adapter != "slurm":
        raise PolicyError("--submit", "works with --adapter slurm only")
    if not command:
        raise TrainguardError(_NEEDS_COMMAND)
    policy = policy_from(args)
    state_dir = Path(args.state_dir or default_state_dir()).resolve()
    job_id = validate_job_id(args.job_id) if args.job_id else mint_job_id()
    inner = _inner_run_options(args_in, job_id)
    from trainguard.adapters.slurm_submit import SlurmSubmitter, batch_script

    submitter = SlurmSubmitter(job_id=job_id, script=lambda: batch_script(inner, state_dir, command),
                               state_dir=state_dir, policy=policy, sbatch_options=args.sbatch_option)
    console.print(f"[bold]trainguard[/] job [cyan]{job_id}[/]: submitting to Slurm; history in {state_dir}")
    status = submitter.run()
    print_history(state_dir, job_id, console)
    return 0 if status is JobStatus.SUCCEEDED else 1


def print_history(state_dir: Path, job_id: str, console: Console, state_url: str | None = None) -> None:
    """The job's restart records, if it has begun (an allocation may end before it does)."""
    with RunStore(state_dir, url=state_url) as store:
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
