"""Replay: re-decide a recorded job's faults under another policy (``trainguard replay``).

The faults a job met are in its history with the verdict the classifiers gave each root fault.
:func:`replay` hands them, in order, to the real strategies (the plugin host's
``trainguard_decide_recovery``, built-in ladder included) under a new policy, with a history
and a bad-node ledger rebuilt from the *replayed* decisions, so budgets, ladders and isolation
counters evolve as they would have. Where the new policy gives up, the later faults did not
happen to that job and are shown as such.

It re-decides; it does not re-run the job. What each decision would have cost is simulated
over the recorded timeline: the run time between faults and the work lost to each fault (since
the last checkpoint) are the recorded ones, the recovery time is the cost of the action decided:
what that action cost this job when it took it (its recorded stages, averaged), else the
simulator's recovery costs (:class:`trainguard.adapters.sim.Costs`). Both
the recorded and the replayed decisions are costed the same way, so their simulated ETTRs
compare like with like; ``measured_ettr`` is the job's own (:mod:`trainguard.goodput`).

Not replayed: the engine's no-progress guard (it needs the ranks' live progress), plugins'
side effects, and instances the scheduler could not place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from trainguard.adapters.sim import Costs
from trainguard.goodput import epoch_seconds, goodput
from trainguard.hooks import PluginHost
from trainguard.model import (
    Action,
    Capacity,
    Category,
    ErrorSource,
    Fault,
    History,
    Incident,
    NodeFaultEntry,
    RoundRecord,
    RoundResult,
    Verdict,
)
from trainguard.policy import PARSERS, Policy, build_policy
from trainguard.store import RunStore

__all__ = ["ReplayedRound", "Replay", "replay", "recorded_policy"]

_HANGS = (ErrorSource.HANG, ErrorSource.EXIT_HANG)


@dataclass(frozen=True)
class ReplayedRound:
    """One recorded incident: what was decided then and what the new policy decides."""

    index: int
    at: float
    error_code: str
    source: str
    node: str | None
    recorded: str
    recorded_reason: str
    replayed: str | None
    replayed_reason: str
    replayed_budgeted: bool = False
    lost_work: float = 0.0

    @property
    def changed(self) -> bool:
        return self.replayed != self.recorded

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "at": self.at, "error_code": self.error_code, "source": self.source,
                "node": self.node, "recorded": self.recorded, "recorded_reason": self.recorded_reason,
                "replayed": self.replayed, "replayed_reason": self.replayed_reason,
                "replayed_budgeted": self.replayed_budgeted, "changed": self.changed,
                "lost_work_seconds": round(self.lost_work, 3)}


@dataclass
class Replay:
    """The outcome of a replay: the rounds, and the simulated ETTR of each decision sequence."""

    job_id: str
    rounds: list[ReplayedRound] = field(default_factory=list)
    recorded: dict[str, Any] = field(default_factory=dict)
    replayed: dict[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> int:
        return sum(1 for r in self.rounds if r.changed)

    def to_json(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "changed": self.changed, "rounds": [r.to_json() for r in self.rounds],
                "recorded": self.recorded, "replayed": self.replayed}


def recorded_policy(job: Mapping[str, Any]) -> Policy:
    """The policy a job ran under, as stored (parameters this version no longer knows are dropped)."""
    return build_policy({k: v for k, v in (job.get("policy") or {}).items() if k in PARSERS})


def replay(store: RunStore, job_id: str, policy: Policy, *, host: PluginHost | None = None,
           costs: Costs | None = None, spare_nodes: int | None = None) -> Replay:
    """Re-decide ``job_id``'s recorded faults under ``policy``; see the module docstring.

    :param spare_nodes: nodes beyond the job's own (default: as many as the recording isolated,
        so a reschedule that worked then has room now).
    """
    job = store.job(job_id)
    report = store.report(job_id)
    host = host or PluginHost(load_entry_points=False)
    costs = costs or Costs()
    spec = job["spec"] if job else {}
    measured = goodput(report, store.events(job_id))
    incidents = _incidents(store.faults(job_id), policy.failure_window)
    recorded_rounds = {(r["round"], r["started_at"]): r for r in report["rounds"]}
    failure = report.get("failure")
    lost_by_round = {r["round"]: r.get("lost_work_seconds") or 0.0 for r in measured["rounds"]}
    isolated_then = {n for r in report["rounds"] for n in r.get("isolated_nodes") or ()}
    capacity = _capacity(spec, store.faults(job_id), len(isolated_then) if spare_nodes is None else spare_nodes)

    out = Replay(job_id)
    replayed: list[RoundRecord] = []
    ledger: list[NodeFaultEntry] = []
    counts: dict[tuple[int, str], int] = {}
    isolated: frozenset[str] = frozenset()
    ended = False
    for index, (root_row, rows) in enumerate(incidents, start=1):
        verdict = _verdict(root_row["verdict"])
        faults = tuple(_fault(r) for r in rows)
        root = faults[0]
        incident = Incident(faults)
        iso = _iso(root.detected_at)
        recorded = recorded_rounds.get((root_row["round"], iso))
        if recorded is not None:
            action, reason, lost = recorded["action"], recorded["reason"], lost_by_round.get(recorded["round"], 0.0)
        elif failure and failure.get("started_at") == iso:
            action, reason, lost = "fail", failure["reason"], 0.0
        else:
            action, reason, lost = "notify", "no round was started (a strategy only notified)", 0.0
        if ended:
            out.rounds.append(ReplayedRound(index, root.detected_at, verdict.fault_code, root.source.value,
                                            verdict.node or root.node, action, reason, None,
                                            "the job had already ended under this policy", lost_work=lost))
            continue
        history = History(rounds=tuple(replayed), ledger=tuple(ledger), same_error_counts=dict(counts),
                          isolated=isolated)
        decision = host.decide(incident, verdict, history, policy, Capacity(
            capacity.nodes, capacity.slots_per_node, capacity.world_size, isolated))
        node = verdict.node or root.node
        if node is not None and root.source not in _HANGS:
            ledger.append(NodeFaultEntry(node, verdict.fault_code, root.detected_at, verdict.user_error,
                                         verdict.gpu or root.instance))
        counted = faults if policy.job_execution_mode.value == "Async" else (root,)
        for fault in counted:
            if fault.rank is not None:
                counts[(fault.rank, verdict.fault_code)] = counts.get((fault.rank, verdict.fault_code), 0) + 1
        out.rounds.append(ReplayedRound(index, root.detected_at, verdict.fault_code, root.source.value, node, action,
                                        reason, decision.action.value, decision.reason,
                                        decision.consumes_budget and decision.action is not Action.FAIL,
                                        lost_work=lost))
        if decision.action is Action.FAIL:
            ended = True
        elif decision.action is not Action.NOTIFY:
            isolated = isolated | frozenset(decision.isolate)
            replayed.append(RoundRecord(
                job_id=job_id, round=len(replayed) + 1, reason=decision.reason, error_code=verdict.fault_code,
                error_message=root.message, error_source=root.source, action=decision.action,
                started_at=root.detected_at, result=RoundResult.RECOVERED, node=node, instance=root.instance,
                ranks=incident.failed_ranks, consumes_budget=decision.consumes_budget,
                unconditional=decision.unconditional, user_error=verdict.user_error, node_fault=verdict.node_fault,
                isolated=decision.isolate))
    timeline = _timeline(report, measured)
    # An action the job took costs what it cost then (its recorded stages); others the model's.
    seen: dict[str, list[float]] = {}
    for r in measured["rounds"]:
        seen.setdefault(r["action"], []).append(r["recovery_seconds"])
    if failure:
        seen.setdefault("fail", []).append(sum((failure.get("stages") or {}).values()))
    observed = {action: sum(times) / len(times) for action, times in seen.items()}
    out.recorded = {**_simulate(out.rounds, "recorded", timeline, costs, observed, policy_warm=_warm(job)),
                    "measured_ettr": measured["ettr"], "status": report["status"]}
    out.replayed = _simulate(out.rounds, "replayed", timeline, costs, observed,
                             policy_warm=policy.warm_standby == "true")
    return out


def _incidents(rows: Sequence[Mapping[str, Any]], window: float) -> list[tuple[Mapping[str, Any], list]]:
    """Group recorded faults: each root (a row with a verdict) with the faults of its round that
    arrived within the failure window (the ranks that failed with it)."""
    out = []
    for i, row in enumerate(rows):
        if row["verdict"] is None:
            continue
        peers = [r for r in rows[i + 1:] if r["verdict"] is None and r["round"] == row["round"] and r["counted"]
                 and abs(r["detected_at"] - row["detected_at"]) <= window]
        out.append((row, [row, *peers]))
    return out


def _verdict(data: Mapping[str, Any]) -> Verdict:
    return Verdict(Category.parse(data.get("category", "unknown")), data.get("fault_code", "TG-UNKNOWN"),
                   bool(data.get("retryable")), node_fault=bool(data.get("node_fault")),
                   user_error=bool(data.get("user_error")), evidence=data.get("evidence") or "",
                   confidence=float(data.get("confidence") or 0.5), node=data.get("node"), gpu=data.get("gpu"),
                   classifier=data.get("classifier") or "")


def _fault(row: Mapping[str, Any]) -> Fault:
    return Fault(ErrorSource.parse(row["source"]), row["detected_at"], rank=row["rank"], node=row["node"],
                 message=row["message"] or "")


def _capacity(spec: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], spare: int) -> Capacity:
    nproc = int(spec.get("nproc") or 1)
    count = int(spec.get("nodes") or 1)
    slots = int(spec.get("slots_per_node") or 0) or -(-nproc // count)
    known = list(dict.fromkeys(r["node"] for r in rows if r["node"]))
    names = known + [f"(node {i})" for i in range(max(0, count + spare - len(known)))]
    return Capacity(tuple(names), slots, nproc)


def _iso(epoch: float) -> str:
    from trainguard.timefmt import iso_ms

    return iso_ms(epoch)


def _warm(job: Mapping[str, Any] | None) -> bool:
    return str(((job or {}).get("policy") or {}).get("warm_standby", "")).lower() == "true"


def _timeline(report: Mapping[str, Any], measured: Mapping[str, Any]) -> dict[str, float]:
    """Run time (wall minus recorded recovery) and the work kept, from the recorded history."""
    run = max(0.0, measured["wall_seconds"] - measured["recovery_seconds"])
    return {"run": run, "productive": measured["productive_seconds"], "wall": measured["wall_seconds"],
            "start": epoch_seconds(measured["started_at"])}


def _cost(action: str | None, costs: Costs, warm: bool) -> float:
    if action in (Action.RESTART_IN_PLACE.value, Action.RESTART_INSTANCES.value):
        return costs.stop + costs.init
    if action in (Action.RESTART_JOB.value, Action.RESCHEDULE_ISOLATED.value):
        return costs.stop + costs.schedule + costs.init
    if action == Action.REPLACE_INSTANCES.value:
        return costs.stop + (costs.spare_schedule if warm else costs.pod_schedule) + costs.init
    if action == Action.FAIL.value:
        return costs.stop
    return 0.0


def _simulate(rounds: Sequence[ReplayedRound], which: str, timeline: Mapping[str, float], costs: Costs,
              observed: Mapping[str, float], *, policy_warm: bool) -> dict[str, Any]:
    """The simulated ETTR of one decision sequence over the recorded timeline."""
    run, productive = timeline["run"], timeline["productive"]
    recovery = 0.0
    for r in rounds:
        action = r.recorded if which == "recorded" else r.replayed
        if action is None:
            break
        recovery += observed[action] if action in observed else _cost(action, costs, policy_warm)
        if action == Action.FAIL.value:
            # The job ends here: the run after this fault and the work since the checkpoint are gone.
            share = _run_share(timeline, r)
            kept = max(0.0, productive * share - r.lost_work)
            wall = run * share + recovery
            return {"ettr_simulated": round(kept / wall, 4) if wall > 0 else None, "finished": False,
                    "failed_at": r.index, "recovery_seconds": round(recovery, 1)}
    wall = run + recovery
    return {"ettr_simulated": round(productive / wall, 4) if wall > 0 else None, "finished": True,
            "failed_at": None, "recovery_seconds": round(recovery, 1)}


def _run_share(timeline: Mapping[str, float], at: ReplayedRound) -> float:
    """Share of the recorded run time that had passed by the fault ``at``."""
    wall = timeline["wall"]
    return 1.0 if wall <= 0 else max(0.0, min(1.0, (at.at - timeline["start"]) / wall))
