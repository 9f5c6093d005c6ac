"""The plugin's FastAPI app, mounted by the Airflow API server under ``/elastic-training``.

Authentication and authorization are Airflow's own (``airflow.api_fastapi.core_api.security``, the
dependencies the public API routes use): the caller is the user of the ``Authorization: Bearer``
token or of the UI's session cookie; one run needs read access to its DAG's task instances, the list
shows only DAGs the user may read. Pages redirect to the auth manager's login page when there is no
user; the JSON API answers 401 (no credential) or 403 (a bad one, or no access). Path values are
checked before any database lookup: a malformed one is a 400, an unknown run a 404, never a 500.

Routes (relative to the mount point):

- ``GET /api/runs?limit=N``: recent elastic runs, newest first;
- ``GET /api/runs/{dag_id}/{run_id}``: every elastic task of one DAG run, in full (see ``plugin.view``);
- ``GET /api/history/{dag_id}/{task_id}?runs=N&key=K``: the task's failure history over its last N runs (per node
  pool): the history ``K`` (one of the task's, listed in ``keys``: its default key, its mapped instances', a custom
  ``failure_history_key`` its reports name; the default key when not given);
- ``GET /ui/`` (recent runs), ``GET /ui/run?dag_id=…&run_id=…`` (one run), ``GET /ui/static/<asset>``:
  plain HTML, JS and CSS shipped in this package (no CDN);
- ``GET /ui/history?dag_id=…&task_id=…&runs=N&key=K``: the failure history page (server-rendered, an inline SVG
  chart), with links to the task's other histories.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, bearer_scheme, get_user, requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from elastic_training.plugin import runs
from elastic_training.plugin.history_view import history_json, history_page
from elastic_training.plugin.view import summary

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser

URL_PREFIX = "/elastic-training"
# Airflow's own key rule for DAG ids (airflow.utils.helpers.KEY_REGEX) and its column width.
_DAG_ID = re.compile(r"^[\w.-]{1,250}$")
_MAX_RUN_ID = 250
_ASSETS = {
    "app.js": "application/javascript",
    "style.css": "text/css",
}
_PAGES = {"index": "index.html", "run": "run.html"}


def _checked_dag_id(dag_id: str) -> str:
    if not _DAG_ID.fullmatch(dag_id):
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "dag_id: letters, digits, '_', '.', '-', at most 250")
    return dag_id


def _checked_run_id(run_id: str) -> str:
    if not 0 < len(run_id) <= _MAX_RUN_ID or any(unicodedata.category(c).startswith("C") for c in run_id):
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "run_id: 1 to 250 printable characters")
    return run_id


_TASK_ID = re.compile(r"^[\w.-]{1,250}$")  # Airflow's KEY_REGEX for task ids too


def _checked_task_id(task_id: str) -> str:
    if not _TASK_ID.fullmatch(task_id):
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "task_id: letters, digits, '_', '.', '-', at most 250")
    return task_id


def _valid_history(dag_id: str, task_id: str) -> None:
    _checked_dag_id(dag_id)
    _checked_task_id(task_id)


def _valid_path(dag_id: str, run_id: str) -> None:
    _checked_dag_id(dag_id)
    _checked_run_id(run_id)


def _asset(name: str) -> bytes:
    return resources.files("elastic_training.plugin").joinpath("static", name).read_bytes()


def create_app() -> FastAPI:
    """The app the plugin mounts; its routes are documented in docs/ui.md."""
    app = FastAPI(title="Elastic training", docs_url=None, redoc_url=None, openapi_url=None)
    app.get("/api/runs")(list_runs)
    # Path values are checked before the authorization check, which looks the DAG up.
    app.get("/api/runs/{dag_id}/{run_id}", dependencies=_checked_then_readable(_valid_path))(get_run)
    app.get("/api/history/{dag_id}/{task_id}", dependencies=_checked_then_readable(_valid_history))(get_history)
    app.get("/ui/history", response_class=HTMLResponse)(history_ui)
    app.get("/ui/", response_class=HTMLResponse)(runs_page)
    app.get("/ui/run", response_class=HTMLResponse)(run_page)
    app.get("/ui/static/{name}")(static_asset)
    app.get("/")(root)
    return app


def _checked_then_readable(check: Callable[..., None]) -> list[Any]:
    """Dependencies of a route on one DAG: its path values checked, then the user's read access to its tasks."""
    return [
        Depends(check),
        Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.TASK_INSTANCE)),
    ]


def list_runs(
    user: GetUserDep,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> dict[str, Any]:
    """Recent elastic runs the user may read, newest first."""
    readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET")
    tis = runs.elastic_task_instances(session, dag_ids=readable, limit=limit)
    rows = [summary(runs.task_view(session, ti, storage=False)) for ti in tis]
    return {"runs": rows, "total": len(rows)}


def get_run(dag_id: str, run_id: str, user: GetUserDep, session: SessionDep) -> dict[str, Any]:
    """Every elastic task of one DAG run, with budgets, recoveries, checkpoints, goodput and advice."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    dag_run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if dag_run is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no DAG run {run_id!r} of DAG {dag_id!r}")
    tis = runs.elastic_task_instances(session, dag_ids=None, dag_id=dag_id, run_id=run_id, limit=100)
    if not tis:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"DAG run {run_id!r} of {dag_id!r} has no elastic task")
    return {
        "dag_id": dag_id,
        "run_id": run_id,
        "dag_run_state": dag_run.state,
        "tasks": [runs.task_view(session, ti) for ti in tis],
    }


def _task_history(session: Any, dag_id: str, task_id: str, key: str | None) -> tuple[str, list[str], Any]:
    """The history ``key`` of the task (its default one when ``None``), the task's history keys, and what was read;
    404 when ``key`` is not one of the task's (a key names a Variable: only the task's own are served)."""
    keys = runs.history_keys_of(session, dag_id, task_id)
    chosen = keys[0] if key is None else key
    if chosen not in keys:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"{chosen!r} is not a failure history of {dag_id}.{task_id}")
    return chosen, keys, runs.failure_history_of(session, chosen)


def get_history(
    dag_id: str,
    task_id: str,
    session: SessionDep,
    runs_: Annotated[int, Query(alias="runs", ge=1, le=50)] = 10,
    key: Annotated[str | None, Query(min_length=1, max_length=250)] = None,
) -> dict[str, Any]:
    """The task's failure history over its last ``runs`` runs: each run's failures, and the tally per pool."""
    chosen, keys, read = _task_history(session, dag_id, task_id, key)
    return {
        "dag_id": dag_id,
        "task_id": task_id,
        "key": chosen,
        "keys": keys,
        "notes": list(read.notes()),
        **history_json(read.history, runs_),
    }


async def history_ui(
    request: Request,
    session: SessionDep,
    dag_id: str,
    task_id: str,
    runs_: Annotated[int, Query(alias="runs", ge=1, le=50)] = 10,
    key: Annotated[str | None, Query(min_length=1, max_length=250)] = None,
) -> Response:
    """The failure-history page of one task (a redirect to the login page when there is no user)."""
    _valid_history(dag_id, task_id)
    user = await _user_or_login(request)
    if isinstance(user, RedirectResponse):
        return user
    requires_access_dag(method="GET", access_entity=DagAccessEntity.TASK_INSTANCE)(request, user)
    chosen, keys, read = _task_history(session, dag_id, task_id, key)
    html = history_page(
        read.history,
        dag_id=dag_id,
        task_id=task_id,
        runs=runs_,
        run_url=run_page_url,
        stylesheet=f"{URL_PREFIX}/ui/static/style.css",
        key=chosen,
        keys={k: history_page_url(dag_id, task_id, k) for k in keys},
        notes=read.notes(),
    )
    return HTMLResponse(html)


async def _user_or_login(request: Request) -> BaseUser | RedirectResponse:
    """The request's user, or a redirect to the auth manager's login page that comes back here."""
    try:
        return await get_user(request, None, await bearer_scheme(request))
    except HTTPException:
        here = str(request.url.path) + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(get_auth_manager().get_url_login(next_url=here), status.HTTP_303_SEE_OTHER)


async def _page(request: Request, name: str) -> Response:
    user = await _user_or_login(request)
    if isinstance(user, RedirectResponse):
        return user
    return HTMLResponse(_asset(_PAGES[name]))


async def runs_page(request: Request) -> Response:
    """The page of recent runs."""
    return await _page(request, "index")


async def run_page(request: Request) -> Response:
    """The page of one run (its DAG and run ids in the query, read by app.js)."""
    return await _page(request, "run")


def static_asset(name: str, user: GetUserDep) -> Response:
    """One of the pages' scripts and stylesheets."""
    if name not in _ASSETS:  # a fixed list: nothing from the path reaches the file system
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such asset")
    return Response(_asset(name), media_type=_ASSETS[name], headers={"Cache-Control": "no-cache"})


def root() -> RedirectResponse:
    """The mount point itself: the recent runs page."""
    return RedirectResponse(f"{URL_PREFIX}/ui/", status.HTTP_307_TEMPORARY_REDIRECT)


def run_page_url(dag_id: str, run_id: str) -> str:
    """The view of one run, relative to the API server's root."""
    return f"{URL_PREFIX}/ui/run?dag_id={quote(dag_id, safe='')}&run_id={quote(run_id, safe='')}"


def history_page_url(dag_id: str, task_id: str, key: str | None = None) -> str:
    """The failure-history page of one task (of its history ``key``), relative to the API server's root."""
    url = f"{URL_PREFIX}/ui/history?dag_id={quote(dag_id, safe='')}&task_id={quote(task_id, safe='')}"
    return url if key is None else f"{url}&key={quote(key, safe='')}"
