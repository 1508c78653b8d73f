"""Hook specifications: the contract every trainguard plugin implements.

A plugin is any object or module with functions marked ``@trainguard.hookimpl`` and named as
below; pluggy rejects, at registration, an implementation whose arguments are not in the spec.
Third parties register through the entry-point group ``trainguard``. Implementations may be
pluggy hook wrappers (``@hookimpl(wrapper=True)``) and may use ``tryfirst``/``trylast``. The
engine calls these hooks only through :class:`trainguard.hooks.PluginHost`, which dispatches
through pluggy and checks every result against the contract below: a plugin that raises or
returns anything else is named in a ``plugin_error`` event, disabled for the rest of the job,
and the call is made again without it, so the conservative default decides.
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
    :return: nothing; adapters are registered through ``registry``.

    Called once per plugin host, for every plugin. Implemented by ``trainguard.adapters``
    (``local``) and by adapter plugins.
    """


@hookspec
def trainguard_log_patterns() -> Sequence[LogPattern]:
    """Contribute log patterns to the catalog the built-in log classifier matches.

    :return: a list (or tuple) of :class:`~trainguard.model.LogPattern`; their ``id`` must be
        unique across plugins. Anything else disables the plugin.

    Fan-out: every plugin's patterns are collected and validated once per host; a duplicate id
    or a malformed expression is one clear error before any rank starts. Implemented by
    ``trainguard.plugins.log_classifier`` (the built-in catalog, ``patterns.yaml``).
    """


@hookspec
def trainguard_catalog_ready(patterns: tuple[LogPattern, ...]) -> None:
    """Prepare for classifying with the validated catalog, before any rank starts.

    :param patterns: the log-pattern catalog every plugin contributed, as
        :func:`trainguard_classify_fault` will receive it.
    :return: nothing.

    Called once per host, when the catalog has been collected and validated: compile here what
    matching needs, so that the first fault's round does not pay for it (the built-in catalog
    takes ~50 ms to compile, a fifth of an in-process restart). Fan-out; a plugin that raises is
    disabled. Implemented by ``trainguard.plugins.log_classifier``.
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
    :return: a :class:`~trainguard.model.Verdict`, or None when this classifier has nothing to
        say; anything else disables the plugin.

    Fan-out: all verdicts are merged by the host, the highest ``confidence`` winning (ties to the
    earlier call); if none is returned, the fault is unknown and gets no free retry. A wrapper
    receives and returns the list of verdicts. Implemented by
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
    :return: a :class:`~trainguard.model.Decision`, or None to let the next strategy decide;
        anything else disables the plugin.

    First result wins. Implemented by ``trainguard.plugins.strategy`` (the built-in ladder),
    registered ``trylast`` so any plugin can decide first and fall back to it by returning None.
    """


@hookspec
def trainguard_instance_env(job: JobSpec, instance: Instance, restart_round: int) -> Mapping[str, str] | None:
    """Contribute environment variables to an instance about to start.

    :param job: the job blueprint.
    :param instance: the instance with its rank, node and start counters.
    :param restart_round: the round it starts in (0 for the first start).
    :return: a mapping of ``str`` names to ``str`` values to add, or None; anything else (a
        number as a value, say) disables the plugin.

    Fan-out: the mappings are merged in call order; the engine's own ``TRAINGUARD_*`` and
    torchrun variables are set last and cannot be overridden. Implemented by plugins that
    export site-specific settings (a checkpoint directory per round, NCCL tuning).
    """


@hookspec
def trainguard_on_event(event: Event) -> None:
    """Be told of something a person should see: a round, an isolation, a final verdict.

    :param event: the event; ``event.type`` is a :class:`~trainguard.model.EventType`:
        ``job_started``, ``job_resumed``, ``job_adopted``, ``job_taken_over``, ``instance_succeeded``,
        ``fault_detected``, ``stacks_captured``, ``hang_interval_advice``, ``round_started``,
        ``node_isolated``, ``round_finished``, ``job_requeued``, ``fault_notified``,
        ``job_succeeded``, ``job_failed``, ``rank_slow``, ``sdk_message``,
        ``sdk_retryable_errors``, ``plugin_error``, ``slurm_submitted``, ``slurm_resubmitting``,
        ``sanity_check_succeeded``, ``sanity_check_failed``, ``runtime_check_failed``;
        ``docs/events.md`` gives each one's message and ``data`` and the JSON form
        (``event.to_json()``).
    :return: nothing (a result is ignored).

    Fan-out, fire and forget, off the critical path: each notifier gets the events in order
    from its own bounded queue and worker thread, so a slow one never delays detection or
    recovery; a full queue drops events (counted and logged). A plugin with a true
    ``inline_notifier`` attribute is called at once in the supervisor's thread instead (the
    log, the ``--events-file``). A notifier that raises is disabled and never stops the job.
    Implemented by ``trainguard.plugins.notifiers``.
    """


if TYPE_CHECKING:
    from trainguard.sanity.items import SanityItem


@hookspec
def trainguard_sanity_items() -> Sequence[SanityItem]:
    """Contribute check items to the pre-start sanity check (``--sanity-check ITEMS``).

    :return: items; their ``name`` must be unique across plugins, and their ``function``
        (``"module:callable"``) importable on every node, where the check worker calls it.

    Fan-out: every plugin's items are collected and validated when a check starts, like
    adapters (a malformed item fails loudly). Implemented by ``trainguard.sanity.items``
    (the seed's thirteen items) and by site plugins (a DCGM diagnostic, an NVLink test).
    """
