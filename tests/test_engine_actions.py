"""Every action a strategy may return either works or is refused: ``notify`` tells people and
changes nothing; ``scale_in`` in a job that is not elastic fails the job saying so (elastic jobs:
tests/test_elastic.py)."""

from __future__ import annotations

from trainguard.hooks import PluginHost, hookimpl
from trainguard.model import Action, Decision, JobStatus


class Decides:
    def __init__(self, action: Action) -> None:
        self.action = action

    @hookimpl(tryfirst=True)
    def trainguard_decide_recovery(self, incident, verdict, history, policy, capacity):
        return Decision(self.action, f"the test strategy chose {self.action.value}", strategy="test")


def test_notify_only_tells_and_leaves_the_job_as_it_is(run_job):
    host = PluginHost(load_entry_points=False, plugins={"test": Decides(Action.NOTIFY)})
    run = run_job([{"round": 0, "rank": 1, "do": "fail", "say": "NCCL error: unhandled system error"},
                   {"rank": 0, "do": "sleep", "seconds": 1.0}], host=host)
    types = [e["type"] for e in run.events()]
    assert "fault_notified" in types and "round_started" not in types
    assert len(run.starts) == 2, "nothing was restarted"
    # Rank 0 finished; rank 1's failure was only reported, so the job cannot have succeeded.
    assert run.status is JobStatus.FAILED and run.report["rounds"] == []
    assert "no rank is left running" in run.report["failure"]["reason"]


def test_scale_in_is_refused_in_a_job_that_is_not_elastic(run_job):
    host = PluginHost(load_entry_points=False, plugins={"test": Decides(Action.SCALE_IN)})
    run = run_job([{"round": 0, "rank": 1, "do": "fail", "say": "NCCL error: unhandled system error"}], host=host)
    assert run.status is JobStatus.FAILED and run.report["rounds"] == []
    assert "scale_in is refused: the job is not elastic" in run.report["failure"]["reason"]
    assert any(e["type"] == "plugin_error" for e in run.events())
