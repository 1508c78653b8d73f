"""TensorFlow jobs: ``TF_CONFIG`` for every task, and what losing a task of each role does.

``--roles chief=1,worker=4,ps=2,evaluator=1`` gives the job's tasks in rank order. Every task
gets ``TF_CONFIG`` = ``{"cluster": {role: ["host:port", ...]}, "task": {"type": role, "index": i}}``,
built from the placement at every start, so a task that moves is found at its new address by
the tasks started with it. The evaluator is left out of ``cluster``, as TensorFlow wants it.
Ports are ``MASTER_PORT + rank``: a block taken afresh at every whole-job start, unchanged when
only some tasks restart. ``ROLE_NAME``, ``ROLE_RANK`` and ``ROLE_WORLD_SIZE`` say the same.

What losing a task does (``--role-policy ROLE=job|instance|ignore,...`` overrides a role):

=============  ========  =========================================================
role           default   why
=============  ========  =========================================================
``chief``      job       it owns the checkpoints and the training loop
``ps``         job       ParameterServerStrategy cannot go on without a shard
``worker``     instance  ParameterServerStrategy reschedules work from a lost worker
``evaluator``  ignore    the job goes on without it; it is not part of the cluster
other          job
=============  ========  =========================================================

``instance`` is the ladder's own decision, which restarts only the lost task in an
``--job-execution-mode=Async`` job (AIMaster's advice for TensorFlow); a Sync job restarts every
task whichever was lost. The ladder still decides whether to recover at all (retryable? budget
left?); ``job`` widens its instance-level decision to the whole job (budgeted). A task that
must move off an isolated node takes the whole job with it (``reschedule_isolated``): its new
address reaches only the tasks started with it.
"""

from __future__ import annotations

import json
from typing import Mapping

from trainguard.frameworks import Framework, is_local, role_of, role_ranks
from trainguard.hooks import hookimpl
from trainguard.model import Action, Capacity, Decision, History, Incident, Instance, JobSpec, Verdict
from trainguard.plugins import strategy
from trainguard.policy import Policy

NAME = "tensorflow-roles"
DEFAULT_BEHAVIOUR = {"chief": "job", "master": "job", "ps": "job", "worker": "instance", "evaluator": "ignore"}
# Left out of the cluster spec: TensorFlow runs the evaluator beside the cluster.
OUTSIDE_CLUSTER = ("evaluator",)


def behaviours(policy: Policy) -> dict[str, str]:
    """Each role's behaviour: the defaults, then ``--role-policy``."""
    out = dict(DEFAULT_BEHAVIOUR)
    for item in filter(None, policy.role_policy.split(",")):
        role, _, behaviour = item.partition("=")
        out[role] = behaviour
    return out


def cluster_spec(spec: JobSpec, placement: Mapping[int, str], master: tuple[str, int]) -> dict[str, list[str]]:
    """``{role: ["host:port", ...]}`` for every role in the cluster."""
    local = is_local(master)
    cluster: dict[str, list[str]] = {}
    for rank in sorted(placement):
        role, _ = role_of(spec, rank)
        if role in OUTSIDE_CLUSTER:
            continue
        host = "localhost" if local else placement[rank]
        cluster.setdefault(role, []).append(f"{host}:{master[1] + rank}")
    return cluster


def tf_config(spec: JobSpec, rank: int, cluster: Mapping[str, list[str]]) -> str:
    role, index = role_of(spec, rank)
    return json.dumps({"cluster": dict(cluster), "task": {"type": role, "index": index}})


class TensorFlow(Framework):
    name = "tensorflow"

    def required(self) -> frozenset[int] | None:
        chief = role_ranks(self.spec, "chief") or role_ranks(self.spec, "master")
        return chief or role_ranks(self.spec, "worker") or None

    def plugins(self) -> Mapping[str, object]:
        return {f"{NAME}:{self.spec.job_id}": RolePolicy(self.spec)}

    def begin(self, spec: JobSpec, placement: Mapping[int, str], master: tuple[str, int], round_no: int) -> None:
        super().begin(spec, placement, master, round_no)
        self._cluster = cluster_spec(self.spec, placement, master)
        self._counts = dict(self.spec.roles)

    def env(self, instance: Instance, env: dict[str, str]) -> dict[str, str]:
        role, index = role_of(self.spec, instance.rank)
        env.update({"TF_CONFIG": tf_config(self.spec, instance.rank, self._cluster), "ROLE_NAME": role,
                    "ROLE_RANK": str(index), "ROLE_WORLD_SIZE": str(self._counts.get(role, 1))})
        return env


class RolePolicy:
    """Adapts the ladder's decision to the role of the task that was lost (module docstring)."""

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec

    @hookimpl
    def trainguard_decide_recovery(self, incident: Incident, verdict: Verdict, history: History, policy: Policy,
                                   capacity: Capacity) -> Decision | None:
        root = incident.root
        if root.rank is None:
            return None
        role, index = role_of(self.spec, root.rank)
        behaviour = behaviours(policy).get(role, "job")
        who = f"{role} {index} (rank {root.rank})"
        if behaviour == "ignore":
            return Decision(Action.NOTIFY, f"{verdict.fault_code}: {who} lost; the job goes on without it "
                            f"(--role-policy {role}=ignore)", consumes_budget=False, strategy=NAME)
        base = strategy.trainguard_decide_recovery(incident, verdict, history, policy, capacity)
        if base.action in (Action.FAIL, Action.NOTIFY):
            return base
        if behaviour == "job" and not base.action.whole_job:
            action = Action.RESCHEDULE_ISOLATED if base.isolate else Action.RESTART_JOB
            return self._budgeted(action, f"{verdict.fault_code}: {who} lost: restarting the job ({role}=job)", base,
                                  history, policy)
        if base.action is Action.REPLACE_INSTANCES:
            # A task that moves has a new address that only tasks started with it would learn.
            return self._budgeted(Action.RESCHEDULE_ISOLATED, f"{verdict.fault_code}: {who} lost with its node: "
                                  "rescheduling the job so every task gets the new TF_CONFIG", base, history, policy)
        # ``instance``: the ladder restarts only the lost task in an Async job already.
        return base

    def _budgeted(self, action: Action, reason: str, base: Decision, history: History, policy: Policy) -> Decision:
        used = history.budget_used
        if used >= policy.max_num_of_job_restart:
            return Decision(Action.FAIL, f"{reason}; but the restart budget is exhausted ({used} of "
                            f"--max-num-of-job-restart={policy.max_num_of_job_restart} used)",
                            consumes_budget=False, strategy=NAME)
        return Decision(action, reason, isolate=base.isolate, unconditional=base.unconditional, strategy=NAME)
