"""The built-in recovery ladder: AIMaster's policies with seed 002's degradation rules.

Registered ``trylast`` so any strategy plugin decides first. Every counter is derived from the
:class:`~trainguard.model.History` the engine rebuilds from the store, so a resumed supervisor
decides as its predecessor would have.

The ladder, checked top to bottom (the first rule that applies decides):

======================================  ===================================================
situation                               decision
======================================  ===================================================
``--fault-tolerant-policy=Never``       fail
same error on one instance > N times    fail (``--max-num-of-same-error``)
failed share > tolerated rate           fail (``--max-tolerated-failure-rate``)
hang / exit hang                        restart in place, free ("restart upon suspension");
                                        fail after ``max_consecutive_hang_restarts`` in a row
not retryable, ExitCodeAndErrorMsg      fail (no free retry for user errors)
not retryable (OnFailure), or unknown   unconditional restart: budgeted, never in place; after
                                        ``max_consecutive_unconditional_restarts`` in a row
                                        (of the job; Async: of the instance) with no node
                                        fault, fail (a user-code error; for unknown: no
                                        cause found)
Sync job, restarts disabled             fail (``--enable-job-restart=False``)
node fault, or the same fault code     isolate the node: Sync reschedules the job away
``isolate_after_same_fault`` times in   from it (or replaces only its ranks while
a row within the window on the same     ``max_num_of_pod_restart`` allows); Async replaces
node (Sync) or device (Async)           the failed instances; no spare capacity: an elastic
                                        job (``--min-nodes``) with enough nodes left scales
                                        in (budgeted; see trainguard/elastic.py), otherwise
                                        fail for a node fault, restart the job for a
                                        repeated fault
Async job                               restart the failed instances, free
first occurrence on this node           restart in place, free (in-place recovery)
again                                   restart the job (budgeted)
======================================  ===================================================

Budgeted decisions fail instead once ``--max-num-of-job-restart`` rounds have been used.
"""

from __future__ import annotations

from trainguard.hooks.markers import hookimpl
from trainguard.model import (
    Action,
    Capacity,
    Category,
    Decision,
    ErrorSource,
    ExecutionMode,
    FaultTolerantPolicy,
    History,
    Incident,
    RoundRecord,
    Verdict,
)
from trainguard.policy import Policy

NAME = "builtin-ladder"
HANG_SOURCES = (ErrorSource.HANG, ErrorSource.EXIT_HANG)


def _fail(reason: str, *, transient: bool = False) -> Decision:
    return Decision(Action.FAIL, reason, consumes_budget=False, strategy=NAME, transient=transient)


def _is_hang_round(record: RoundRecord) -> bool:
    return record.error_source in HANG_SOURCES


def _is_unconditional_round(record: RoundRecord) -> bool:
    return record.unconditional and not record.node_fault


def _unconditional_in_a_row(history: History, rank: int | None, per_instance: bool) -> int:
    """Unconditional restarts in a row: of the job (Sync: every rank restarts together), or of
    this instance (Async: seed 002 counts an instance's own failures; 64 ranks failing once each
    are not one rank failing 64 times)."""
    if not per_instance or rank is None:
        return history.trailing(_is_unconditional_round)
    count = 0
    for record in reversed(history.rounds):
        if rank not in record.ranks:
            continue
        if not _is_unconditional_round(record):
            break
        count += 1
    return count


@hookimpl(trylast=True)
def trainguard_decide_recovery(
    incident: Incident, verdict: Verdict, history: History, policy: Policy, capacity: Capacity
) -> Decision:
    root = incident.root
    node = verdict.node or root.node
    is_async = policy.job_execution_mode is ExecutionMode.ASYNC
    code = verdict.fault_code

    if policy.fault_tolerant_policy is FaultTolerantPolicy.NEVER:
        return _fail(f"{code}: --fault-tolerant-policy=Never tolerates no fault")

    if root.rank is not None:
        seen = history.same_error_counts.get((root.rank, code), 0) + 1
        if seen > policy.max_num_of_same_error:
            return _fail(f"{code} occurred {seen} times on rank-{root.rank} "
                         f"(--max-num-of-same-error={policy.max_num_of_same_error})")

    if policy.max_tolerated_failure_rate > 0 and capacity.world_size:
        # Sync peers die of the root's failure within milliseconds; only Async failures are
        # independent, so only they count towards the share.
        failed = len(incident.failed_ranks) if is_async else 1
        share = failed / capacity.world_size
        if share > policy.max_tolerated_failure_rate:
            return _fail(f"{failed} of {capacity.world_size} instances failed ({share:.0%} > "
                         f"--max-tolerated-failure-rate={policy.max_tolerated_failure_rate})")

    if root.source in HANG_SOURCES:
        if not policy.enable_job_restart:
            return _fail(f"{code}: job hung and --enable-job-restart=False", transient=True)
        in_a_row = history.trailing(_is_hang_round)
        if in_a_row >= policy.max_consecutive_hang_restarts:
            return _fail(f"{code}: job hung again after {in_a_row} restarts upon suspension in a row")
        return Decision(Action.RESTART_IN_PLACE, "restart upon suspension", consumes_budget=False,
                        strategy=NAME)

    # A fault nothing explains (unknown) is retried as OnFailure retries what is not retryable:
    # never in place for free (Sync: a budgeted job restart), and given up after
    # max_consecutive_unconditional_restarts in a row, so a bug that leaves no trace in the log
    # cannot loop through the budget.
    unexplained = verdict.category is Category.UNKNOWN
    unconditional = False
    if not verdict.retryable or unexplained:
        if not verdict.retryable and policy.fault_tolerant_policy is FaultTolerantPolicy.EXIT_CODE_AND_ERROR_MSG:
            kind = "user error" if verdict.user_error else verdict.category.value
            return _fail(f"{code} is not retryable ({kind}) under --fault-tolerant-policy=ExitCodeAndErrorMsg")
        in_a_row = _unconditional_in_a_row(history, root.rank, is_async)
        if in_a_row >= policy.max_consecutive_unconditional_restarts and not verdict.node_fault:
            whose = f" of {root.instance}" if is_async and root.instance else ""
            why = "no cause found in the log" if unexplained else "no node fault: a user-code error"
            return _fail(f"{code}: failed again after {in_a_row} unconditional restarts{whose} with {why} "
                         f"(--max-consecutive-unconditional-restarts={policy.max_consecutive_unconditional_restarts})")
        unconditional = True

    if not is_async and not policy.enable_job_restart:
        # Restarts are left to whoever runs the job again (Airflow's retries, a resubmission).
        return _fail(f"{code}: job restart is disabled (--enable-job-restart=False)",
                     transient=verdict.retryable)

    def budgeted(action: Action, reason: str, isolate: tuple[str, ...] = ()) -> Decision:
        used = history.budget_used
        if used >= policy.max_num_of_job_restart:
            return _fail(f"{code}: restart budget exhausted ({used} of "
                         f"--max-num-of-job-restart={policy.max_num_of_job_restart} used)")
        return Decision(action, reason, isolate=isolate, unconditional=unconditional,
                        ranks=incident.failed_ranks, strategy=NAME)

    repeats = 1
    if node is not None:
        since = root.detected_at - policy.isolate_window
        # Seed 002 counts repeats on the same chip. Async instances are independent, so count
        # per device; in a Sync job the rank that fails first varies for one underlying fault,
        # so the node is the unit.
        device = (verdict.gpu or root.instance) if is_async else None
        repeats = history.same_fault_on_node(node, code, since, device) + 1
    isolate_node = node is not None and not verdict.user_error and (
        verdict.node_fault or repeats >= policy.isolate_after_same_fault)

    if isolate_node:
        assert node is not None
        why = (f"node fault on {node}" if verdict.node_fault
               else f"{code} {repeats} times in a row on {node}")
        if capacity.healthy_slots(excluding=(node,)) < capacity.world_size:
            left = capacity.healthy_slots(excluding=(node,)) // max(1, capacity.slots_per_node)
            if policy.min_nodes and verdict.node_fault and left >= policy.min_nodes:
                return budgeted(Action.SCALE_IN, f"{why}: no healthy spare left, going on smaller on {left} "
                                f"node(s) (--min-nodes={policy.min_nodes})", (node,))
            if capacity.can_requeue and verdict.node_fault:
                return budgeted(Action.RESCHEDULE_ISOLATED,
                                f"{why}: no healthy spare left here, requeueing the job without it", (node,))
            if verdict.node_fault:
                return _fail(f"{code}: {why} and no healthy spare capacity to move to", transient=True)
            return budgeted(Action.RESTART_JOB, f"{why}; no spare node to isolate it, restarting the job")
        # Seed 002: pod-level rescheduling isolates the node first; where replacements cannot be
        # kept off it (it is still schedulable and the pods come from the job's template), it
        # degrades to isolated job-level rescheduling.
        steered = capacity.keeps_off(node)
        if is_async and steered:
            return Decision(Action.REPLACE_INSTANCES, f"{why}: replacing the failed instances elsewhere",
                            consumes_budget=False, isolate=(node,), ranks=incident.failed_ranks,
                            unconditional=unconditional, strategy=NAME)
        pod_rounds = sum(1 for r in history.rounds if r.action is Action.REPLACE_INSTANCES)
        if pod_rounds < policy.max_num_of_pod_restart and steered:
            return Decision(Action.REPLACE_INSTANCES, f"{why}: pod-level rescheduling of its ranks",
                            consumes_budget=False, isolate=(node,), ranks=incident.failed_ranks,
                            unconditional=unconditional, strategy=NAME)
        unsteered = "" if steered else (f" (a replaced instance could be placed on {node} again: it is still "
                                        "schedulable)")
        return budgeted(Action.RESCHEDULE_ISOLATED, f"{why}: isolating it and rescheduling the job{unsteered}",
                        (node,))

    if is_async:
        return Decision(Action.RESTART_INSTANCES, f"{code}: restarting the failed instances",
                        consumes_budget=False, ranks=incident.failed_ranks,
                        unconditional=unconditional, strategy=NAME)
    if repeats == 1 and policy.enable_in_place_restart and not unconditional:
        return Decision(Action.RESTART_IN_PLACE, f"{code}: in-place recovery", consumes_budget=False,
                        strategy=NAME)
    why = "unconditional restart" if unconditional else f"{code} again: restarting the job"
    return budgeted(Action.RESTART_JOB, why)
