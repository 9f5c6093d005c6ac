"""The failure-history page: slice failures per node pool over a task's last runs, as a chart. Pure: no I/O.

Input is one of the task's :class:`operators.failure_history.FailureHistory` (read from its Airflow Variables by
:mod:`plugin.runs`), the task's other histories (a mapped instance's, a custom ``failure_history_key``) to link to,
and what the read left out (each record edited into something unsound is named, as the run report names it).
The page is one server-rendered HTML document with an inline SVG bar chart (one bar per node pool, stacked by
kind, no script and no new dependency), a table of the runs (each run's failures linked to the pool they happened
on, each run id linked to its run view) and one section per pool listing its failures.
Every text that came from the history is HTML-escaped: a Variable can be edited by anyone with access to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import quote

from elastic_training.operators.failure_history import (
    HEALTH_KINDS,
    FailureHistory,
    FailureKind,
    RunRecord,
    tally_pools,
)
from elastic_training.operators.history_store import split_record_run_id

KIND_COLOURS = {
    FailureKind.LOST_HOST: "#c0392b",
    FailureKind.TRAINER_ERROR: "#e67e22",
    FailureKind.EVICTION: "#2980b9",
    FailureKind.PREEMPTION: "#8e44ad",
    FailureKind.DELETED: "#7f8c8d",
}
KIND_ORDER = (
    FailureKind.LOST_HOST,
    FailureKind.TRAINER_ERROR,
    FailureKind.EVICTION,
    FailureKind.PREEMPTION,
    FailureKind.DELETED,
)
BAR_HEIGHT, BAR_GAP, LABEL_WIDTH, CHART_WIDTH = 22, 8, 170, 640
LEGEND_STEP = CHART_WIDTH // len(KIND_ORDER)  # a legend entry's width: its swatch and its kind's name


def history_json(history: FailureHistory, runs: int) -> dict[str, Any]:
    """The JSON the history API answers: the last ``runs`` runs, oldest first, and the per-pool tally."""
    looked_at = history.last(runs)
    return {
        "runs": [r.to_json() for r in looked_at],
        "pools": [t.to_json() for t in tally_pools(looked_at).values()],
        "kept_runs": len(history.runs),
    }


def pool_anchor(pool: str) -> str:
    """The page's fragment id for ``pool`` (pool names are DNS labels; anything else is quoted)."""
    return "pool-" + quote(pool, safe="")


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def chart_svg(runs: Sequence[RunRecord]) -> str:
    """Horizontal bars: each pool's failures over ``runs``, stacked by kind, with its count."""
    tallies = tally_pools(runs)
    pools = sorted(tallies, key=lambda p: (-sum(tallies[p].by_kind.values()), p))
    most = max((sum(t.by_kind.values()) for t in tallies.values()), default=0) or 1
    scale = (CHART_WIDTH - LABEL_WIDTH - 60) / most
    height = max(1, len(pools)) * (BAR_HEIGHT + BAR_GAP) + 30
    parts = [
        f'<svg id="pool-chart" xmlns="http://www.w3.org/2000/svg" width="{CHART_WIDTH}" height="{height}" '
        f'role="img" aria-label="slice failures per node pool over the last {len(runs)} runs">'
    ]
    if not pools:
        parts.append('<text x="0" y="20">no node pool in these runs</text>')
    for row, pool in enumerate(pools):
        y = row * (BAR_HEIGHT + BAR_GAP)
        tally = tallies[pool]
        parts.append(
            f'<a href="#{escape(pool_anchor(pool))}"><text x="{LABEL_WIDTH - 8}" y="{y + BAR_HEIGHT * 0.7:.1f}" '
            f'text-anchor="end">{escape(pool)}</text></a>'
        )
        x = float(LABEL_WIDTH)
        for kind in KIND_ORDER:
            count = tally.by_kind.get(kind.value, 0)
            if not count:
                continue
            width = count * scale
            parts.append(
                f'<rect class="bar {kind.value}" data-pool="{escape(pool)}" data-kind="{kind.value}" '
                f'data-count="{count}" x="{x:.1f}" y="{y}" width="{width:.1f}" height="{BAR_HEIGHT}" '
                f'fill="{KIND_COLOURS[kind]}"><title>{escape(pool)}: {count} {kind.value}</title></rect>'
            )
            x += width
        total = sum(tally.by_kind.values())
        parts.append(f'<text class="count" x="{x + 6:.1f}" y="{y + BAR_HEIGHT * 0.7:.1f}">{total}</text>')
    legend_y = height - 8
    for n, kind in enumerate(KIND_ORDER):  # from the left edge: five kinds in a row fit the chart's width
        x = n * LEGEND_STEP
        parts.append(f'<rect x="{x}" y="{legend_y - 10}" width="10" height="10" fill="{KIND_COLOURS[kind]}"/>')
        parts.append(f'<text x="{x + 14}" y="{legend_y}">{kind.value}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _keys_nav(key: str, keys: Mapping[str, str]) -> str:
    """The task's histories (its default key, its mapped instances', a custom ``failure_history_key``), linked."""
    if len(keys) <= 1:
        return (
            f'<p class="muted" id="history-key">History key <code>{escape(key)}</code> '
            f"(one Airflow Variable per run: <code>{escape(key)}.r.*</code>)</p>"
        )
    items = "".join(
        f'<li class="current"><code>{escape(k)}</code></li>'
        if k == key
        else f'<li><a href="{escape(url)}"><code>{escape(k)}</code></a></li>'
        for k, url in keys.items()
    )
    return f'<nav id="history-keys"><p class="muted">This task\'s failure histories:</p><ul>{items}</ul></nav>'


def _notes(notes: Sequence[str]) -> str:
    """What reading the history left out (a record edited by hand, a value that does not parse)."""
    if not notes:
        return ""
    return f'<ul id="history-notes" class="warning">{"".join(f"<li>{escape(n)}</li>" for n in notes)}</ul>'


def _run_link(run_url: Any, dag_id: str, recorded: str) -> str:
    """The run view of a recorded run: in a shared history the record names its own DAG (``<dag>/<task>/<run>``)."""
    own_dag, run_id = split_record_run_id(recorded)
    return str(run_url(own_dag or dag_id, run_id))


def _run_row(run: RunRecord, dag_id: str, run_url: Any) -> str:
    """One run's row of the runs table: its result, failures by pool, pools used and avoided, period, goodput."""
    failures = ", ".join(
        f'<a class="failure {f.kind.value}" href="#{escape(pool_anchor(f.pool))}">{escape(f.pool)}</a> ({f.kind.value})'
        if f.pool
        else f'<span class="failure {f.kind.value}">{f.kind.value}, no pool</span>'
        for f in run.failures
    )
    health = sum(1 for f in run.failures if f.kind in HEALTH_KINDS)
    return (
        f'<tr class="run" data-run-id="{escape(run.run_id)}">'
        f'<td><a href="{escape(_run_link(run_url, dag_id, run.run_id))}">{escape(run.run_id)}</a></td>'
        f"<td>{_when(run.ended_at)}</td>"
        f"<td>{'succeeded' if run.succeeded else 'failed'}</td>"
        f'<td class="num">{len(run.failures)}</td><td class="num">{health}</td>'
        f"<td>{failures or '—'}</td>"
        f"<td>{escape(', '.join(run.pools)) or '—'}</td>"
        f"<td>{escape(', '.join(run.avoided_pools)) or '—'}</td>"
        f'<td class="num">{run.checkpoint_period if run.checkpoint_period is not None else "—"}</td>'
        f'<td class="num">{"—" if run.goodput is None else f"{run.goodput:.1%}"}</td></tr>'
    )


def _pool_section(pool: str, looked_at: Sequence[RunRecord], dag_id: str, run_url: Any) -> str:
    """One node pool's section: each failure on it, when, on which hosts and slice, in which run."""
    items = [
        f"<li>{_when(f.at)}: {f.kind.value} on {escape(', '.join(f.hosts) or 'an unknown host')}, slice {f.slice}, "
        f'run <a href="{escape(_run_link(run_url, dag_id, r.run_id))}">{escape(r.run_id)}</a></li>'
        for r in looked_at
        for f in r.failures
        if f.pool == pool
    ]
    return (
        f'<section class="pool" id="{escape(pool_anchor(pool))}"><h3>{escape(pool)}</h3>'
        f"<ul>{''.join(items) or '<li>no failure</li>'}</ul></section>"
    )


def history_page(
    history: FailureHistory,
    *,
    dag_id: str,
    task_id: str,
    runs: int,
    run_url: Any,
    stylesheet: str,
    key: str = "",
    keys: Mapping[str, str] | None = None,
    notes: Sequence[str] = (),
) -> str:
    """The whole page. ``run_url(dag_id, run_id)`` gives a run view's URL; ``stylesheet`` the plugin's CSS URL;
    ``key`` the history shown, ``keys`` each of the task's histories with its page's URL, ``notes`` what the read
    left out."""
    looked_at = history.last(runs)
    title = f"Failure history: {dag_id} / {task_id}"
    rows = [_run_row(run, dag_id, run_url) for run in reversed(looked_at)]
    sections = [_pool_section(pool, looked_at, dag_id, run_url) for pool in sorted(tally_pools(looked_at))]
    table = (
        '<table id="history-runs"><thead><tr><th>run</th><th>ended</th><th>result</th><th class="num">failures</th>'
        '<th class="num">lost host / trainer</th><th>failures by pool</th><th>pools used</th><th>pools avoided</th>'
        '<th class="num">checkpoint period</th><th class="num">goodput</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    empty = "" if looked_at else '<p class="muted" id="no-history">No run of this task is in the history yet.</p>'
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f'<link rel="stylesheet" href="{escape(stylesheet)}"></head><body>'
        f"<h1>{escape(title)}</h1>{_keys_nav(key, keys or {key: ''}) if key else ''}{_notes(notes)}"
        f'<p class="muted">Slice failures per GKE node pool over the last {len(looked_at)} run(s) '
        f"(of {len(history.runs)} kept). Lost hosts and trainer errors count against a pool "
        "(avoid_failing_node_pools); evictions and preemptions are the platform's decisions, deletions a person's "
        "or a tool's (the fault drill's).</p>"
        f"{empty}<section>{chart_svg(looked_at)}</section>"
        f"<h2>Runs</h2>{table}<h2>Pools</h2>{''.join(sections)}</body></html>"
    )
