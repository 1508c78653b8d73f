"""The hang detector's arithmetic, on made-up clocks (the engine tests run it on real ranks)."""

from __future__ import annotations

from trainguard.detectors import HangDetector


def test_a_finished_rank_neither_holds_a_hang_nor_cuts_the_others_interval_short():
    detector = HangDetector(300.0)  # the job's interval; rank 1's stage narrows its own to 2 s
    progress = {0: 10.0, 1: 5.0}  # rank 0 finished at 10 s; rank 1 went quiet at 5 s
    overrides = {1: 2.0}
    # Rank 0's job-wide 300 s does not count any more, but its last output does: 10 + 2.
    assert detector.deadline(progress, overrides, running={1}) == 12.0
    assert detector.check(11.9, progress, overrides, {1: "train"}, running={1}) is None
    fault = detector.check(12.0, progress, overrides, {0: None, 1: "train"}, running={1})
    assert fault is not None and fault.stage == "train"
    assert fault.message == ("no progress from any of 1 running instance(s): rank 1 in stage 'train' silent 2.0 s "
                             "(interval 2)")


def test_every_running_rank_must_be_silent_past_its_own_interval():
    detector = HangDetector(5.0)
    detector.reset(100.0)
    assert detector.deadline({0: 101.0, 1: 103.0}, {}, running={0, 1}) == 108.0
    # A rank whose stage turned detection off (-1) keeps the job from being called hung.
    assert detector.deadline({0: 101.0, 1: 103.0}, {1: -1}, running={0, 1}) is None
    # Nothing running, nothing to judge.
    assert detector.deadline({0: 101.0}, {}, running=set()) is None
