"""Provider metadata for Airflow's ``apache_airflow_provider`` entry point.

It lists the operator, trigger and notifier so ``airflow providers`` shows them, and declares
the ``[trainguard]`` configuration section with its one option, ``state_dir``. The plugin is
registered through the ``airflow.plugins`` entry point only (listing it here as well would load
it twice).
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any


def get_provider_info() -> dict[str, Any]:
    """The provider's description, in the shape of Airflow's ``provider_info.schema.json``."""
    return {
        "package-name": "trainguard",
        "name": "trainguard",
        "description": "Fault tolerance for distributed training jobs: restart rounds, node isolation and hang "
                       "handling for training tasks, and a page showing every job's rounds.",
        "versions": [version("trainguard")],
        "integrations": [{"integration-name": "trainguard", "tags": ["software"]}],
        "operators": [{"integration-name": "trainguard", "python-modules": ["trainguard.airflow.operators"]}],
        "triggers": [{"integration-name": "trainguard", "python-modules": ["trainguard.airflow.triggers"]}],
        "notifications": ["trainguard.airflow.notifiers.TrainguardNotifier"],
        "config": {
            "trainguard": {
                "description": "trainguard's training-job supervision.",
                "options": {
                    "state_dir": {
                        "description": "The run history directory, shared by workers, the triggerer and the "
                                       "API server (and by Slurm's nodes for Slurm jobs). "
                                       "$TRAINGUARD_STATE_DIR overrides it; empty means $AIRFLOW_HOME/trainguard.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/shared/trainguard",
                        "default": "",
                    },
                },
            },
        },
    }
