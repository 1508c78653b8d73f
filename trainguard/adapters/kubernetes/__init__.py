"""Kubernetes adapter (launcher mode): ranks as pods, watched through the API.

Modules: :mod:`.client` (configuration, retries), :mod:`.manifests` (pods and the Service),
:mod:`.watch` (one list+watch per job), :mod:`.logs` (container logs into local files),
:mod:`.status` and :mod:`.rankpod` (how a pod ended), :mod:`.nodes` (capacity, taints),
:mod:`.badnodes` (the namespace's isolated nodes), :mod:`.stacks` (py-spy through
``pods/exec``), :mod:`.options` (CLI flags) and :mod:`.adapter` (the
:class:`~trainguard.adapters.Adapter`). Only this package imports ``kubernetes`` (the optional
``trainguard[kubernetes]`` extra), and only when used.
"""
