"""The built-in ladder as a pure decision: policy x verdict x history -> decision."""

from __future__ import annotations

import pytest

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
    Verdict,
)
from trainguard.plugins.strategy import trainguard_decide_recovery as decide
from trainguard.policy import build_policy

NOW = 1_700_000_000.0
RETRYABLE = Verdict(Category.NCCL_ERROR, "TG-NCCL-ERROR", retryable=True)
USER = Verdict(Category.USER_CODE, "TG-USER-EXCEPTION", retryable=False, user_error=True)
NOT_RETRYABLE = Verdict(Category.USER_CODE, "TG-NOT-RETRYABLE", retryable=False)
UNEXPLAINED = Verdict(Category.UNKNOWN, "TG-UNKNOWN", retryable=True)
NODE = Verdict(Category.GPU_HARDWARE, "TG-GPU-ECC", retryable=True, node_fault=True)
SPARE = Capacity(("node-0", "node-1", "node-2"), 2, 4)
TIGHT = Capacity(("node-0", "node-1"), 2, 4)


def exit_fault(rank=1, node="node-0", at=NOW):
    return Fault(ErrorSource.EXIT_CODE, at, rank=rank, node=node, exit_code=1)


def record(n, action=Action.RESTART_JOB, source=ErrorSource.EXIT_CODE, budget=True, unconditional=False,
           node_fault=False):
    return RoundRecord("j", n, "r", "TG-X", "m", source, action, NOW - 100 + n, consumes_budget=budget,
                       unconditional=unconditional, node_fault=node_fault)


def run(verdict=RETRYABLE, history=History(), capacity=SPARE, faults=None, **policy):
    settings = {"enable_job_restart": True, **policy}
    incident = Incident(tuple(faults or [exit_fault()]))
    return decide(incident, verdict, history, build_policy(settings), capacity)


@pytest.mark.parametrize("mode,ftp,verdict,action", [
    ("Sync", "ExitCodeAndErrorMsg", RETRYABLE, Action.RESTART_IN_PLACE),
    ("Sync", "ExitCodeAndErrorMsg", USER, Action.FAIL),
    ("Sync", "ExitCodeAndErrorMsg", NOT_RETRYABLE, Action.FAIL),
    ("Sync", "OnFailure", RETRYABLE, Action.RESTART_IN_PLACE),
    ("Sync", "OnFailure", USER, Action.RESTART_JOB),
    ("Sync", "OnFailure", NOT_RETRYABLE, Action.RESTART_JOB),
    ("Sync", "Never", RETRYABLE, Action.FAIL),
    ("Sync", "ExitCodeAndErrorMsg", UNEXPLAINED, Action.RESTART_JOB),
    ("Sync", "OnFailure", UNEXPLAINED, Action.RESTART_JOB),
    ("Sync", "Never", UNEXPLAINED, Action.FAIL),
    ("Async", "ExitCodeAndErrorMsg", UNEXPLAINED, Action.RESTART_INSTANCES),
    ("Async", "ExitCodeAndErrorMsg", RETRYABLE, Action.RESTART_INSTANCES),
    ("Async", "ExitCodeAndErrorMsg", USER, Action.FAIL),
    ("Async", "OnFailure", USER, Action.RESTART_INSTANCES),
    ("Async", "Never", RETRYABLE, Action.FAIL),
    ("Sync", "ExitCodeAndErrorMsg", NODE, Action.RESCHEDULE_ISOLATED),
    ("Async", "ExitCodeAndErrorMsg", NODE, Action.REPLACE_INSTANCES),
])
def test_policy_combinations(mode, ftp, verdict, action):
    decision = run(verdict, job_execution_mode=mode, fault_tolerant_policy=ftp)
    assert decision.action is action
    if action is Action.RESTART_JOB:
        assert decision.unconditional and decision.consumes_budget
    if action in (Action.RESTART_IN_PLACE, Action.RESTART_INSTANCES):
        assert not decision.consumes_budget


def test_async_instances_restart_even_with_job_restart_disabled():
    assert run(job_execution_mode="Async", enable_job_restart=False).action is Action.RESTART_INSTANCES
    assert run(enable_job_restart=False).action is Action.FAIL


def test_in_place_then_job_restart_then_isolation_for_a_repeated_fault():
    ledger = (NodeFaultEntry("node-0", "TG-NCCL-ERROR", NOW - 60),)
    assert run(history=History(ledger=ledger)).action is Action.RESTART_JOB
    ledger += (NodeFaultEntry("node-0", "TG-NCCL-ERROR", NOW - 30),)
    decision = run(history=History(ledger=ledger))
    assert decision.action is Action.RESCHEDULE_ISOLATED and decision.isolate == ("node-0",)
    # A different fault in between breaks the streak; entries older than the window do not count.
    broken = ledger[:1] + (NodeFaultEntry("node-0", "TG-OTHER", NOW - 45),) + ledger[1:]
    assert run(history=History(ledger=broken)).action is Action.RESTART_JOB
    old = tuple(NodeFaultEntry("node-0", "TG-NCCL-ERROR", NOW - 90_000) for _ in range(2))
    assert run(history=History(ledger=old)).action is Action.RESTART_IN_PLACE


def test_repeated_fault_without_spare_restarts_the_job_instead():
    ledger = tuple(NodeFaultEntry("node-0", "TG-NCCL-ERROR", NOW - i) for i in (20, 10))
    decision = run(history=History(ledger=ledger), capacity=TIGHT)
    assert decision.action is Action.RESTART_JOB and "no spare node" in decision.reason


def test_user_errors_never_isolate_a_node():
    ledger = tuple(NodeFaultEntry("node-0", "TG-USER-EXCEPTION", NOW - i, True) for i in (20, 10))
    decision = run(USER, history=History(ledger=ledger), fault_tolerant_policy="OnFailure")
    assert decision.action is Action.RESTART_JOB and not decision.isolate


def test_node_fault_without_capacity_fails():
    decision = run(NODE, capacity=TIGHT)
    assert decision.action is Action.FAIL and "no healthy spare capacity" in decision.reason


def test_node_named_by_the_log_wins_over_the_instance_node():
    named = Verdict(Category.NCCL_ERROR, "TG-NCCL-IB-LINK", retryable=True, node_fault=True, node="node-2")
    assert run(named).isolate == ("node-2",)


def test_pod_level_rescheduling_within_its_budget():
    assert run(NODE, max_num_of_pod_restart=1).action is Action.REPLACE_INSTANCES
    used = History(rounds=(record(1, Action.REPLACE_INSTANCES, budget=False),))
    assert run(NODE, history=used, max_num_of_pod_restart=1).action is Action.RESCHEDULE_ISOLATED


@pytest.mark.parametrize("mode", ["Sync", "Async"])
def test_pod_level_rescheduling_degrades_where_a_replacement_could_land_on_the_node_again(mode):
    # A controller's pods are recreated from the job's template: while node-0 is schedulable a
    # replaced pod may go back to it, so isolating it takes rescheduling the job (seed 002).
    template = Capacity(("node-0", "node-1", "node-2"), 2, 4, steers_replacements=False)
    decision = run(NODE, capacity=template, max_num_of_pod_restart=1, job_execution_mode=mode)
    assert (decision.action, decision.isolate, decision.consumes_budget) == (Action.RESCHEDULE_ISOLATED,
                                                                             ("node-0",), True)
    assert "could be placed on node-0 again" in decision.reason
    # Once node-0 is cordoned or NotReady (not among the schedulable nodes), the scheduler keeps
    # replacements off it: one pod is enough.
    gone = Capacity(("node-1", "node-2"), 2, 4, steers_replacements=False)
    assert run(NODE, capacity=gone, max_num_of_pod_restart=1, job_execution_mode=mode).action is \
        Action.REPLACE_INSTANCES

def test_budget():
    spent = History(rounds=(record(1), record(2), record(3, Action.RESTART_IN_PLACE, budget=False)))
    ledger = (NodeFaultEntry("node-0", "TG-NCCL-ERROR", NOW - 1),)
    decision = run(history=History(rounds=spent.rounds, ledger=ledger), max_num_of_job_restart=2)
    assert decision.action is Action.FAIL and "2 of --max-num-of-job-restart=2" in decision.reason
    # Free recoveries stay possible with the budget spent.
    assert run(history=spent, max_num_of_job_restart=2).action is Action.RESTART_IN_PLACE


def test_user_code_ladder_after_three_unconditional_restarts():
    rounds = tuple(record(i, unconditional=True) for i in (1, 2, 3))
    decision = run(NOT_RETRYABLE, history=History(rounds=rounds), fault_tolerant_policy="OnFailure",
                   max_num_of_job_restart=10)
    assert decision.action is Action.FAIL and "user-code error" in decision.reason
    # A node fault this time is not the user's code: go on.
    assert run(Verdict(Category.GPU_HARDWARE, "X", retryable=False, node_fault=True), history=History(rounds=rounds),
               fault_tolerant_policy="OnFailure", max_num_of_job_restart=10).action is Action.RESCHEDULE_ISOLATED
    # An interrupted streak starts again.
    mixed = rounds[:2] + (record(3),)
    assert run(NOT_RETRYABLE, history=History(rounds=mixed), fault_tolerant_policy="OnFailure",
               max_num_of_job_restart=10).action is Action.RESTART_JOB


def test_an_unexplained_fault_is_retried_budgeted_and_given_up_when_it_comes_back():
    """unknown: nothing shows the job's code caused it, nothing explains it either."""
    first = run(UNEXPLAINED)
    assert first.action is Action.RESTART_JOB and first.unconditional and first.consumes_budget
    assert run(UNEXPLAINED, max_num_of_job_restart=0).action is Action.FAIL, "never free"
    rounds = tuple(record(i, unconditional=True) for i in (1, 2, 3))
    decision = run(UNEXPLAINED, history=History(rounds=rounds), max_num_of_job_restart=10)
    assert decision.action is Action.FAIL and "no cause found" in decision.reason
    assert run(UNEXPLAINED, history=History(rounds=rounds[:2]), max_num_of_job_restart=10).action is Action.RESTART_JOB
    assert run(UNEXPLAINED, max_consecutive_unconditional_restarts=0).action is Action.FAIL
    # A retryable fault in between ends the streak.
    mixed = rounds[:2] + (record(3),)
    assert run(UNEXPLAINED, history=History(rounds=mixed), max_num_of_job_restart=10).action is Action.RESTART_JOB


def test_async_counts_unconditional_restarts_per_instance():
    """64 ranks failing once each over a second are not one rank failing 64 times (seed 002)."""
    from dataclasses import replace

    others = tuple(replace(record(i, action=Action.RESTART_INSTANCES, unconditional=True, budget=False), ranks=(i,))
                   for i in range(2, 40))
    decision = run(NOT_RETRYABLE, history=History(rounds=others), fault_tolerant_policy="OnFailure",
                   job_execution_mode="Async", max_num_of_job_restart=10)
    assert decision.action is Action.RESTART_INSTANCES
    # The same instance three times in a row (others' rounds in between do not break its streak).
    mine = tuple(replace(r, ranks=(1,)) for r in others[:3])
    interleaved = (mine[0], others[5], mine[1], others[6], mine[2])
    decision = run(NOT_RETRYABLE, history=History(rounds=interleaved), fault_tolerant_policy="OnFailure",
                   job_execution_mode="Async", max_num_of_job_restart=10)
    assert decision.action is Action.FAIL and "restarts of rank-1" in decision.reason


def test_hang_ladder():
    hang = Fault(ErrorSource.HANG, NOW)
    verdict = Verdict(Category.HANG_OR_STUCK, "TG-HANG", retryable=True)
    first = run(verdict, faults=[hang], max_num_of_job_restart=0)
    assert first.action is Action.RESTART_IN_PLACE and not first.consumes_budget
    hangs = tuple(record(i, Action.RESTART_IN_PLACE, ErrorSource.HANG, budget=False) for i in (1, 2, 3))
    assert run(verdict, faults=[hang], history=History(rounds=hangs)).action is Action.FAIL
    assert run(verdict, faults=[hang], enable_job_restart=False).action is Action.FAIL


def test_same_error_and_failure_rate_limits():
    counts = {(1, "TG-NCCL-ERROR"): 2}
    assert run(history=History(same_error_counts=counts), max_num_of_same_error=2).action is Action.FAIL
    assert run(history=History(same_error_counts=counts), max_num_of_same_error=3).action is Action.RESTART_IN_PLACE
    two = [exit_fault(1), exit_fault(2, at=NOW + 0.1)]
    assert run(faults=two, job_execution_mode="Async", max_tolerated_failure_rate=0.3).action is Action.FAIL
    assert run(faults=two, job_execution_mode="Async",
               max_tolerated_failure_rate=0.5).action is Action.RESTART_INSTANCES
    # Sync peers die of the root failure: only the root counts.
    assert run(faults=two, max_tolerated_failure_rate=0.3).action is Action.RESTART_IN_PLACE


def test_async_repeats_count_per_device_not_per_node():
    ledger = (NodeFaultEntry("node-0", "TG-NCCL-ERROR", NOW - 20, device="rank-2"),
              NodeFaultEntry("node-0", "TG-NCCL-ERROR", NOW - 10, device="rank-3"))
    # Three different independent instances on one node: no escalation.
    assert run(history=History(ledger=ledger), job_execution_mode="Async").action is Action.RESTART_INSTANCES
    same = tuple(NodeFaultEntry("node-0", "TG-NCCL-ERROR", NOW - i, device="rank-1") for i in (20, 10))
    decision = run(history=History(ledger=same), job_execution_mode="Async")
    assert decision.action is Action.REPLACE_INSTANCES and decision.isolate == ("node-0",)
    # Sync counts the node whichever rank failed first.
    assert run(history=History(ledger=ledger)).action is Action.RESCHEDULE_ISOLATED


@pytest.mark.parametrize("case,kwargs,transient", [
    # A later attempt could succeed: restarts are left to an outer layer, or capacity may return.
    ("restarts off, retryable fault", dict(enable_job_restart=False), True),
    ("restarts off, hang", dict(enable_job_restart=False, enable_job_hang_detection=True,
                                faults=[Fault(ErrorSource.HANG, NOW)]), True),
    ("node fault, no spare", dict(verdict=NODE, capacity=TIGHT), True),
    # Permanent: a bug, a budget spent, a fault repeated too often, the policy itself.
    ("restarts off, user error", dict(verdict=USER, enable_job_restart=False), False),
    ("user error", dict(verdict=USER), False),
    ("budget spent", dict(max_num_of_job_restart=0, enable_in_place_restart=False), False),
    ("same error too often", dict(max_num_of_same_error=1,
                                  history=History(same_error_counts={(1, "TG-NCCL-ERROR"): 1})), False),
    ("Never", dict(fault_tolerant_policy="Never"), False),
])
def test_a_give_up_says_whether_a_later_attempt_could_succeed(case, kwargs, transient):
    decision = run(**kwargs)
    assert decision.action is Action.FAIL, case
    assert decision.transient is transient, case
