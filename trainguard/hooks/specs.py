"""Hook specifications: the contract every trainguard plugin implements.

A plugin is any object or module with functions marked ``@trainguard.hookimpl`` and named as
below; pluggy rejects, at registration, an implementation whose arguments are not in the spec.
Third parties register through the entry-point group ``trainguard``. The engine calls these
hooks only through :class:`trainguard.hooks.PluginHost`, which isolates a failing plugin: its
exception is recorded as a ``plugin_error`` event and the conservative default decides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from trainguard.hooks.markers import hookspec

if TYPE_CHECKING:
    from trainguard.hooks.registry import AdapterRegistry
    from trainguard.model import (
        Capacity,
        Decision,
        Event,
        Fault,
        History,
        Incident,
        Instance,
        JobSpec,
        LogPattern,
        Verdict,
    )
    from trainguard.policy import Policy


@hookspec
def trainguard_register_adapters(registry: AdapterRegistry) -> None:
    """Register scheduler adapters by name.

    :param registry: call ``registry.add_adapter(name, factory)``; the factory takes the adapter
        options as keyword arguments and returns an object satisfying
        :class:`trainguard.adapters.Adapter`. A duplicate name is rejected.

    Called once per plugin host, for every plugin. Implemented by ``trainguard.adapters``
    (``local``) and by adapter plugins.
    """


@hookspec
def trainguard_log_patterns() -> Sequence[LogPattern]:
    """Contribute log patterns to the catalog the built-in log classifier matches.

    :return: patterns; their ``id`` must be unique across plugins.

    Fan-out: every plugin's patterns are collected and validated once per host. Implemented by
    ``trainguard.plugins.log_classifier`` (the built-in catalog, ``patterns.yaml``).
    """


@hookspec
def trainguard_classify_fault(
    fault: Fault, log_tail: str, policy: Policy, patterns: tuple[LogPattern, ...]
) -> Verdict | None:
    """Say what a fault is.

    :param fault: what was observed (exit code, signal, hang, event) about which instance.
    :param log_tail: the last ``policy.log_tail_bytes`` of the instance's log, decoded.
    :param policy: the job's policy (custom retryable keywords live there).
    :param patterns: the log-pattern catalog every plugin contributed.
    :return: a verdict, or None when this classifier has nothing to say.

    Fan-out: all verdicts are merged by the engine, the highest ``confidence`` winning; if none
    is returned, the fault is unknown and gets no free retry. Implemented by
    ``trainguard.plugins.exit_classifier`` and ``trainguard.plugins.log_classifier``.
    """


@hookspec(firstresult=True)
def trainguard_decide_recovery(
    incident: Incident,
    verdict: Verdict,
    history: History,
    policy: Policy,
    capacity: Capacity,
) -> Decision | None:
    """Decide what to do about an incident.

    :param incident: the faults handled together; ``incident.root`` is the first in time.
    :param verdict: the merged verdict on the root fault.
    :param history: earlier rounds and the bad-node ledger of this job.
    :param policy: the job's policy.
    :param capacity: the job's nodes, slots and isolated nodes.
    :return: a decision, or None to let the next strategy decide.

    First result wins. Implemented by ``trainguard.plugins.strategy`` (the built-in ladder),
    registered ``trylast`` so any plugin can decide first and fall back to it by returning None.
    """


@hookspec
def trainguard_instance_env(job: JobSpec, instance: Instance, restart_round: int) -> Mapping[str, str] | None:
    """Contribute environment variables to an instance about to start.

    :param job: the job blueprint.
    :param instance: the instance with its rank, node and start counters.
    :param restart_round: the round it starts in (0 for the first start).
    :return: variables to add, or None.

    Fan-out: the mappings are merged in call order; the engine's own ``TRAINGUARD_*`` and
    torchrun variables are set last and cannot be overridden. Implemented by plugins that
    export site-specific settings (a checkpoint directory per round, NCCL tuning).
    """


@hookspec
def trainguard_on_event(event: Event) -> None:
    """Be told of something a person should see: a round, an isolation, a final verdict.

    :param event: the event; ``event.type`` is one of ``job_started``, ``fault_detected``,
        ``round_started``, ``round_finished``, ``node_isolated``, ``job_succeeded``,
        ``job_failed``, ``plugin_error``.

    Fan-out, fire and forget: a notifier's exception is logged and never stops the job.
    Implemented by ``trainguard.plugins.notifiers``.
    """
