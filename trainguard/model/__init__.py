"""The vocabulary of trainguard as plain data; nothing here does I/O.

A *job* (:class:`JobSpec`) is the blueprint; its running *instances* (:class:`Instance`) are what
adapters start and stop. Something observed about an instance is a :class:`Fault`; a classifier
turns it into a :class:`Verdict`; a strategy turns the verdict and the history into a
:class:`Decision`; carrying the decision out is one :class:`Round`.

Error taxonomy used by verdicts (the ``category`` labels are those of the fault-log data set):

=====================  ==========================================  ============================
category               typical evidence                            usual handling
=====================  ==========================================  ============================
nccl_timeout           watchdog collective timeout                 retry (platform)
nccl_error             NCCL/gloo/RDMA transport errors             retry; isolate a named peer
cuda_oom               CUDA/HIP out of memory                      fail (user: batch size)
host_oom               OOM killer, ENOMEM, SIGKILL 137             fail unless infra-caused
gpu_hardware           Xid, ECC, fallen off the bus                isolate the node, retry
node_or_infra          disk, DNS, store/rendezvous, preemption     retry; isolate when named
user_code              Python traceback in the user's code         fail (no free retry)
hang_or_stuck          no progress, exit hang                      restart upon suspension
segfault_or_signal     SIGSEGV/SIGABRT/SIGBUS and other signals    retry once, then user error
success_or_benign      warnings, clean exit                        nothing
=====================  ==========================================  ============================
"""

from __future__ import annotations

from trainguard.model.choices import (
    ExecutionMode,
    FaultTolerantPolicy,
    ErrorSource,
    Category,
    Action,
    JobStatus,
    RoundResult,
    EventType,
)
from trainguard.model.history import Capacity, History, NodeFaultEntry, RoundRecord
from trainguard.model.job import Decision, Event, Fault, Incident, Instance, JobSpec, LogPattern, Verdict

__all__ = [
    "Action",
    "Capacity",
    "Category",
    "Decision",
    "ErrorSource",
    "Event",
    "EventType",
    "ExecutionMode",
    "Fault",
    "FaultTolerantPolicy",
    "History",
    "Incident",
    "Instance",
    "JobSpec",
    "JobStatus",
    "LogPattern",
    "NodeFaultEntry",
    "RoundRecord",
    "RoundResult",
    "Verdict",
]
