"""The choices of the vocabulary: ``str`` enums whose docstrings state their state machines."""

from __future__ import annotations

import enum


class _Choice(str, enum.Enum):
    """A ``str`` enum whose values parse case-insensitively (``sync`` is ``Sync``)."""

    @classmethod
    def parse(cls, text: str) -> "_Choice":
        for member in cls:
            if member.value.lower() == str(text).strip().lower():
                return member
        allowed = ", ".join(m.value for m in cls)
        raise ValueError(f"{text!r} is not one of {allowed}")

    def __str__(self) -> str:
        return self.value

class ExecutionMode(_Choice):
    """AIMaster ``--job-execution-mode``: Sync restarts the whole job, Async only failed instances."""

    SYNC = "Sync"
    ASYNC = "Async"

class FaultTolerantPolicy(_Choice):
    """AIMaster ``--fault-tolerant-policy``.

    OnFailure restarts unconditionally, ExitCodeAndErrorMsg only when the exit code or the
    failed instance's log tail says the fault is retryable, Never gives up at once.
    """

    ON_FAILURE = "OnFailure"
    EXIT_CODE_AND_ERROR_MSG = "ExitCodeAndErrorMsg"
    NEVER = "Never"

class ErrorSource(_Choice):
    """Where a fault was observed (the ``error_source`` of a restart record)."""

    EXIT_CODE = "exit_code"
    LOG = "log"
    HANG = "hang"
    EXIT_HANG = "exit_hang"
    EVENT = "event"
    SDK = "sdk"
    HEALTH_CHECK = "health_check"

class Category(_Choice):
    """What a fault is, as labelled in ``shared/faultlogs`` (see the module table)."""

    NCCL_TIMEOUT = "nccl_timeout"
    NCCL_ERROR = "nccl_error"
    CUDA_OOM = "cuda_oom"
    HOST_OOM = "host_oom"
    GPU_HARDWARE = "gpu_hardware"
    NODE_OR_INFRA = "node_or_infra"
    USER_CODE = "user_code"
    HANG_OR_STUCK = "hang_or_stuck"
    SEGFAULT_OR_SIGNAL = "segfault_or_signal"
    SUCCESS_OR_BENIGN = "success_or_benign"
    UNKNOWN = "unknown"

class Action(_Choice):
    """What a decision does. Every value but ``fail`` and ``notify`` starts a recovery round.

    ``restart_in_place`` and ``restart_instances`` keep placements (the processes start again
    where they were); ``restart_job``, ``reschedule_isolated`` and ``replace_instances`` place
    instances anew (``TRAINGUARD_SCHEDULE_COUNT`` grows, ``TRAINGUARD_PROC_START_COUNT`` resets).
    ``scale_in`` (elastic jobs) isolates the lost node and places the whole job anew on the nodes
    left, with fewer ranks (trainguard/elastic.py). ``restart_in_process`` ends the training
    function's iteration in every rank and calls it again in the same processes;
    ``recover_in_process`` does so too and starts anew only the ranks that died (trainguard/inprocess):
    neither places the job anew nor stops every instance (``replaces`` and ``whole_job`` are False).
    """

    RESTART_IN_PLACE = "restart_in_place"
    RESTART_INSTANCES = "restart_instances"
    RESTART_JOB = "restart_job"
    RESCHEDULE_ISOLATED = "reschedule_isolated"
    REPLACE_INSTANCES = "replace_instances"
    SCALE_IN = "scale_in"
    RESTART_IN_PROCESS = "restart_in_process"
    RECOVER_IN_PROCESS = "recover_in_process"
    FAIL = "fail"
    NOTIFY = "notify"

    @property
    def replaces(self) -> bool:
        """Whether the affected instances are placed anew rather than restarted where they run."""
        return self in (Action.RESTART_JOB, Action.RESCHEDULE_ISOLATED, Action.REPLACE_INSTANCES, Action.SCALE_IN)

    @property
    def whole_job(self) -> bool:
        """Whether every instance is stopped and started, not only the failed ones."""
        return self in (Action.RESTART_IN_PLACE, Action.RESTART_JOB, Action.RESCHEDULE_ISOLATED, Action.SCALE_IN)

class JobStatus(_Choice):
    """``running`` → ``succeeded`` | ``failed``; a supervisor that resumes a job keeps ``running``."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

class RoundResult(_Choice):
    """``in_progress`` → ``recovered`` (instances running again) | ``requeued`` (the scheduler
    will start the job again in a new allocation) | ``failed`` (the restart broke) |
    ``interrupted`` (the supervisor stopped or died mid-round; not charged unless the action had
    been carried out, see :meth:`trainguard.store.RunStore.close_interrupted`)."""

    IN_PROGRESS = "in_progress"
    RECOVERED = "recovered"
    REQUEUED = "requeued"
    FAILED = "failed"
    INTERRUPTED = "interrupted"

class EventType(_Choice):
    """What an :class:`Event` is about; ``docs/events.md`` gives each one's message and ``data``.

    A ``str`` enum, so ``EventType.JOB_FAILED == "job_failed"`` and stored or serialised events
    (plain strings) compare equal to members. A job's events follow its life:
    ``job_started`` (or ``job_resumed``, then ``job_adopted`` when running ranks were found)
    first; then, per fault, ``fault_detected`` → ``stacks_captured``? → either ``round_started``
    → ``node_isolated``* → ``round_finished`` (or ``job_requeued``), or ``fault_notified`` when a
    strategy only tells people; and last ``job_succeeded`` or ``job_failed``. The others (SDK
    messages, slow ranks, advice, plugin errors, per-rank successes, Slurm submissions) come in
    between.
    """

    JOB_STARTED = "job_started"
    JOB_RESUMED = "job_resumed"
    JOB_SUCCEEDED = "job_succeeded"
    JOB_FAILED = "job_failed"
    JOB_REQUEUED = "job_requeued"
    INSTANCE_SUCCEEDED = "instance_succeeded"
    JOB_ADOPTED = "job_adopted"
    JOB_TAKEN_OVER = "job_taken_over"
    SANITY_CHECK_SUCCEEDED = "sanity_check_succeeded"
    SANITY_CHECK_FAILED = "sanity_check_failed"
    RUNTIME_CHECK_FAILED = "runtime_check_failed"
    FAULT_DETECTED = "fault_detected"
    FAULT_NOTIFIED = "fault_notified"
    STACKS_CAPTURED = "stacks_captured"
    ROUND_STARTED = "round_started"
    NODE_ISOLATED = "node_isolated"
    ROUND_FINISHED = "round_finished"
    RANK_SLOW = "rank_slow"
    HANG_INTERVAL_ADVICE = "hang_interval_advice"
    SDK_MESSAGE = "sdk_message"
    SDK_RETRYABLE_ERRORS = "sdk_retryable_errors"
    PLUGIN_ERROR = "plugin_error"
    SLURM_SUBMITTED = "slurm_submitted"
    SLURM_RESUBMITTING = "slurm_resubmitting"

    @property
    def final(self) -> bool:
        """Whether this is the last event a supervisor sends about its job (it exits after it;
        after ``job_requeued`` the job goes on under a new supervisor, with ``job_resumed``)."""
        return self in (EventType.JOB_SUCCEEDED, EventType.JOB_FAILED, EventType.JOB_REQUEUED)
