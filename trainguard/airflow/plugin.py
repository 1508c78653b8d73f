"""The Airflow plugin: a "Training jobs" page in Airflow's navigation, and a link from each task
instance to its job, served by a small FastAPI app under ``/trainguard`` on the API server.

Registered through the ``airflow.plugins`` entry point (see ``pyproject.toml``); the pages read
the run history that :func:`~trainguard.airflow.jobs.resolve_state_dir` names.

Routes:

``/trainguard/``                    the jobs of the run history
``/trainguard/jobs/{job_id}``       one job: its rounds as a timeline, stages per round
``/trainguard/jobs/{job_id}.json``  the ``trainguard history --json`` object
``/trainguard/task?dag_id=&run_id=&task_id=&map_index=``  the job of a task instance
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator
from urllib.parse import quote

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from trainguard.airflow.jobs import base_job_id, resolve_state_dir
from trainguard.airflow.timeline import job_page, jobs_page
from trainguard.store import RunStore

PREFIX = "/trainguard"


@contextmanager
def _open_store() -> Iterator[RunStore | None]:
    """The run history, or None before any job has written one (a page must not create it)."""
    state_dir = resolve_state_dir()
    if not (state_dir / RunStore.FILENAME).exists():
        yield None
        return
    with RunStore(state_dir) as store:
        yield store


async def require_user(request: Request) -> None:
    """Only people signed in to Airflow see the pages: the JWT of an ``Authorization: Bearer``
    header, else of the cookie Airflow's UI sets, must be valid (401/403 otherwise).

    Imported on first use, not with the plugin: every Airflow process loads plugins, and only
    the API server serves these pages."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.api_fastapi.core_api.security import resolve_user_from_token

    header = request.headers.get("authorization", "")
    token = header[7:] if header.lower().startswith("bearer ") else request.cookies.get(COOKIE_NAME_JWT_TOKEN)
    await resolve_user_from_token(token)


def create_app(prefix: str = PREFIX, *, authenticate: bool = True) -> FastAPI:
    """The pages' app; ``prefix`` is where it is mounted (links are absolute). ``authenticate``
    is False only to serve the pages outside Airflow (tests, a standalone viewer)."""
    app = FastAPI(title="trainguard", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(require_user)] if authenticate else [])

    def report_or_404(store: RunStore | None, job_id: str) -> dict[str, Any]:
        if store is None or store.job(job_id) is None:
            raise HTTPException(status_code=404, detail=f"no trainguard job {job_id!r} in {resolve_state_dir()}")
        return store.report(job_id)

    @app.get("/", response_class=HTMLResponse)
    def jobs() -> str:
        with _open_store() as store:
            reports = [store.report(job_id) for job_id in store.job_ids()] if store else []
        return jobs_page(reports, prefix, str(resolve_state_dir()))

    @app.get("/jobs/{job_id}.json")
    def job_json(job_id: str) -> JSONResponse:
        with _open_store() as store:
            return JSONResponse(report_or_404(store, job_id))

    @app.get("/jobs/{job_id}", response_class=HTMLResponse)
    def job(job_id: str) -> str:
        with _open_store() as store:
            report = report_or_404(store, job_id)
            assert store is not None
            return job_page(report, list(store.events(job_id)), prefix)

    @app.get("/task")
    def task(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> RedirectResponse:
        """The task instance's latest job under the operator's default id (one per series of
        tries, see :mod:`trainguard.airflow.jobs`); a custom ``job_id`` is found in the list."""
        base = base_job_id(dag_id, task_id, run_id, map_index)
        with _open_store() as store:
            ids = [j for j in (store.job_ids() if store else []) if j == base or j.startswith(base + ".try")]
        return RedirectResponse(f"{prefix}/jobs/{quote(ids[-1] if ids else base, safe='')}")

    return app


class TrainguardPlugin(AirflowPlugin):
    """Adds the pages to Airflow's API server and links to them from the UI."""

    name = "trainguard"
    fastapi_apps = [{"app": create_app(), "url_prefix": PREFIX, "name": "trainguard"}]
    external_views = [
        {"name": "Training jobs", "href": f"{PREFIX}/", "destination": "nav", "category": "browse",
         "url_route": "trainguard"},
        {"name": "Training job", "href": f"{PREFIX}/task?dag_id={{DAG_ID}}&run_id={{RUN_ID}}&task_id={{TASK_ID}}"
                                         "&map_index={MAP_INDEX}",
         "destination": "task_instance", "url_route": "trainguard-task"},
    ]
