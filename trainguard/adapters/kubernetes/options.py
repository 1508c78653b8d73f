"""The ``run`` flags of the Kubernetes adapter, and ``--dry-run``'s manifests.

Kept here so the CLI needs two lines: ``add_arguments(group)`` when it builds the ``run``
parser and ``adapter_options(args)`` when it calls ``supervise``. Nothing here imports
``kubernetes``.
"""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from trainguard.adapters.kubernetes import manifests
from trainguard.model import JobSpec
from trainguard.sdk import CHANNEL_VAR, STDERR_CHANNEL


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Kubernetes (--adapter kubernetes)")
    group.add_argument("--namespace", default=None, help="namespace of the rank pods (default: the context's, "
                                                         "else default)")
    group.add_argument("--image", default=None, help="container image (default: the pod template's)")
    group.add_argument("--pod-template", default=None, metavar="FILE.yaml",
                       help="a Pod or PodTemplateSpec whose image, resources, volumes, tolerations and node "
                            "selector every rank pod keeps")
    group.add_argument("--dry-run", action="store_true",
                       help="with --adapter kubernetes: print the manifests it would create, create nothing; with "
                            "any other adapter: run the job but only decide and log each recovery (--decide-only)")
    group.add_argument("--taint-bad-nodes", action="store_true",
                       help="taint isolated nodes trainguard.io/unhealthy=<code>:NoSchedule (needs node patch "
                            "rights; lifted when the isolation window ends)")
    group.add_argument("--spare-nodes", type=int, default=0,
                       help="spare nodes to assume when nodes cannot be listed (no RBAC to read nodes)")
    group.add_argument("--pending-timeout", type=float, default=300.0, metavar="SECONDS",
                       help="a rank pod Pending longer than this is a fault (default 300)")
    group.add_argument("--kubeconfig", default=None, help="kubeconfig file (default $KUBECONFIG, ~/.kube/config, "
                                                          "then the pod's service account)")
    group.add_argument("--context", default=None, help="kubeconfig context")
    group.add_argument("--queue", default="default", help="Volcano queue of the job (--adapter volcano)")


def _namespace(args: argparse.Namespace) -> str:
    if args.namespace:
        return str(args.namespace)
    try:
        from kubernetes import config

        _, active = config.list_kube_config_contexts(config_file=args.kubeconfig)
        return str((active.get("context") or {}).get("namespace") or "default")
    except Exception:
        return "default"


def adapter_options(args: argparse.Namespace) -> dict[str, Any]:
    """The adapter's keyword arguments from the parsed ``run`` flags (none unless the adapter is kubernetes)."""
    if getattr(args, "adapter", None) not in ("kubernetes", "volcano"):
        return {}
    return ({"queue": args.queue} if args.adapter == "volcano" else {}) | {"namespace": _namespace(args), "image": args.image, "pod_template": args.pod_template,
            "taint_bad_nodes": args.taint_bad_nodes, "spare_nodes": args.spare_nodes,
            "pending_timeout": args.pending_timeout, "kubeconfig": args.kubeconfig, "context": args.context}


def dry_run(spec: JobSpec, args: argparse.Namespace) -> str:
    """The Service and round-0 pods ``run`` would create, as one YAML stream."""
    options = adapter_options(args)
    namespace = options["namespace"]
    template = manifests.load_template(options["pod_template"])
    env = {**spec.env, "WORLD_SIZE": str(spec.nproc), "MASTER_ADDR": manifests.master_address(spec.job_id, namespace),
           "MASTER_PORT": "<chosen at start>", "TRAINGUARD_JOB_ID": spec.job_id, "TRAINGUARD_RESTART_ROUND": "0",
           "TRAINGUARD_SCHEDULE_COUNT": "1", "TRAINGUARD_PROC_START_COUNT": "1", CHANNEL_VAR: STDERR_CHANNEL}
    documents = [manifests.service_manifest(spec.job_id, namespace)]
    for rank in range(spec.nproc):
        pod = manifests.pod_manifest(template, job_id=spec.job_id, namespace=namespace, rank=rank, restart_round=0,
                                     command=spec.command, env={**env, "RANK": str(rank)}, image=options["image"])
        documents.append({"apiVersion": "v1", "kind": "Pod", **pod})
    return yaml.safe_dump_all(documents, sort_keys=False)
