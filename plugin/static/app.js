// The "Elastic training" pages: plain DOM and SVG, no framework, no CDN. Every value from the API is
// written with textContent / setAttribute, never as HTML, so a log line or a run id cannot inject markup.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const PHASES = [
  ["wait_for_slices", "waiting for slices", "var(--wait)"],
  ["restore", "restore", "var(--restore)"],
  ["first_step", "first step", "var(--first)"],
];

// Set the attributes that have a value and append the children that are not null (text as text).
function filled(node, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function el(tag, attrs, ...children) {
  return filled(document.createElement(tag), attrs, children);
}

function svg(tag, attrs, ...children) {
  return filled(document.createElementNS(SVG, tag), attrs, children);
}

const fmt = {
  secs(s) {
    if (s === null || s === undefined) return "–";
    if (s < 120) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
    if (s < 7200) return `${(s / 60).toFixed(1)} min`;
    return `${(s / 3600).toFixed(1)} h`;
  },
  // a tick of an axis `range` seconds long, every tick in one unit
  axis(s, range) {
    if (range < 120) return `${s.toFixed(range < 30 ? 1 : 0)} s`;
    if (range < 7200) return `${(s / 60).toFixed(range < 600 ? 1 : 0)} min`;
    return `${(s / 3600).toFixed(1)} h`;
  },
  // a time from the chart's origin, signed: a wait that began before the first step read is "−0.33 s", not "+-0.33 s"
  offset(s) { return s <= -0.005 ? `−${fmt.secs(-s)}` : `+${fmt.secs(Math.max(s, 0))}`; },
  pct(x) { return x === null || x === undefined ? "–" : `${(100 * x).toFixed(1)} %`; },
  num(x) { return x === null || x === undefined ? "–" : String(x); },
  // "1 step lost", "9 steps lost", "– steps lost" (as operators/pipeline_report.py counted says it)
  counted(n, noun, plural) { return `${fmt.num(n)} ${n === 1 ? noun : plural || `${noun}s`}`; },
  money(x) { return x === null || x === undefined ? "–" : `$${x.toFixed(2)}`; },
  time(t) { return t ? new Date(t * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "–"; },
  bytes(b) {
    if (!b && b !== 0) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (b >= 1024 && i < units.length - 1) { b /= 1024; i += 1; }
    return `${b.toFixed(i ? 1 : 0)} ${units[i]}`;
  },
};

async function getJson(path) {
  const response = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (response.status === 401 || response.status === 403) {
    const error = new Error("Not logged in to Airflow, or no access to this DAG.");
    error.login = true;
    throw error;
  }
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (e) { /* not JSON */ }
    throw new Error(`${response.status}: ${typeof detail === "string" ? detail : JSON.stringify(detail)}`);
  }
  return response.json();
}

function showError(main, error) {
  main.replaceChildren(el("p", { class: "error" }, error.message));
  if (error.login) {
    main.append(el("p", {}, el("a", { href: "/", target: "_top" }, "Log in to Airflow")));
  }
}

function badge(state) {
  return el("span", { class: `badge ${state || ""}` }, state || "none");
}

// ---- the list of recent runs ---------------------------------------------------------------

async function indexPage(main) {
  const data = await getJson("../api/runs?limit=100");
  if (!data.runs.length) {
    main.replaceChildren(el("p", { class: "muted" }, "No elastic training runs yet."));
    return;
  }
  const rows = data.runs.map((r) => {
    const href = `run?dag_id=${encodeURIComponent(r.dag_id)}&run_id=${encodeURIComponent(r.run_id)}`;
    return el("tr", {},
      el("td", {}, r.dag_id),
      el("td", {}, el("a", { href }, r.run_id)),
      el("td", {}, r.task_id),
      el("td", {}, badge(r.state)),
      el("td", { class: "num" }, `${fmt.num(r.current_step)} / ${fmt.num(r.target_step)}`),
      el("td", { class: "num" }, fmt.num(r.slice_restarts)),
      el("td", { class: "num" }, fmt.num(r.recoveries)),
      el("td", { class: "num" }, fmt.num(r.full_restarts)),
      el("td", { class: "num" }, fmt.pct(r.goodput)),
      el("td", {}, r.start_date ? r.start_date.replace("T", " ").slice(0, 19) : "–"));
  });
  main.replaceChildren(el("table", { id: "runs" },
    el("thead", {}, el("tr", {}, ["DAG", "run", "task", "state", "step", "slice restarts", "recoveries",
      "full restarts", "goodput", "started"].map((h, i) => el("th", { class: i >= 4 && i <= 8 ? "num" : null }, h)))),
    el("tbody", {}, rows)));
}

// ---- one run ---------------------------------------------------------------------------------

const ACTIVE = new Set(["running", "deferred", "queued", "scheduled", "up_for_retry", "restarting"]);
const REFRESH_MS = 10000;

async function runPage(main) {
  const params = new URLSearchParams(window.location.search);
  const dag = params.get("dag_id");
  const run = params.get("run_id");
  if (!dag || !run) {
    main.replaceChildren(el("p", { class: "error" }, "Open this page from a DAG run (dag_id and run_id are missing)."));
    return;
  }
  let data;
  try {
    data = await getJson(`../api/runs/${encodeURIComponent(dag)}/${encodeURIComponent(run)}`);
  } catch (error) {
    if (/^404/.test(error.message)) {
      main.replaceChildren(el("p", { class: "muted" }, "This DAG run has no elastic training task."));
      return;
    }
    throw error;
  }
  const tasks = data.tasks;
  const selected = main.querySelector(".tabs button.on");
  const keep = selected ? selected.textContent : null;
  const body = el("div", {});
  if (tasks.length > 1) {
    const tabs = el("div", { class: "tabs" });
    tasks.forEach((task, i) => {
      const label = task.map_index >= 0 ? `${task.task_id}[${task.map_index}]` : task.task_id;
      const button = el("button", { type: "button", class: i === 0 ? "on" : null }, label);
      button.addEventListener("click", () => {
        tabs.querySelectorAll("button").forEach((b) => b.classList.remove("on"));
        button.classList.add("on");
        body.replaceChildren(taskView(task));
      });
      tabs.append(button);
    });
    main.replaceChildren(tabs, body);
  } else {
    main.replaceChildren(body);
  }
  const labels = tasks.map((task) => (task.map_index >= 0 ? `${task.task_id}[${task.map_index}]` : task.task_id));
  const shown = Math.max(0, labels.indexOf(keep));
  if (tasks.length > 1) {
    main.querySelectorAll(".tabs button").forEach((b, i) => b.classList.toggle("on", i === shown));
  }
  body.replaceChildren(taskView(tasks[shown]));
  // While training runs, the page follows it (the API folds the head pod's recent log into each answer).
  if (data.dag_run_state === "running" || tasks.some((task) => ACTIVE.has(task.state))) {
    document.body.dataset.live = "true";
    setTimeout(() => runPage(main).catch((error) => showError(main, error)), REFRESH_MS);
  } else {
    document.body.dataset.live = "false";
  }
}

function kpi(label, value, id) {
  return el("div", { class: "kpi", id }, el("b", {}, value), el("span", {}, label));
}

// The history this run read and wrote (its report's history_key: a mapped instance's, a custom one), else the task's.
function historyUrl(t) {
  const key = t.history && t.history.key ? `&key=${encodeURIComponent(t.history.key)}` : "";
  return `history?dag_id=${encodeURIComponent(t.dag_id)}&task_id=${encodeURIComponent(t.task_id)}${key}`;
}

function taskView(t) {
  const g = t.goodput || {};
  const c = t.capacity || {};
  const p = t.progress || {};
  const head = el("div", { class: "head" },
    el("div", {}, el("h1", {}, `${t.task_id} `, badge(t.state)),
      el("div", { class: "muted" }, "JobSet ", el("code", {}, t.jobset.name || "–"),
        t.jobset.incarnations && t.jobset.incarnations.length > 1 ? ` (${t.jobset.incarnations.length} incarnations)` : "",
        t.jobset.namespace ? ` in ${t.jobset.namespace}` : "",
        t.slices.configured ? ` · ${t.slices.configured} slices` : "",
        t.slices.live !== null && t.slices.live !== undefined ? ` (${t.slices.live} live)` : "",
        " · ", el("a", { id: "history-link", href: historyUrl(t) }, "failure history"))),
    kpi("step / target", `${fmt.num(p.current_step)} / ${fmt.num(p.target_step)}`, "kpi-step"),
    kpi("goodput", fmt.pct(g.goodput), "kpi-goodput"),
    kpi("queued", fmt.secs(c.queued_seconds), "kpi-queued"),
    kpi("mean step time", fmt.secs(g.mean_step_seconds), "kpi-step-time"),
    kpi("recoveries", fmt.num(t.counts.recoveries), "kpi-recoveries"),
    kpi("preemptions", fmt.num(t.counts.preemptions), "kpi-preemptions"),
    t.counts.evictions > t.counts.preemptions ? kpi("other evictions", fmt.num(t.counts.evictions - t.counts.preemptions), "kpi-evictions") : null,
    kpi("full restarts", fmt.num(t.counts.full_restarts), "kpi-full"),
    kpi("steps lost", fmt.num(t.counts.steps_lost), "kpi-lost"),
    kpi("chip time lost", fmt.secs(g.chip_seconds_lost), "kpi-chip"),
    kpi("cost of failures", fmt.money(g.cost_lost), "kpi-cost"));
  const parts = [head];
  if (t.training && t.training.note) {
    parts.push(el("p", { id: "training-note", class: `training ${t.training.kind}` }, t.training.note));
  }
  const phase = capacityNote(c);
  if (phase) parts.push(phase);
  if (t.live) parts.push(livePanel(t.live));
  if (t.failure) parts.push(el("div", { class: "failure" }, t.failure));
  if (t.history && t.history.notes && t.history.notes.length) {
    parts.push(el("ul", { id: "history-notes", class: "warning" }, ...t.history.notes.map((n) => el("li", {}, n))));
  }
  if (!t.report_available) {
    parts.push(el("p", { class: "muted" }, "The run has not finished: recoveries and budgets are read from the task state store; cost, goodput and advice come with the run report."));
  }
  parts.push(el("div", { class: "grid" },
    el("section", { class: "panel span12", id: "timeline" }, el("h2", {}, "Steps over time"), timelineChart(t)),
    waitsTable(t),
    el("section", { class: "panel span7", id: "recoveries" }, el("h2", {}, "Recoveries"), recoveryBars(t.recoveries)),
    el("section", { class: "panel span5", id: "budgets" }, el("h2", {}, "Budgets"), budgetGauges(t.budgets)),
    el("section", { class: "panel span7", id: "checkpoints" }, el("h2", {}, "Checkpoints"), checkpointTable(t.checkpoints)),
    el("section", { class: "panel span5", id: "advice" }, el("h2", {}, "Goodput, cost and checkpoint period"), advicePanel(t)),
    planPanel(t.plan),
    t.escalations.length ? el("section", { class: "panel span12", id: "escalations" }, el("h2", {}, "Full restarts"), escalationTable(t.escalations)) : null));
  return el("div", {}, parts);
}

// Where the run stands and where its time went around its steps: the queue is not training badput.
function capacityNote(c) {
  const words = { queued: "Queued by Kueue, waiting for admission", starting: "Admitted; pods starting (scheduling, nodes, images)",
    training: "Training", recovering: "Recovering in process (waiting for slices, restoring)",
    preempted: "Preempted by Kueue; waiting to be admitted again", not_queued: "Suspended and in no Kueue queue: nothing will admit it",
    provisioning: "Quota reserved; waiting for capacity to be provisioned (Kueue admission checks)",
    evicted: "Evicted by Kueue (not a preemption); waiting to be admitted again", deactivated: "Kueue deactivated its Workload: nothing will admit it" };
  const bits = [];
  if (c.phase && words[c.phase]) bits.push(el("b", { id: "run-phase", class: `phase ${c.phase}` }, words[c.phase]));
  if (c.queue_reason && ["queued", "preempted", "evicted", "deactivated", "not_queued", "provisioning"].includes(c.phase)) bits.push(` (Kueue: ${c.queue_reason})`);
  const times = [];
  if (c.queued_seconds) times.push(`queued ${fmt.secs(c.queued_seconds)}`);
  if (c.provisioning_seconds) times.push(`of which provisioning ${fmt.secs(c.provisioning_seconds)}`);
  if (c.admission_to_first_step_seconds !== null && c.admission_to_first_step_seconds !== undefined) times.push(`admission to first step ${fmt.secs(c.admission_to_first_step_seconds)}`);
  if (c.training_seconds) times.push(`training ${fmt.secs(c.training_seconds)}`);
  if (c.tail_seconds) times.push(`after the last step ${fmt.secs(c.tail_seconds)}`);
  if (c.resume_seconds) times.push(`then Airflow's resume of the task ${fmt.secs(c.resume_seconds)} (no chips held, outside goodput)`);
  const all = c.preemptions || [];
  const pre = all.filter((p) => !p.eviction || p.eviction === "preempted"), other = all.filter((p) => p.eviction && p.eviction !== "preempted");
  if (pre.length) times.push(`${fmt.counted(pre.length, "preemption")} (${pre.map((p) => `at step ${fmt.num(p.step)}, ${fmt.counted(p.steps_lost, "step")} lost`).join("; ")})`);
  if (other.length) times.push(`${fmt.counted(other.length, "other eviction")} (${other.map((p) => `${p.short || p.eviction.replaceAll("_", " ")} at step ${fmt.num(p.step)}, ${fmt.counted(p.steps_lost, "step")} lost`).join("; ")})`);
  // Each admission check outcome (provisioned, retried, rejected, revoked), the same words said once with how often:
  // a run provisioned again after each eviction would repeat them (the waits table below places each).
  const said = new Map();
  for (const n of c.provisioning_notes || []) said.set(n[1], (said.get(n[1]) || 0) + 1);
  if (said.size) times.push(`provisioning: ${[...said].map(([words, n]) => (n > 1 ? `${words} (${n} times)` : words)).join("; ")}`);
  if (!bits.length && !times.length) return null;
  if (times.length) bits.push(`${bits.length ? " · " : ""}${times.join(" · ")}`);
  return el("p", { id: "capacity", class: "capacity" }, ...bits);
}

function livePanel(live) {
  if (live.error) {
    return el("p", { id: "live", class: "muted" }, `Live: the head pod's log could not be read (${live.error}); showing what was saved when the task deferred.`);
  }
  const recovering = live.recovering ? " · recovering now" : "";
  const partial = live.complete ? "" : " (older lines are past the log tail: earlier recoveries come with the run report)";
  return el("p", { id: "live", class: "live" },
    el("b", {}, "Live "), `from ${live.pod || "the head pod"} at ${fmt.time(live.read_at)}: step `,
    el("b", { id: "live-step" }, fmt.num(live.current_step)),
    `, ${fmt.num(live.live_slices)} live slices, `,
    el("b", { id: "live-recoveries" }, fmt.num(live.recoveries_so_far)),
    ` recover${live.recoveries_so_far === 1 ? "y" : "ies"} so far${recovering}${partial}.`);
}

function timelineChart(t) {
  const tl = t.timeline || { points: [], failures: [], rewinds: [] };
  const pts = tl.points;
  if (t.training && t.training.kind === "nothing") {
    return el("p", { class: "muted", id: "no-steps" }, `${t.training.note} No step was run, so there is no line to draw.`);
  }
  if (pts.length < 2) return el("p", { class: "muted" }, "Not enough timestamped facts yet.");
  // As wide as the panel will be (the page's width less its margins), so that the text is drawn at its own size
  // in the Airflow tab's narrower frame too, not scaled down with a wider drawing.
  const W = Math.round(Math.min(1100, Math.max(640, (window.innerWidth || 1100) - 60))), H = 230, L = 48, R = 12, T = 10, B = 28;
  const t0 = pts[0][0];
  const t1 = Math.max(...pts.map((q) => q[0]), t0 + 1);
  const sMax = Math.max(1, p_target(t), ...pts.map((q) => q[1]));
  const x = (v) => L + ((v - t0) / (t1 - t0)) * (W - L - R);
  const y = (s) => T + (1 - (Math.max(s, 0) / sMax)) * (H - T - B);
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", "aria-label": "steps over time" });
  for (let i = 0; i <= 4; i += 1) {
    const s = Math.round((sMax * i) / 4);
    chart.append(svg("line", { x1: L, x2: W - R, y1: y(s), y2: y(s), stroke: "#e2e8f0" }),
      svg("text", { x: L - 6, y: y(s) + 4, "text-anchor": "end" }, String(s)));
  }
  for (let i = 0; i <= 5; i += 1) {
    const v = t0 + ((t1 - t0) * i) / 5;
    chart.append(svg("text", { x: x(v), y: H - 8, "text-anchor": i === 0 ? "start" : i === 5 ? "end" : "middle" }, `+${fmt.axis(v - t0, t1 - t0)}`));
  }
  if (p_target(t) > 0) {
    chart.append(svg("line", { x1: L, x2: W - R, y1: y(p_target(t)), y2: y(p_target(t)), stroke: "#a0aec0", "stroke-dasharray": "4 4" }),
      svg("text", { x: W - R, y: y(p_target(t)) - 4, "text-anchor": "end" }, "target"));
  }
  // Before the first step: the pods and the trainer start, then the first step compiles. Label the span as that.
  const su = t.startup;
  if (su && su.seconds > 0 && su.seconds / (t1 - t0) > 0.15) {
    const end = Math.min(t0 + su.seconds, t1);
    const parts = `pods and trainer ${fmt.secs(su.before_first_step_seconds)}, first step (compile) ${fmt.secs(su.first_step_seconds)}`;
    // centred on the span, but never past the chart's edges (12 px text: about 6.8 px a character)
    const half = (parts.length * 6.8) / 2, mid = Math.min(Math.max((x(t0) + x(end)) / 2, L + half), W - R - half);
    chart.append(svg("rect", { x: x(t0), y: T, width: Math.max(0, x(end) - x(t0)), height: H - T - B, fill: "#edf2f7", "fill-opacity": 0.7, class: "startup" }),
      svg("text", { x: mid, y: y(0) - 22, "text-anchor": "middle", class: "startup-label" },
        `start-up ${fmt.secs(su.seconds)}`),
      svg("text", { x: mid, y: y(0) - 8, "text-anchor": "middle", class: "startup-label" }, parts));
  }
  // Queue waits (for quota, after each eviction, named by its kind), the provisioning within them and the tail after
  // the last step: spans of their own, not training. A wait's name goes at the top of its part before provisioning,
  // provisioning's at the bottom, each only where it fits (the legend and the waits table name every one).
  for (const sp of tl.spans || []) {
    const fill = spanFill(sp);
    const a = x(Math.max(sp.from, t0)), b = x(Math.min(sp.to, t1));
    if (b <= a) continue;
    const why = sp.kind === "tail" ? " (final save, shutdown, until the JobSet completed)"
      : sp.kind === "resume" ? " (after the JobSet's end: the trigger, the scheduler and a worker; no chips held)" : "";
    const said = [sp.reason, ...(sp.said || [])].filter(Boolean).join("; ");
    chart.append(svg("rect", { x: a, y: T, width: b - a, height: H - T - B, fill, "fill-opacity": 0.8, class: `span span-${sp.kind}`, "data-label": spanName(sp) },
      svg("title", {}, `${spanName(sp)} ${fmt.secs(sp.seconds)}${why}${said ? ` (Kueue: ${said})` : ""}`)));
  }
  for (const sp of tl.spans || []) {
    const a = x(Math.max(sp.from, t0)), b = x(Math.min(sp.to, t1));
    if (b <= a) continue;
    const lines = [...wrapped(sp.label || sp.kind, 0), fmt.secs(sp.seconds)];
    if (sp.kind === "provisioning") {
      if (fits(lines, b - a)) lines.forEach((line, i) => chart.append(svg("text", { x: (a + b) / 2, y: H - B - 8 - 13 * (lines.length - 1 - i), "text-anchor": "middle", class: "span-label span-label-provisioning" }, line)));
      continue;
    }
    // the wait's own part: before the first provisioning within it
    const inner = (tl.spans || []).filter((q) => q.kind === "provisioning" && q.from >= sp.from && q.from < sp.to);
    const own = inner.length ? Math.max(a, x(Math.min(...inner.map((q) => q.from)))) : b;
    const [left, right] = own - a >= 24 || (sp.step || 0) > 0.55 * sMax ? [a, own] : [a, b];
    // queued for quota: its own part (the provisioning after it has its label); an eviction: the whole wait it caused
    const seconds = sp.kind === "queued" ? sp.seconds - (sp.provisioning_seconds || 0) : sp.seconds;
    const words = [...wrapped(sp.label || sp.kind, right - left - 4), fmt.secs(seconds)];
    if (!fits(words, right - left)) continue;
    // at the top, unless the line runs there during the wait (it holds the step the eviction stopped at)
    const low = (sp.step || 0) > 0.55 * sMax;
    words.forEach((line, i) => chart.append(svg("text", { x: (left + right) / 2, y: low ? H - B - 8 - 13 * (words.length - 1 - i) : T + 14 + 13 * i, "text-anchor": "middle", class: "span-label" }, line)));
  }
  chart.append(svg("polyline", { points: pts.map((q) => `${x(q[0])},${y(q[1])}`).join(" "), fill: "none", stroke: "#2b6cb0", "stroke-width": 2 }));
  for (const c of (t.checkpoints && t.checkpoints.steps) || []) {
    if (c.committed_at && c.committed_at >= t0 && c.committed_at <= t1) {
      chart.append(svg("circle", { cx: x(c.committed_at), cy: y(c.step), r: 3.5, fill: c.valid ? "var(--ok)" : "var(--bad)", class: "ckpt-marker" },
        svg("title", {}, `checkpoint ${c.step}: ${c.valid ? "valid" : "invalid"}`)));
    }
  }
  for (const r of tl.rewinds) {
    if (r.from_step === null || r.from_step === undefined) continue;
    chart.append(svg("line", { x1: x(r.t), x2: x(r.t), y1: y(r.from_step), y2: y(r.to_step), stroke: "var(--bad)", "stroke-width": 2, "stroke-dasharray": "3 2", class: "rewind" },
      svg("title", {}, `rewind ${r.from_step} → ${r.to_step}`)));
  }
  for (const f of tl.failures) {
    const cx = x(f.t), cy = y(f.step === null || f.step === undefined ? 0 : f.step);
    chart.append(svg("path", { d: `M${cx - 6},${cy - 12} L${cx + 6},${cy - 12} L${cx},${cy - 2} Z`, fill: "var(--bad)", class: "failure-marker" },
      svg("title", {}, `${f.kind} at step ${fmt.num(f.step)}, ${fmt.time(f.t)}`)));
  }
  const evicted = (tl.spans || []).some((sp) => sp.kind === "preempted" || sp.kind === "evicted");
  const legend = el("div", { class: "legend", id: "timeline-legend" },
    el("span", {}, el("i", { style: "background:#2b6cb0" }), tl.source === "checkpoints" ? "step at each checkpoint commit (no step was read from the trainer's log)" : "step, from the trainer's log"),
    el("span", {}, el("i", { style: "background:var(--bad)" }), evicted ? "failure or eviction ▼ and rewind ┆" : "failure ▼ and rewind ┆"),
    el("span", {}, el("i", { style: "background:var(--ok)" }), "committed checkpoint"),
    spanLegend(tl.spans || []));
  return el("div", {}, chart, legend);
}

// Each wait's colour: quota, provisioning, and each kind of eviction apart (a preemption is not a PodsReady timeout).
const SPAN_FILLS = { queued: "#fefcbf", provisioning: "#c6f6d5", preempted: "#feebc8", tail: "#e2e8f0", resume: "#e6f0fa" };
const EVICTION_FILLS = { pods_ready_timeout: "#fed7d7", queue_stopped: "#e9d8fd", admission_check: "#bee3f8",
  node_failures: "#fbb6ce", deactivated: "#cbd5e0", requeuing_limit_exceeded: "#cbd5e0", other: "#fed7e2" };
function spanFill(sp) {
  if (sp.kind === "evicted") return EVICTION_FILLS[sp.eviction_kind] || EVICTION_FILLS.other;
  return SPAN_FILLS[sp.kind] || "#edf2f7";
}

// What a span is, in the legend's and the tooltip's words.
function spanName(sp) {
  if (sp.kind === "queued") return "queued for quota";
  if (sp.kind === "provisioning") return "provisioning (quota reserved, admission checks pending)";
  if (sp.kind === "tail") return "after the last step";
  if (sp.kind === "resume") return "Airflow resuming the task (no chips held)";
  return sp.eviction || sp.label || sp.kind;
}

function spanLegend(spans) {
  const order = ["queued", "provisioning", "preempted", "evicted", "tail", "resume"];
  const seen = new Map();
  for (const sp of [...spans].sort((p, q) => order.indexOf(p.kind) - order.indexOf(q.kind))) {
    const key = sp.kind === "evicted" ? `evicted:${sp.eviction_kind}` : sp.kind;
    if (!seen.has(key)) seen.set(key, el("span", { class: "legend-span", "data-kind": key }, el("i", { style: `background:${spanFill(sp)}` }), spanName(sp)));
  }
  return [...seen.values()];
}

// A label's words, in lines of at most `width` px (11 px text: about 6.2 px a character); width 0: one line.
function wrapped(text, width) {
  if (!width) return [text];
  const lines = [];
  for (const word of text.split(" ")) {
    const last = lines.length ? lines[lines.length - 1] : null;
    if (last !== null && (last.length + 1 + word.length) * 6.2 <= width) lines[lines.length - 1] = `${last} ${word}`;
    else lines.push(word);
  }
  return lines;
}

function fits(lines, width) { return lines.every((line) => line.length * 6.2 <= width - 4); }

// Every wait for Kueue, in order: what it was (quota, or the eviction that caused it), when, how long, the
// provisioning within it, the steps it cost and what Kueue said.
function waitsTable(t) {
  const spans = (t.timeline && t.timeline.spans) || [];
  const waits = spans.filter((sp) => ["queued", "preempted", "evicted"].includes(sp.kind));
  if (!waits.length) return null;
  const t0 = (t.timeline.points[0] || [waits[0].from])[0];
  const rows = [];
  waits.forEach((w, i) => {
    rows.push(el("tr", { class: `wait wait-${w.kind}` }, el("td", {}, String(i + 1)),
      el("td", {}, el("i", { class: "swatch", style: `background:${spanFill(w)}` }), spanName(w)),
      el("td", { class: "num" }, fmt.offset(w.from - t0)), el("td", { class: "num" }, fmt.secs(w.seconds)),
      el("td", { class: "num" }, w.step === undefined ? "–" : fmt.num(w.step)), el("td", { class: "num" }, w.steps_lost === undefined ? "–" : fmt.num(w.steps_lost)),
      el("td", {}, w.reason || "–")));
    for (const p of spans.filter((q) => q.kind === "provisioning" && q.from >= w.from && q.from < w.to)) {
      rows.push(el("tr", { class: "wait wait-provisioning" }, el("td", {}, ""),
        el("td", {}, "└ ", el("i", { class: "swatch", style: `background:${spanFill(p)}` }), el("span", { title: "quota reserved, admission checks pending" }, "provisioning")),
        el("td", { class: "num" }, fmt.offset(p.from - t0)), el("td", { class: "num" }, fmt.secs(p.seconds)),
        el("td", {}, ""), el("td", {}, ""),
        el("td", {}, (p.said || []).join("; ") || "–")));
    }
  });
  return el("section", { class: "panel span12", id: "waits" }, el("h2", {}, "Waits for capacity"),
    el("table", {}, el("thead", {}, el("tr", {}, ["#", "wait", "from", "waited", "at step", "steps lost", "Kueue said"].map((h, i) => el("th", { class: i >= 2 && i <= 5 ? "num" : null, title: h === "waited" ? "the whole wait, the provisioning within it included" : null }, h)))),
      el("tbody", {}, rows)));
}

function p_target(t) { return (t.progress && t.progress.target_step) || 0; }

function recoveryBars(recoveries) {
  if (!recoveries.length) return el("p", { class: "muted" }, "No in-process recovery.");
  const W = 640, rowH = 26, L = 110, R = 210;
  const longest = Math.max(1e-6, ...recoveries.map((r) => PHASES.reduce((s, [k]) => s + ((r.phase_seconds || {})[k] || 0), 0)));
  const chart = svg("svg", { viewBox: `0 0 ${W} ${rowH * recoveries.length + 4}`, width: "100%", role: "img", "aria-label": "recovery phases" });
  recoveries.forEach((r, i) => {
    const yy = i * rowH + 2;
    chart.append(svg("text", { x: 0, y: yy + 15 }, `#${i + 1} step ${fmt.num(r.failed_step)}→${fmt.num(r.restored_step)}`));
    let xx = L;
    for (const [key, label, color] of PHASES) {
      const s = (r.phase_seconds || {})[key];
      if (s === null || s === undefined) continue;  // a phase measured at 0 s (a tiny restore) is drawn thin: it happened
      const w = (s / longest) * (W - L - R);
      chart.append(svg("rect", { x: xx, y: yy + 3, width: Math.max(w, 1.5), height: rowH - 8, fill: color, class: `phase phase-${key}` },
        svg("title", {}, `${label}: ${fmt.secs(s)}`)));
      xx += w;
    }
    const total = (r.phase_seconds || {}).total;
    const tail = r.complete ? `${fmt.secs(total)} · ${fmt.counted(r.steps_lost, "step")} lost${r.cost !== null && r.cost !== undefined ? ` · ${fmt.money(r.cost)}` : ""}` : "in progress";
    chart.append(svg("text", { x: xx + 6, y: yy + 15 }, tail));
  });
  const legend = el("div", { class: "legend" }, PHASES.map(([, label, color]) => el("span", {}, el("i", { style: `background:${color}` }), label)));
  const table = el("table", {}, el("thead", {}, el("tr", {}, ["#", "slices", "failed", "restored", "waiting for slices", "restore", "first step", "total", "steps lost", "chip time", "cost"].map((h) => el("th", {}, h)))),
    el("tbody", {}, recoveries.map((r, i) => el("tr", {}, el("td", {}, String(i + 1)), el("td", {}, fmt.num(r.slices)),
      el("td", r.interrupted_save ? { title: "it came while a save was written: the restore went to an older step" } : {},
        fmt.num(r.failed_step) + (r.interrupted_save ? " (during a save)" : "")), el("td", {}, fmt.num(r.restored_step)),
      ...["wait_for_slices", "restore", "first_step", "total"].map((k) => el("td", { class: "num" }, fmt.secs((r.phase_seconds || {})[k]))),
      el("td", { class: "num" }, fmt.num(r.steps_lost)), el("td", { class: "num" }, fmt.secs(r.chip_seconds_lost)), el("td", { class: "num" }, fmt.money(r.cost))))));
  return el("div", {}, chart, legend, table);
}

function budgetGauges(budgets) {
  return el("div", { class: "gauges" }, budgets.map((b) => {
    const used = b.used || 0;
    const frac = b.allowed ? Math.min(1, used / b.allowed) : (b.allowed === 0 ? (used > 0 ? 1 : 0) : 0);
    const over = b.allowed !== null && b.allowed !== undefined && used > b.allowed;
    const color = over || frac >= 1 ? "var(--bad)" : frac >= 0.66 ? "var(--warn)" : "var(--ok)";
    const r = 36, cx = 50, cy = 46;
    const arc = (f) => {
      const a = Math.PI * (1 - f);
      return `${cx + r * Math.cos(a)},${cy - r * Math.sin(a)}`;
    };
    const g = svg("svg", { viewBox: "0 0 100 56", width: "120", height: "68" },
      svg("path", { d: `M${arc(0)} A${r},${r} 0 0 1 ${arc(1)}`, fill: "none", stroke: "#e2e8f0", "stroke-width": 9 }),
      frac > 0 ? svg("path", { d: `M${arc(0)} A${r},${r} 0 0 1 ${arc(frac)}`, fill: "none", stroke: color, "stroke-width": 9 }) : null,
      svg("text", { x: cx, y: cy - 2, "text-anchor": "middle", style: "font-size:14px;font-weight:600;fill:#1a202c" },
        b.allowed === null || b.allowed === undefined ? String(used) : `${used} / ${b.allowed}`));
    return el("div", { class: "gauge", "data-budget": b.name }, g, el("div", { class: "name" }, b.name), el("div", { class: "detail" }, b.detail || ""));
  }));
}

function checkpointTable(ck) {
  if (!ck) return el("p", { class: "muted" }, "The run directory is not known.");
  const parts = [el("div", { class: "muted" }, el("code", {}, ck.path))];
  if (ck.error) parts.push(el("p", { class: "error" }, ck.error));
  if (!ck.steps.length) {
    parts.push(el("p", { class: "muted" }, "No checkpoint steps."));
    return el("div", {}, parts);
  }
  parts.push(el("table", {}, el("thead", {}, el("tr", {}, ["step", "verdict", "committed", "save time", "size"].map((h) => el("th", {}, h)))),
    el("tbody", {}, [...ck.steps].reverse().map((c) => el("tr", { class: "ckpt" },
      el("td", {}, String(c.step)),
      el("td", {}, c.valid ? el("span", { class: "valid" }, "valid") : el("span", { class: "invalid", title: c.problems.map((p) => `${p.problem || p.code || ""}: ${p.detail || p.message || ""}`).join("\n") }, `invalid (${c.problems.map((p) => p.problem || p.code || "?").join(", ")})`)),
      el("td", {}, fmt.time(c.committed_at)), el("td", { class: "num" }, fmt.secs(c.save_seconds)), el("td", { class: "num" }, fmt.bytes(c.bytes)))))));
  if (ck.ignored && ck.ignored.length) {
    parts.push(el("p", { class: "muted" }, `Set aside: ${ck.ignored.map((i) => `${i.name || i.path} (${i.reason})`).join(", ")}`));
  }
  return el("div", {}, parts);
}

function advicePanel(t) {
  const g = t.goodput || {};
  const rows = [
    ["goodput", fmt.pct(g.goodput)],
    [(t.capacity || {}).resume_seconds != null ? "wall time (to the JobSet's end)" : "wall time", fmt.secs(g.wall_seconds)],
    ["mean step time", fmt.secs(g.mean_step_seconds)],
    ["chips", fmt.num(g.chips)],
    ["chip time lost", fmt.secs(g.chip_seconds_lost)],
    ["cost of failures", `${fmt.money(g.cost_lost)}${g.price_per_chip_hour ? ` at $${g.price_per_chip_hour}/chip-hour` : ""}`],
  ];
  const parts = [el("table", {}, el("tbody", {}, rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", { class: "num" }, v)))))];
  const a = t.advice;
  if (!a) {
    parts.push(el("p", { class: "muted" }, "No checkpoint-period advice: it needs the run report's step time and a measured checkpoint save time."));
    return el("div", {}, parts);
  }
  parts.push(el("h2", { style: "margin-top:10px" }, "Checkpoint period"),
    el("table", { id: "advice-table" }, el("thead", {}, el("tr", {}, el("th", {}, ""), el("th", { class: "num" }, "period (steps)"), el("th", { class: "num" }, "expected goodput"))),
      el("tbody", {},
        el("tr", {}, el("th", {}, "configured"), el("td", { class: "num" }, String(a.configured_period)), el("td", { class: "num" }, fmt.pct(a.configured_goodput))),
        el("tr", {}, el("th", {}, "best for this run"), el("td", { class: "num" }, String(a.optimal_period)), el("td", { class: "num" }, fmt.pct(a.optimal_goodput))))),
    el("p", { class: "muted" }, `${a.failures} failure(s)${a.mtbf_seconds ? `, one every ${fmt.secs(a.mtbf_seconds)}` : ""}; a save takes ${fmt.secs(a.checkpoint_save_seconds)}, a step ${fmt.secs(a.step_seconds)}, a recovery ${fmt.secs(a.recovery_seconds)}.${a.capped_at_run_length ? " The optimum is longer than the run: checkpoint only at the end." : ""}`),
    el("p", { class: "muted" }, el("code", {}, a.model)));
  return el("div", {}, parts);
}

// What the run decided from its earlier runs before launching: the node pools it kept off, the period it chose.
function planPanel(plan) {
  const avoid = plan && plan.node_pool_avoidance, choice = plan && plan.checkpoint_period_choice;
  if (!avoid && !choice) return null;
  const parts = [];
  if (avoid) {
    const avoided = (avoid.avoided || []).join(", ") || "none";
    parts.push(el("p", { id: "plan-pools" }, `Node pools avoided: ${avoided}`), el("p", { class: "muted" }, avoid.reason || ""));
    if (avoid.relaxed) parts.push(el("p", { id: "plan-relaxed" }, `Avoidance relaxed (its workers could not be scheduled): ${avoid.relaxed}`));
  }
  if (choice) {
    const sources = { runs: "this shape's runs", prior: "the prior (no run of this shape measured yet)", fallback: "the fallback (nothing known)" };
    const interval = choice.period_low != null && choice.period_high != null
      ? `; ${Math.round((choice.confidence || 0.9) * 100)} % interval ${choice.period_low}–${choice.period_high} steps` : "";
    parts.push(el("p", { id: "plan-period" }, `checkpoint_period=auto chose ${choice.period} steps (allowed ${choice.bounds[0]}–${choice.bounds[1]}); `
      + `predicted goodput ${fmt.pct(choice.predicted_goodput)}, achieved ${fmt.pct(choice.achieved_goodput)}`),
      el("p", { id: "plan-period-source" }, `From ${sources[choice.source] || choice.source || "–"}${interval}`),
      el("p", { class: "muted" }, choice.reason || ""));
  }
  const replan = plan && plan.checkpoint_period_replan;
  if (replan) {
    parts.push(el("p", { id: "plan-replan" }, `Restarted mid-run with checkpoint_period ${replan.from_period} → ${replan.period} steps (no full restart spent)`),
      el("p", { class: "muted" }, replan.reason || ""));
  }
  return el("section", { class: "panel span12", id: "plan" }, el("h2", {}, "Decided from earlier runs"), ...parts);
}

function escalationTable(escalations) {
  return el("table", {}, el("thead", {}, el("tr", {}, ["when", "reason", "message", "last step", "resumed from", "steps lost", "recreated in", "set aside"].map((h) => el("th", {}, h)))),
    el("tbody", {}, escalations.map((e) => el("tr", {}, el("td", {}, fmt.time(e.at)), el("td", {}, e.reason || "–"), el("td", {}, e.message || ""),
      el("td", {}, fmt.num(e.latest_step)), el("td", {}, fmt.num(e.resumed_from_step)), el("td", {}, fmt.num(e.steps_lost)),
      el("td", {}, fmt.secs(e.seconds_to_recreate)), el("td", {}, (e.quarantined || []).join(", ") || "–")))));
}

// ---- entry -------------------------------------------------------------------------------------

(async () => {
  const main = document.getElementById("main");
  try {
    if (document.body.dataset.page === "run") await runPage(main);
    else await indexPage(main);
    document.body.dataset.ready = "true";
  } catch (error) {
    showError(main, error);
    document.body.dataset.ready = "error";
  }
})();
