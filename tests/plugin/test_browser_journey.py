"""The analyst's journey in a real browser, on the shipped DAGs, through ``elastic-training airflow``.

What ``make airflow`` runs (the real api-server, scheduler, dag-processor and triggerer, the local cluster)
is started once for the module; headless Chromium, driven over the DevTools protocol, then does what a new
user does (issue 18, "What it must show"): the login page, typed credentials, the DAG page, the pause
toggle, the Trigger button, the form with its defaults and every section opened (no field in error, its
Trigger button enabled), the run followed to success, the run's "Elastic training" tab and the runs list
with its ``pretrain`` task and a non-zero goodput. ``elastic_training_nightly`` first, then, while it runs,
``elastic_training_fault_drill`` from its own form (the two train side by side), whose tab must show the recovery and
its phases. While each ``pretrain`` runs, its view is read as the page reads it, to see the live step from the head
pod's log.

Then the capacity story (the stack's ``elastic_capacity_story``: a task that stores what the operator stores at the
end of a flex-start run queued for quota, provisioning and evicted three ways, tests/support/capacity_run.py): its
tab must name each wait and each eviction on the chart, in its legend (a colour per kind) and in the waits table with
Kueue's words, no label over another (docs/images/run-view-capacity.png is its picture).

Then the GKE connection form (Admin > Connections > Add, type *GKE cluster (elastic training)*): its Project,
Location, Cluster and Namespace fields with their labels and descriptions, the standard fields it hides not there
(docs/images/gke-connection-form.png is its picture).

Screenshots go to ``$ELASTIC_TRAINING_TEST_OUTPUT/browser-journey/<dag_id>/`` (default ``test-output``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from elastic_training.operators.gke_connection import FIELDS
from tests.support.airflow_stack import CAPACITY, STARTUP_SECONDS, Stack, admin_password, logged_in
from tests.support.browser import DevTools, first_page

RUN_SECONDS = 900.0
pytestmark = [pytest.mark.slow, pytest.mark.timeout(STARTUP_SECONDS + 2 * RUN_SECONDS + 600)]
OUTPUT = Path(os.environ.get("ELASTIC_TRAINING_TEST_OUTPUT", "test-output")) / "browser-journey"
NIGHTLY = "elastic_training_nightly"
DRILL = "elastic_training_fault_drill"
DIALOG = "[...document.querySelectorAll('[role=dialog]')].find(d => d.innerText.includes('Trigger Dag -'))"
FRAME_DOC = "document.querySelector('iframe[title=\"{title}\"]')"
# A wait's start in the waits table, from the chart's first point and signed: one begun before it (a real run is
# queued before its first step) reads with a minus sign (U+2212), "\u22120.33 s", not "+-0.33 s".
WAIT_START = re.compile("[+\u2212]\\d+(\\.\\d+)? (s|min|h)")


@pytest.fixture(scope="module")
def stack(airflow_stack: Stack) -> Stack:
    """The session's ``elastic-training airflow`` (tests/support/airflow_stack.py, on the repository's ``dags/``),
    logged in over REST too, once the dag-processor has parsed both shipped DAGs."""
    return logged_in(airflow_stack, (NIGHTLY, DRILL))


async def click(tools: DevTools, element: str) -> None:
    """A real mouse click at the element's centre (the UI's accordions ignore a scripted ``click()``)."""
    await tools.js(f"{element}.scrollIntoView({{block: 'center', behavior: 'instant'}})")
    await tools.settled(element)  # the modal opens and scrolls: measure where the element is once it stopped
    x, y = await tools.js(
        f"(() => {{ const r = {element}.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
    )
    for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
        await tools.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)


async def click_until(tools: DevTools, element: str, condition: str, failure: str, attempts: int = 3) -> None:
    """Click, and wait for what the click should cause; a click that landed while the page hydrated is repeated."""
    for _ in range(attempts):
        await click(tools, element)
        with contextlib.suppress(TimeoutError):
            await tools.until(condition, timeout=40)
            return
        if await tools.js(condition):
            return
    raise AssertionError(f"{failure} ({attempts} clicks)")


async def open_section(tools: DevTools, button: str) -> None:
    """Open one section of the form (clicked again if the first click landed while the page moved)."""
    for _ in range(3):
        if await tools.js(f"{button}.getAttribute('aria-expanded')") == "true":
            return
        await click(tools, button)
        with contextlib.suppress(TimeoutError):
            await tools.until(f"{button}.getAttribute('aria-expanded') === 'true'", timeout=10)
    raise AssertionError(f"the form's section would not open: {button}")


async def type_into(tools: DevTools, selector: str, text: str) -> None:
    """Type ``text`` into the field, replacing what it held, and wait until the field shows it."""
    field = f"document.querySelector({json.dumps(selector)})"
    await tools.js(f"{field}.focus(), {field}.select()")
    await tools.call("Input.insertText", text=text)
    await tools.until(f"{field}.value === {json.dumps(text)}", timeout=30)


async def shot(tools: DevTools, out: Path, name: str, seen: dict[str, Any]) -> None:
    """The picture, once the page is still (fonts, images, transitions; how long that took is kept in ``seen``)."""
    seen.setdefault("settled", {})[name] = await tools.settled()
    seen.setdefault("screenshots", []).append(str(await tools.screenshot(out / name)))


async def log_in(tools: DevTools, stack: Stack, dag_id: str, out: Path, seen: dict[str, Any]) -> None:
    await tools.call("Page.navigate", url=f"{stack.url}/dags/{dag_id}")
    await tools.until("!!document.querySelector('input[name=username]')", timeout=180)
    seen["login_url"] = await tools.js("location.pathname")
    await shot(tools, out, "01-login-page.png", seen)
    submit = "document.querySelector('button[type=submit]')"
    for attempt in range(1, 4):  # a page still hydrating can drop what was typed: a person types it again
        await type_into(tools, "input[name=username]", "admin")
        await type_into(tools, "input[name=password]", admin_password(stack))
        await tools.until(f"{submit} && !{submit}.disabled")
        await click(tools, submit)
        try:
            await tools.until("!location.pathname.startsWith('/auth/login')", timeout=60)
            seen["sign_ins"] = attempt
            return
        except TimeoutError:
            await shot(tools, out, f"01-login-page-still-{attempt}.png", seen)
    raise AssertionError("still on the login page after three sign-ins with the generated password")


async def trigger_from_the_form(tools: DevTools, stack: Stack, dag_id: str, out: Path, seen: dict[str, Any]) -> str:
    """The DAG page, unpaused with its toggle, the form opened with every section, triggered: the new run's id."""
    if not await tools.js(f"location.pathname === '/dags/{dag_id}'"):
        await tools.call("Page.navigate", url=f"{stack.url}/dags/{dag_id}")
    trigger = "document.querySelector('button[aria-label=\"Trigger Dag\"]')"
    await tools.until(f"!!{trigger} && !!document.querySelector('[data-testid=toggle-pause]')", timeout=180)
    await shot(tools, out, "02-dag-page.png", seen)
    toggle = "document.querySelector('[data-testid=toggle-pause]')"
    if await tools.js(f"{toggle}.dataset.state") == "unchecked":  # paused: someone switched it off
        await click(tools, toggle)
        await tools.until(f"{toggle}.dataset.state === 'checked'")
    before = {r["dag_run_id"] for r in stack.call("GET", f"/api/v2/dags/{dag_id}/dagRuns")[1]["dag_runs"]}
    await click_until(tools, trigger, f"!!{DIALOG}", "pressing the DAG's Trigger opened no form")
    sections = await tools.js(f"[...{DIALOG}.querySelectorAll('button[aria-expanded]')].map(b => b.innerText.trim())")
    invalid: dict[str, list[str]] = {}
    for number, title in enumerate(sections, 1):  # one open at a time: the form's accordion shows one section
        section = f"[...{DIALOG}.querySelectorAll('button[aria-expanded]')]"
        await open_section(tools, f"{section}.find(b => b.innerText.trim() === {title!r})")
        await tools.settled(DIALOG)  # the section has finished opening: its fields are drawn
        invalid[title] = await tools.js(
            f"[...{DIALOG}.querySelectorAll('[data-invalid], [aria-invalid=true], [data-part=error-text]')]"
            ".map(e => e.outerHTML.slice(0, 160))"
        )
        if title != "Advanced Options":
            await shot(tools, out, f"03-trigger-form-{number}-{title.lower().replace(' ', '-')}.png", seen)
    seen["invalid_by_section"] = invalid
    assert not any(invalid.values()), f"fields in error with the form's defaults: {invalid}"
    form = await tools.js(
        f"(() => {{ const d = {DIALOG}; return {{"
        "sections: [...d.querySelectorAll('button[aria-expanded]')].map(b => b.innerText.trim()),"
        "invalid: [...d.querySelectorAll('[data-invalid], [aria-invalid=true]')].map(e => e.outerHTML.slice(0, 160)),"
        "errors: [...d.querySelectorAll('.chakra-field__errorText, [data-part=error-text]')].map(e => e.innerText),"
        "fields: d.querySelectorAll('input, textarea').length,"
        "trigger: [...d.querySelectorAll('button')].filter(b => b.innerText.trim() === 'Trigger').map(b => b.disabled)"
        "}; })()"
    )
    seen["form"] = form
    await shot(tools, out, "03-trigger-form-advanced-options-and-its-trigger-button.png", seen)
    assert form["invalid"] == [] and form["errors"] == [], form
    assert form["trigger"] == [False], f"the form's Trigger button is disabled with its defaults: {form}"
    button = f"[...{DIALOG}.querySelectorAll('button')].find(b => b.innerText.trim() === 'Trigger')"

    def new_runs() -> list[str]:
        runs = stack.call("GET", f"/api/v2/dags/{dag_id}/dagRuns")[1]["dag_runs"]
        return [r["dag_run_id"] for r in runs if r["dag_run_id"] not in before]

    # The form closes once its POST has made the run; a press that lands while the page re-renders leaves it
    # open, idle and with no run: only then is it pressed again (never while a press is still being sent).
    idle = f"!!{button} && !{button}.disabled && !{button}.hasAttribute('data-loading')"
    deadline = time.monotonic() + 120
    presses = 0
    while not (new := new_runs()):
        assert time.monotonic() < deadline, f"pressing Trigger ({presses} presses) made no DAG run"
        if presses == 0 or await tools.js(f"!!{DIALOG} && {idle}"):
            await click(tools, button)
            presses += 1
            with contextlib.suppress(TimeoutError):
                await tools.until(f"!{DIALOG}", timeout=15)
        elif await tools.js(f"!!{DIALOG}"):  # a press is still being sent: until the form closes or is idle again
            with contextlib.suppress(TimeoutError):
                await tools.until(f"!{DIALOG} || ({idle})", timeout=15)
        else:  # the form closed (its POST answered): poll the REST API for the run, within the deadline above
            await asyncio.sleep(1.0)
    seen["trigger_presses"] = presses
    assert len(new) == 1, new
    return str(new[0])


async def picture_while_training(tools: DevTools, stack: Stack, dag_id: str, run_id: str, seen: dict[str, Any]) -> None:
    """The run's tab while ``pretrain`` trains, in one picture if it is drawn in time; then back to a blank page."""
    await tools.call(
        "Page.navigate", url=f"{stack.url}/dags/{dag_id}/runs/{quote(run_id, safe='')}/plugin/elastic-training"
    )
    frame = FRAME_DOC.format(title="Elastic training")
    ready = f"{frame} && {frame}.contentDocument.body && {frame}.contentDocument.body.dataset.ready"
    with contextlib.suppress(TimeoutError):
        await tools.until(f"{ready} === 'true'", timeout=60)
        await shot(tools, OUTPUT / dag_id, "04-elastic-training-tab-while-training.png", seen)
    await tools.call("Page.navigate", url="about:blank")


async def follow_to_the_end(tools: DevTools, stack: Stack, seen: dict[str, dict[str, Any]]) -> None:
    """Wait for the runs (``seen[dag_id]["run_id"]``, side by side) to end; while each one's ``pretrain`` runs, read
    its view as the page does and take one picture of its tab."""
    runs = {dag_id: quote(each["run_id"], safe="") for dag_id, each in seen.items()}
    for each in seen.values():
        each["live"] = []
    pictured: set[str] = set()
    # Between the pictures the page waits on a blank tab: left on the run's page, Chromium re-rendered the UI's
    # polled grid for the minutes of each run (the view is read over REST meanwhile, as the page reads it).
    await tools.call("Page.navigate", url="about:blank")
    deadline = time.monotonic() + RUN_SECONDS
    running = dict(runs)
    while running:
        for dag_id, run_id in list(running.items()):
            run_path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}"
            if (state := stack.call("GET", run_path)[1]["state"]) in ("success", "failed"):
                seen[dag_id]["run_state"] = state
                instances = stack.call("GET", f"{run_path}/taskInstances")[1]["task_instances"]
                seen[dag_id]["task_states"] = {ti["task_id"]: ti["state"] for ti in instances}
                del running[dag_id]
                continue
            assert time.monotonic() < deadline, f"the {dag_id} run is still {state} after {RUN_SECONDS:.0f} s"
            status, body = stack.call("GET", f"/elastic-training/api/runs/{dag_id}/{run_id}")
            if status != 200:
                continue
            [task] = [t for t in body["tasks"] if t["task_id"] == "pretrain"]
            if live := task.get("live"):
                keys = ("current_step", "recoveries_so_far", "error", "pod")
                seen[dag_id]["live"].append({k: live[k] for k in keys})
                if dag_id not in pictured and live["current_step"] is not None:
                    pictured.add(dag_id)
                    await picture_while_training(tools, stack, dag_id, seen[dag_id]["run_id"], seen[dag_id])
        await asyncio.sleep(1.0)  # polls the REST API (the runs' states, their live views) with the deadline above


async def read_the_view(
    tools: DevTools, stack: Stack, dag_id: str, run_id: str, out: Path, seen: dict[str, Any]
) -> None:
    """The run's Elastic training tab, then the runs list, as the analyst sees them."""
    await tools.call("Page.navigate", url=f"{stack.url}/dags/{dag_id}/runs/{quote(run_id, safe='')}")
    await tools.until("document.body.innerText.includes('Elastic training')", timeout=120)
    await shot(tools, out, "05-dag-run-page.png", seen)
    await tools.call(
        "Page.navigate", url=f"{stack.url}/dags/{dag_id}/runs/{quote(run_id, safe='')}/plugin/elastic-training"
    )
    frame = FRAME_DOC.format(title="Elastic training")
    doc = f"{frame}.contentDocument"
    await tools.until(f"{frame} && {doc} && {doc}.body && {doc}.body.dataset.ready === 'true'", timeout=180)
    seen["tab"] = await tools.js(
        f"(() => {{ const d = {doc};"
        " const text = (s) => { const e = d.querySelector(s); return e ? e.textContent : null; };"
        " return {"
        "goodput: text('#kpi-goodput b'), step: text('#kpi-step b'), step_time: text('#kpi-step-time b'),"
        "recoveries: text('#kpi-recoveries b'), note: text('#training-note'),"
        "queued: text('#kpi-queued b'), capacity: text('#capacity'),"
        "points: ((d.querySelector('#timeline polyline') || {getAttribute: () => ''}).getAttribute('points') || '')"
        ".split(' ').filter(Boolean).length,"
        "startup: [...d.querySelectorAll('#timeline .startup-label')].map(e => e.textContent),"
        "phases: [...d.querySelectorAll('#recoveries rect.phase')].map(r => r.getAttribute('class')),"
        "failures: d.querySelectorAll('#timeline .failure-marker').length,"
        "rewinds: d.querySelectorAll('#timeline .rewind').length,"
        "checkpoints: d.querySelectorAll('#checkpoints tr.ckpt').length,"
        "valid: d.querySelectorAll('#checkpoints .valid').length,"
        "wait_starts: [...d.querySelectorAll('#waits tbody tr')].map(r => r.cells[2].textContent),"
        "page: location.pathname }; })()"
    )
    await shot(tools, out, "06-elastic-training-tab.png", seen)
    await tools.js(f"(() => {{ const e = {doc}.querySelector('#capacity'); if (e) e.scrollIntoView(); }})()")
    await shot(tools, out, "06-elastic-training-tab-queue-time.png", seen)
    await tools.call("Page.navigate", url=f"{stack.url}/plugin/elastic-training-runs")
    frame = FRAME_DOC.format(title="Elastic training runs")
    doc = f"{frame}.contentDocument"
    await tools.until(f"{frame} && {doc} && {doc}.body && {doc}.body.dataset.ready === 'true'", timeout=180)
    seen["listed"] = await tools.js(
        f"[...{doc}.querySelectorAll('#runs tbody tr')].map(r => [...r.cells].map(c => c.textContent))"
    )
    await shot(tools, out, "07-elastic-training-runs-list.png", seen)
    # The pretraining task's failure history (the plugin's page, opened as the run view's link opens it).
    await tools.call(
        "Page.navigate", url=f"{stack.url}/elastic-training/ui/history?dag_id={dag_id}&task_id=pretrain&runs=10"
    )
    await tools.until("!!document.querySelector('#pool-chart')", timeout=120)
    seen["history"] = await tools.js(
        "({runs: [...document.querySelectorAll('#history-runs tr.run')].map(r => r.dataset.runId),"
        " bars: document.querySelectorAll('#pool-chart rect.bar').length})"
    )
    await shot(tools, out, "08-failure-history.png", seen)


async def journeys(devtools_http: str, stack: Stack) -> dict[str, dict[str, Any]]:
    """Logged in, the nightly DAG triggered from its form, then the fault drill from its own while the nightly runs
    (the two DAGs train side by side: four slices, the cluster's four v5e-16 pools), both followed to their end,
    then each run's view read: what was seen, by DAG."""
    seen: dict[str, dict[str, Any]] = {NIGHTLY: {}, DRILL: {}}
    dag_id = NIGHTLY
    async with first_page(devtools_http) as tools:
        try:
            await log_in(tools, stack, NIGHTLY, OUTPUT / NIGHTLY, seen[NIGHTLY])
            for dag_id in (NIGHTLY, DRILL):
                seen[dag_id]["run_id"] = await trigger_from_the_form(
                    tools, stack, dag_id, OUTPUT / dag_id, seen[dag_id]
                )
            await follow_to_the_end(tools, stack, seen)
            for dag_id in (NIGHTLY, DRILL):
                await read_the_view(tools, stack, dag_id, seen[dag_id]["run_id"], OUTPUT / dag_id, seen[dag_id])
        except (TimeoutError, AssertionError) as error:
            picture = await tools.screenshot(OUTPUT / dag_id / "failure.png")
            where = await tools.js("location.href + '\\n' + document.body.innerText.slice(0, 1500)")
            raise AssertionError(f"{error}\nthe page ({picture}) shows: {where}\nseen so far: {seen}") from None
    for dag_id, each in seen.items():
        (OUTPUT / dag_id / "seen.json").write_text(json.dumps(each, indent=1))
    return seen


def percent(text: str | None) -> float:
    assert text and text.endswith("%"), text
    return float(text.rstrip(" %"))


def listed_pretrain(seen: dict[str, Any], dag_id: str) -> list[str]:
    rows = [r for r in seen["listed"] if r[0] == dag_id and r[1] == seen["run_id"]]
    assert len(rows) == 1, seen["listed"]
    assert rows[0][2] == "pretrain", rows
    return list(rows[0])


@pytest.fixture(scope="module")
def both(stack: Stack, browser: str) -> dict[str, dict[str, Any]]:
    return asyncio.run(journeys(browser, stack))


@pytest.fixture(scope="module")
def nightly(both: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return both[NIGHTLY]


@pytest.fixture(scope="module")
def drill(both: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return both[DRILL]


def test_nightly_logged_in_triggered_from_its_form_with_defaults_and_succeeded(nightly: dict[str, Any]) -> None:
    assert nightly["login_url"] == "/auth/login"
    assert {"Model and data", "Scale", "Resilience budgets"} <= set(nightly["form"]["sections"])
    assert nightly["run_state"] == "success", nightly["task_states"]
    assert nightly["task_states"]["pretrain"] == "success"


def test_nightly_view_shows_a_clean_run_with_non_zero_goodput(nightly: dict[str, Any]) -> None:
    tab = nightly["tab"]
    assert tab["page"].endswith("/plugin/elastic-training")  # the tab of the DAG run page
    assert tab["step"] == "79 / 79", tab
    assert percent(tab["goodput"]) > 0 and tab["step_time"] not in (None, "\u2013"), tab
    assert tab["note"].startswith("Trained 80 steps from scratch, with no failure"), tab
    assert tab["points"] >= 80, "the line is drawn from the trainer's steps, not between checkpoints"
    assert tab["failures"] == 0 and tab["rewinds"] == 0
    assert tab["checkpoints"] >= 2 and tab["valid"] == tab["checkpoints"]
    # Behind the form's default LocalQueue: the time queued (none to speak of on an idle cluster, but measured) and
    # where the rest went around the steps.
    assert re.fullmatch(r"[0-9.]+ (s|min|h)", tab["queued"] or ""), tab
    assert "admission to first step" in tab["capacity"] and "after the last step" in tab["capacity"], tab
    # The real scheduler and triggerer take seconds to resume the deferred task after the JobSet completed: said
    # apart, no chips held then (it once read as a 15 s tail and cut goodput by half).
    assert "then Airflow's resume of the task" in tab["capacity"], tab
    row = listed_pretrain(nightly, NIGHTLY)
    assert percent(row[8]) > 0, row  # the goodput column


def test_the_view_followed_pretraining_while_it_ran(nightly: dict[str, Any], drill: dict[str, Any]) -> None:
    live = nightly["live"] + drill["live"]
    assert live, "pretrain was never seen running or deferred"
    read = [entry for entry in live if entry["error"] is None]
    assert read, f"the head pod's log was never read: {live[-3:]}"
    assert any(entry["current_step"] is not None for entry in read), live


def test_fault_drill_view_shows_the_recovery_and_its_phases(drill: dict[str, Any]) -> None:
    assert drill["run_state"] == "success", drill["task_states"]
    tab = drill["tab"]
    assert {"phase phase-wait_for_slices", "phase phase-restore", "phase phase-first_step"} <= set(tab["phases"]), tab
    assert tab["failures"] == 1 and tab["rewinds"] == 1 and tab["recoveries"] == "1"
    assert tab["note"].startswith("Trained ") and "with 1 in-process recovery" in tab["note"], tab
    assert percent(tab["goodput"]) > 0, tab
    assert all(WAIT_START.fullmatch(start) for start in tab["wait_starts"]), tab
    row = listed_pretrain(drill, DRILL)
    assert row[6] == "1" and percent(row[8]) > 0, row  # recoveries, goodput
    assert drill["history"]["runs"] == [drill["run_id"]], drill["history"]  # the run joined its failure history
    assert all(Path(p).stat().st_size > 10_000 for p in drill["screenshots"])


CAPACITY_OUT = OUTPUT / "capacity"
CAPACITY_SHOT = "run-view-capacity.png"  # docs/images/run-view-capacity.png is a copy of it


def run_the_capacity_story(stack: Stack) -> str:
    """The stack's ``elastic_capacity_story`` DAG unpaused, triggered over REST and followed to success: its run id."""
    logged_in(stack, (CAPACITY,))
    status, answer = stack.call("PATCH", f"/api/v2/dags/{CAPACITY}", {"is_paused": False})
    assert status == 200, answer
    status, run = stack.call("POST", f"/api/v2/dags/{CAPACITY}/dagRuns", {"logical_date": None, "conf": {}})
    assert status == 200, run
    path = f"/api/v2/dags/{CAPACITY}/dagRuns/{quote(run['dag_run_id'], safe='')}"
    deadline = time.monotonic() + RUN_SECONDS
    while (state := stack.call("GET", path)[1]["state"]) != "success":
        assert state != "failed" and time.monotonic() < deadline, f"the capacity story's run is {state}"
        time.sleep(0.5)  # polls the REST API with the deadline above
    return str(run["dag_run_id"])


# What the tab shows of the timeline, its legend and the waits table, read in the frame as a person reads them; and
# how many pairs of span labels (and failure markers) overlap on the chart.
CAPACITY_JS = """(() => { const d = %s;
  const text = (s) => { const e = d.querySelector(s); return e ? e.textContent : null; };
  const all = (s) => [...d.querySelectorAll(s)];
  const boxes = all('#timeline text.span-label, #timeline .failure-marker').map((e) => e.getBoundingClientRect());
  let overlaps = 0;
  boxes.forEach((a, i) => boxes.slice(i + 1).forEach((b) => {
    // a pixel of slack: a label's lines are 13 px apart, their boxes as tall as the font's ascent and descent
    if (a.left + 1 < b.right && b.left + 1 < a.right && a.top + 1 < b.bottom && b.top + 1 < a.bottom) overlaps += 1;
  }));
  return {
    note: text('#training-note'), capacity: text('#capacity'),
    preemptions: text('#kpi-preemptions b'), evictions: text('#kpi-evictions b'), queued: text('#kpi-queued b'),
    spans: all('#timeline rect.span').map((r) => [r.getAttribute('class'), r.dataset.label, r.getAttribute('fill')]),
    labels: all('#timeline text.span-label').map((e) => e.textContent),
    markers: all('#timeline .failure-marker title').map((e) => e.textContent),
    legend: all('#timeline-legend .legend-span').map((e) => [e.dataset.kind, e.textContent]),
    waits: all('#waits tbody tr').map((r) => [...r.cells].map((c) => c.textContent)),
    retries: text('[data-budget="in-process retries"] text'),
    pods_ready: text('[data-budget="pods-ready evictions"] text'),
    overlaps };
})()"""


async def capacity_view(devtools_http: str, stack: Stack, run_id: str) -> dict[str, Any]:
    """The capacity story's Elastic training tab: what it reads, and its picture (the timeline and the waits)."""
    seen: dict[str, Any] = {}
    tab = f"{stack.url}/dags/{CAPACITY}/runs/{quote(run_id, safe='')}/plugin/elastic-training"
    frame = FRAME_DOC.format(title="Elastic training")
    doc = f"{frame}.contentDocument"
    ready = f"{frame} && {doc} && {doc}.body && {doc}.body.dataset.ready === 'true'"
    # tall enough for the tab's head, its timeline and the waits table in one picture
    async with first_page(devtools_http, height=1440) as tools:
        try:
            await tools.call("Page.navigate", url=tab)
            await tools.until(f"!!document.querySelector('input[name=username]') || ({ready})", timeout=180)
            if await tools.js("!!document.querySelector('input[name=username]')"):  # run alone: not signed in
                await log_in(tools, stack, CAPACITY, CAPACITY_OUT, seen)
                await tools.call("Page.navigate", url=tab)
            await tools.until(ready, timeout=180)
            seen.update(await tools.js(CAPACITY_JS % doc))
            await shot(tools, CAPACITY_OUT, CAPACITY_SHOT, seen)
        except (TimeoutError, AssertionError) as error:
            picture = await tools.screenshot(CAPACITY_OUT / "failure.png")
            where = await tools.js("location.href + '\\n' + document.body.innerText.slice(0, 1500)")
            raise AssertionError(f"{error}\nthe page ({picture}) shows: {where}\nseen so far: {seen}") from None
    (CAPACITY_OUT / "seen.json").write_text(json.dumps(seen, indent=1))
    return seen


def test_the_run_view_tells_quota_provisioning_and_each_eviction_apart(stack: Stack, browser: str) -> None:
    """Issue 38: the tab of a flex-start run queued for quota, provisioning, then preempted, evicted for a PodsReady
    timeout and evicted by a stopped ClusterQueue, each followed by provisioning again, names every wait.

    Real enough: the view reads stored data only (the ``elastic_run`` task-state entry and the report in XCom,
    plugin/runs.py), and what the stack's ``elastic_capacity_story`` task stores is what ``ElasticJobSetOperator``
    stores at its end, made by the operator's own code: Kueue's Workloads and the JobSet as kueue v0.17.1 writes them
    (the ones tests/operators/test_queueing.py and test_provisioning_wait.py check the local Kueue against), folded
    by ``MonitorState`` as the trigger folds them, saved by ``RunState.save`` to the real task state store, reported
    by ``run_report`` and returned as its XCom (tests/support/capacity_run.py). Only the training is not run: the
    cluster's part of such a run is tested in tests/operators/test_elastic_operator_kueue.py; here, what the page
    makes of it, through the real api-server, scheduler and a task of the real stack.
    """
    seen = asyncio.run(capacity_view(browser, stack, run_the_capacity_story(stack)))
    assert seen["note"] == "Trained 107 steps from scratch, with no failure of its own and 3 Kueue evictions.", seen
    assert (seen["preemptions"], seen["evictions"]) == ("1", "2"), seen
    assert seen["retries"] == "0", "a Kueue eviction is not one of MaxText's in-process retries"
    assert seen["pods_ready"] == "1 / 3", seen
    assert "of which provisioning 114.0 s" in seen["capacity"], seen["capacity"]
    assert "pods-ready timeout at step 59, 9 steps lost" in seen["capacity"], seen["capacity"]
    # The four provisionings' same words, said once with how often (they were four times over, stop 50).
    ready = "admission check dws-prov Ready: Capacity is found in the cluster"
    assert f"provisioning: {ready} (4 times)" in seen["capacity"], seen["capacity"]
    assert seen["capacity"].count(ready) == 1, seen["capacity"]
    # Each wait has a span of its own, named for what it was, and one colour per kind.
    kinds = [(cls.split()[-1], label) for cls, label, _ in seen["spans"]]
    assert kinds == [
        ("span-queued", "queued for quota"),
        ("span-preempted", "preemption"),
        ("span-evicted", "evicted: pods not ready in time (Kueue's waitForPodsReady)"),
        ("span-evicted", "evicted: its Kueue queue was stopped"),
        *[("span-provisioning", "provisioning (quota reserved, admission checks pending)")] * 4,
        ("span-tail", "after the last step"),
    ], kinds
    fills = {label: fill for _, label, fill in seen["spans"]}
    assert len(set(fills.values())) == len(fills), f"two kinds of wait share a colour: {fills}"
    assert [kind for kind, _ in seen["legend"]] == [
        "queued",
        "provisioning",
        "preempted",
        "evicted:pods_ready_timeout",
        "evicted:queue_stopped",
        "tail",
    ], seen["legend"]
    # On the chart: the waits' names where they fit, none over another or over a marker; each marker says its kind.
    drawn = " ".join(seen["labels"])  # a label too wide for its span is drawn on several lines
    for name in ("queued for quota", "provisioning", "preemption 70.0 s", "pods-ready timeout 60.0 s", "queue stopped"):
        assert name in drawn, seen["labels"]
    assert seen["overlaps"] == 0, seen["labels"]
    assert [m.split(" at step")[0] for m in seen["markers"]] == [
        "preemption",
        "evicted: pods not ready in time (Kueue's waitForPodsReady)",
        "evicted: its Kueue queue was stopped",
    ], seen["markers"]
    # The waits table: each wait, then the provisioning within it, with Kueue's own words.
    rows = [(row[1], row[-1]) for row in seen["waits"]]
    assert all(WAIT_START.fullmatch(row[2]) for row in seen["waits"]), seen["waits"]
    assert [name for name, _ in rows] == [
        "queued for quota",
        "└ provisioning",
        "preemption",
        "└ provisioning",
        "evicted: pods not ready in time (Kueue's waitForPodsReady)",
        "└ provisioning",
        "evicted: its Kueue queue was stopped",
        "└ provisioning",
    ], rows
    said = dict(rows[::2])
    assert said["preemption"].startswith("Preempted: Preempted to accommodate a workload"), said
    assert said["evicted: pods not ready in time (Kueue's waitForPodsReady)"].startswith(
        "PodsReadyTimeout: Exceeded the PodsReady timeout"
    ), said
    assert said["evicted: its Kueue queue was stopped"] == "ClusterQueueStopped: The ClusterQueue is stopped", said
    assert rows[1][1] == "admission check dws-prov Ready: Capacity is found in the cluster", rows
    assert Path(seen["screenshots"][0]).stat().st_size > 10_000


CONNECTION_FIELDS = [label for _, label, _ in FIELDS]  # Project, Location, Cluster, Namespace


async def connection_form(devtools_http: str, stack: Stack) -> dict[str, Any]:
    """Admin > Connections > Add Connection, type *GKE cluster (elastic training)* chosen as a person chooses it
    (typed into the type picker, Enter), its Extra Fields section opened: what the form shows."""
    out = OUTPUT / "connection-form"
    seen: dict[str, Any] = {}
    dialog = "document.querySelector('[role=dialog]')"
    async with first_page(devtools_http) as tools:
        try:
            await tools.call("Page.navigate", url=f"{stack.url}/connections")
            add = "[...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Add Connection')"
            await tools.until(f"!!document.querySelector('input[name=username]') || !!{add}", timeout=180)
            if await tools.js("!!document.querySelector('input[name=username]')"):  # not signed in yet
                await log_in(tools, stack, NIGHTLY, out, seen)
                await tools.call("Page.navigate", url=f"{stack.url}/connections")
            await tools.until(f"!!{add}", timeout=120)
            await click_until(tools, add, f"!!{dialog}", "Add Connection opened no form")
            await type_into(tools, "[role=dialog] input[name=connection_id]", "gke_tpu")
            picker = f"{dialog}.querySelector('input[aria-autocomplete=list]')"
            await tools.js(f"{picker}.focus()")
            await tools.call("Input.insertText", text="GKE cluster")
            option = "[...document.querySelectorAll('[role=option]')].find(o => o.innerText.includes('(elastic'))"
            await tools.until(f"!!{option}", timeout=30)
            for kind in ("keyDown", "keyUp"):
                await tools.call(
                    "Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13
                )
            sections = f"[...{dialog}.querySelectorAll('button[aria-expanded]')]"
            extra = f"{sections}.find(b => b.innerText.trim() === 'Extra Fields')"
            await tools.until(f"!!{extra}", timeout=60)
            seen["type"] = await tools.js(f"{dialog}.innerText.includes('GKE cluster (elastic training)')")
            seen["standard"] = await tools.js(
                f"[...{dialog}.querySelectorAll('label')].map(l => l.innerText.trim()).filter(Boolean)"
            )
            await open_section(tools, extra)
            await tools.settled(dialog)
            seen["labels"] = await tools.js(
                f"[...{dialog}.querySelectorAll('label')].map(l => l.innerText.trim()).filter(Boolean)"
            )
            seen["text"] = await tools.js(f"{dialog}.innerText")
            await tools.js(f"{extra}.scrollIntoView({{block: 'start', behavior: 'instant'}})")
            await shot(tools, out, "gke-connection-form.png", seen)
        except (TimeoutError, AssertionError) as error:
            picture = await tools.screenshot(out / "failure.png")
            where = await tools.js("location.href + '\\n' + document.body.innerText.slice(0, 1500)")
            raise AssertionError(f"{error}\nthe page ({picture}) shows: {where}\nseen so far: {seen}") from None
    (out / "seen.json").write_text(json.dumps(seen, indent=1))
    return seen


def test_the_gke_connection_form_shows_its_fields_with_their_labels(stack: Stack, browser: str) -> None:
    seen = asyncio.run(connection_form(browser, stack))
    assert seen["type"], seen
    # The standard fields the type hides (host, port, login, password, schema) are not in its form.
    assert not {"Host", "Port", "Login", "Password", "Schema"} & set(seen["standard"]), seen["standard"]
    labels = seen["labels"]
    assert [label for label in labels if label in CONNECTION_FIELDS] == CONNECTION_FIELDS, labels
    assert all(description in seen["text"] for _, _, description in FIELDS), seen["text"]  # each under its field
    assert all(Path(p).stat().st_size > 10_000 for p in seen["screenshots"])
