"""Placing, starting and stopping ranks through the adapter, with seed 002's restart counters."""

from __future__ import annotations

import signal
from dataclasses import replace
from typing import Callable, Mapping, Sequence

from trainguard.adapters import Adapter, Exit, Launch
from trainguard.engine.rank_env import Layout, local_ranks, omp_threads_default, rank_env
from trainguard.engine.state import JobState
from trainguard.errors import AdapterError
from trainguard.frameworks import Framework
from trainguard.hooks import PluginHost
from trainguard.model import Action, Instance, JobSpec, RoundRecord, RoundResult
from trainguard.policy import Policy

# (schedule count, process-start count) of a rank before a start.
Counts = Mapping[int, tuple[int, int]]


class StartFailed(AdapterError):
    """Ranks could not be placed or started; ``code`` is the failure's fault code."""

    def __init__(self, code: str, reason: str, cause: AdapterError) -> None:
        super().__init__(cause.adapter, reason, permanent=cause.permanent)
        self.code = code
        self.reason = reason


class Launcher:
    """Starts and stops the job's ranks; the only part of the engine that builds launches."""

    def __init__(self, spec: JobSpec, policy: Policy, adapter: Adapter, host: PluginHost, state: JobState,
                 base_env: Mapping[str, str], *, on_start: Callable[[int], None],
                 on_started: Callable[[int, str | None], None] | None = None,
                 framework: Framework | None = None) -> None:
        self.spec = spec
        self.framework = framework or Framework(spec, policy)
        self.policy = policy
        self.adapter = adapter
        self.host = host
        self.state = state
        self.base_env = dict(base_env)
        self.on_start = on_start
        self.on_started = on_started
        self._omp_checked = False

    def counts(self) -> dict[int, tuple[int, int]]:
        return {rank: (inst.schedule_count, inst.proc_start_count) for rank, inst in self.state.instances.items()}

    def start(self, ranks: Sequence[int], counts: Counts, *, replace_all: bool, round_no: int,
              fresh_rendezvous: bool) -> None:
        """Place and start ``ranks`` in ``round_no``; raises :class:`StartFailed`."""
        state = self.state
        # An elastic job's world size is the state's; the spec keeps the full size.
        spec = self.spec if state.nproc == self.spec.nproc else replace(self.spec, nproc=state.nproc)
        if not self._omp_checked:  # once, at the first start, so the warning is said once
            self._omp_checked = True
            self.base_env.update(omp_threads_default(self.spec, {**self.base_env, **self.spec.env}))
        starting = set(ranks)  # membership in a list would make this O(N^2)
        current = {rank: inst.node for rank, inst in state.instances.items()
                   if rank not in starting or not replace_all}
        moving = [r for r in ranks if replace_all or r not in current or current[r] in state.isolated]
        try:
            placement = self.adapter.place(moving, current, state.isolated)
        except AdapterError as exc:
            raise StartFailed("TG-NO-CAPACITY", f"cannot place the job: {exc}", exc) from None
        if fresh_rendezvous:
            state.master = self.adapter.rendezvous(placement)
        locals_ = local_ranks(placement)
        moved_ranks = set(moving)
        layout = Layout(placement)
        self.framework.begin(spec, placement, state.master, round_no)
        launches = []
        for rank in ranks:
            schedule, proc_start = counts.get(rank, (0, 0))
            moved = rank in moved_ranks
            instance = Instance(rank=rank, node=placement[rank], local_rank=locals_[rank],
                                schedule_count=schedule + 1 if moved else max(schedule, 1),
                                proc_start_count=1 if moved else proc_start + 1)
            if self.framework.launched(rank):  # an MPI launcher starts the other ranks itself
                env = rank_env(spec, instance, base=self.base_env,
                               plugin_env=self.host.instance_env(spec, instance, round_no),
                               placement=placement, master=state.master, round_no=round_no,
                               max_restarts=self.policy.max_num_of_job_restart, layout=layout)
                launches.append(Launch(instance, self.framework.command(rank), self.framework.env(instance, env),
                                       self.spec.cwd, round_no))
            state.succeeded.discard(rank)
            self.on_start(rank)
        try:
            started = self.adapter.start(launches)
        except AdapterError as exc:
            raise StartFailed("TG-START-FAILED", f"cannot start the job: {exc}", exc) from None
        state.instances.update(started)
        state.restart_round = round_no
        if self.on_started is not None:
            for rank, instance in started.items():
                self.on_started(rank, instance.log_path)

    def stop(self, ranks: Sequence[int]) -> list[Exit]:
        """Stop ``ranks`` with the policy's grace; returns the exits that were failures of their own."""
        exits = self.adapter.stop(list(ranks), self.policy.stop_grace_period)
        return [e for e in exits if e.exit_code not in (0, -signal.SIGTERM, -signal.SIGKILL)]


def replay_counters(rounds: Sequence[RoundRecord], nproc: int) -> dict[int, tuple[int, int]]:
    """Rebuild each rank's (schedule, process-start) counts from a resumed job's rounds.

    A resumed supervisor places every rank anew (its previous processes died with it), so the
    counts it returns make every rank's schedule count grow by one at the next start.
    """
    counts = {rank: (1, 1) for rank in range(nproc)}
    for record in rounds:
        if record.result in (RoundResult.REQUEUED, RoundResult.IN_PROGRESS, RoundResult.INTERRUPTED) \
                or record.action is Action.FAIL:
            continue  # it placed nothing itself: the resumed run that follows is the placement
        if record.action is Action.RESTART_IN_PROCESS:
            continue  # every rank went on in its own process: nothing started
        affected = range(nproc) if record.action.whole_job or not record.ranks else record.ranks
        for rank in affected:
            if rank not in counts:
                continue
            schedule, start = counts[rank]
            counts[rank] = (schedule + 1, 1) if record.action.replaces else (schedule, start + 1)
    return counts
