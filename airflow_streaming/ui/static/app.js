/* Streams dashboard (airflow-streaming). Plain JS, no build step; charts by Apache ECharts (vendored).
 * Data: GET <ROOT>/api/streams and <ROOT>/api/streams/<name> (Airflow session cookie), refreshed while open.
 * Actions are DAG runs of the operations DAG, created through Airflow's public REST API (never a side channel). */
(function () {
  "use strict";
  const ROOT = window.STREAMING_ROOT || "/streaming";
  const app = document.getElementById("app");
  const banner = document.getElementById("banner");
  const refreshLabel = document.getElementById("refresh");
  const MAX_POINTS = 3000;
  let settings = { refresh_s: 5, actions_enabled: false, operations_dag_id: "stream_operations", airflow_root: "" };
  let timer = null;
  const state = { sort: { key: "severity", dir: -1 }, points: new Map(), charts: {}, detailName: null };
  window.__streams = state; // for people (and tests) poking at the page in a console

  // ------------------------------------------------------------------ small helpers
  // Everything shown comes from files a stream's driver can write (status, lifecycle records, versions,
  // names): it is data, never markup. The page builds its DOM with el() (text nodes and setAttribute,
  // never innerHTML); the only HTML strings are chart tooltips, built with escapeHtml(); links are made
  // only for http(s) URLs (safeUrl()).
  const HTML_ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  function escapeHtml(value) {
    return String(value ?? "").replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]);
  }
  function safeUrl(url) {
    if (typeof url !== "string" || !url) return null;
    try {
      const u = new URL(url, window.location.href);
      return u.protocol === "http:" || u.protocol === "https:" ? u.href : null;
    } catch (e) { return null; }
  }
  function el(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined || kid === false) continue;
      node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return node;
  }
  const dash = "—";
  function num(v, digits) {
    if (v === null || v === undefined || Number.isNaN(v)) return dash;
    const d = digits === undefined ? (Math.abs(v) >= 100 ? 0 : 1) : digits;
    return Number(v).toLocaleString(undefined, { maximumFractionDigits: d, minimumFractionDigits: 0 });
  }
  function ago(ms) {
    if (!ms) return dash;
    const s = Math.max(0, (Date.now() - ms) / 1000);
    if (s < 90) return `${Math.round(s)}s ago`;
    if (s < 5400) return `${Math.round(s / 60)} min ago`;
    if (s < 172800) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} d ago`;
  }
  function when(ms) {
    if (!ms) return dash;
    const d = new Date(ms);
    return d.toDateString() === new Date().toDateString() ? d.toLocaleTimeString() : d.toLocaleString();
  }
  function seconds(s) {
    if (s === null || s === undefined) return dash;
    const a = Math.abs(s);
    return a < 120 ? `${num(s, 1)}s` : a < 7200 ? `${num(s / 60, 1)} min` : a < 172800 ? `${num(s / 3600, 1)} h` : `${num(s / 86400, 1)} d`;
  }
  function lagLabel(lag) {
    if (!lag) return dash;
    return lag.kind === "offsets" ? `${num(lag.value, 0)} offsets` : `${seconds(lag.value)} (${lag.kind.replace("_", " ")})`;
  }
  const lagCell = (lag) => el("span", { class: "lag", title: (lag && lag.note) || null }, lagLabel(lag));
  const badge = (text, cls) => el("span", { class: `badge b-${cls || text}` }, String(text || dash).replaceAll("_", " "));
  const pageUrl = (name) => `${ROOT}/ui/` + (name ? `stream/${encodeURIComponent(name)}` : "");

  // The page runs inside the Airflow UI's frame (same origin, sandboxed without top navigation).
  // Airflow pages: push the URL to the Airflow UI's own router. Other sites: a new tab, opened by a
  // link in the Airflow document (the frame itself may not open popups).
  function embedded() {
    try { return window.top !== window && window.top.location.origin === window.location.origin; } catch (e) { return false; }
  }
  function openInAirflow(url) {
    if (embedded()) {
      try {
        const idx = ((window.top.history.state || {}).idx || 0) + 1;
        window.top.history.pushState({ usr: null, key: Math.random().toString(36).slice(2, 10), idx }, "", url);
        window.top.dispatchEvent(new PopStateEvent("popstate", { state: window.top.history.state }));
        return;
      } catch (e) { /* fall through */ }
    }
    window.location.href = url;
  }
  function openOutside(url) {
    if (embedded()) {
      try {
        const a = window.top.document.createElement("a");
        Object.assign(a, { href: url, target: "_blank", rel: "noopener noreferrer" });
        window.top.document.body.appendChild(a); a.click(); a.remove();
        return;
      } catch (e) { /* fall through */ }
    }
    window.open(url, "_blank", "noopener");
  }
  function airflowLink(url, text, attrs) {
    url = safeUrl(url);
    if (!url) return el("span", {}, text);
    return el("a", Object.assign({ href: url, "data-airflow-link": true,
      onclick: (ev) => { if (ev.button === 0 && !ev.ctrlKey && !ev.metaKey) { ev.preventDefault(); openInAirflow(url); } } }, attrs || {}), text);
  }
  function outsideLink(url, text, attrs) {
    url = safeUrl(url);
    if (!url) return null; // a javascript:, data: or garbage URL from a control file is no link
    return el("a", Object.assign({ href: url, target: "_blank", rel: "noopener noreferrer",
      onclick: (ev) => { if (ev.button === 0) { ev.preventDefault(); openOutside(url); } } }, attrs || {}), text);
  }
  function runLink(run) {
    if (!run) return null;
    return airflowLink(run.task_url || run.url, `${run.dag_id} / ${run.task_id}`, { class: "dag-run-link", title: run.run_id });
  }

  async function getJSON(path) {
    const resp = await fetch(ROOT + path, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (resp.status === 401 || resp.status === 403) {
      const login = `${settings.airflow_root}/auth/login?next=${encodeURIComponent(window.location.href)}`;
      banner.hidden = false; banner.className = "banner crit"; banner.replaceChildren(
        resp.status === 401 ? "Your Airflow session is missing or expired. " : "You are not allowed to see streams. ",
        airflowLink(login, "Log in"));
      throw new Error(`HTTP ${resp.status}`);
    }
    if (!resp.ok) throw new Error(`HTTP ${resp.status}: ${(await resp.text()).slice(0, 300)}`);
    return resp.json();
  }
  function showError(err) {
    if (banner.hidden || !banner.className.includes("crit")) {
      banner.hidden = false; banner.className = "banner"; banner.textContent = `Could not refresh: ${err.message}`;
    }
  }
  function schedule(fn) {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      if (!document.hidden) await fn().catch(showError);
      schedule(fn);
    }, Math.max(1, settings.refresh_s) * 1000);
  }
  function refreshed(data) {
    if (data && data.settings) settings = data.settings;
    if (!banner.className.includes("crit")) banner.hidden = true;
    refreshLabel.textContent = `updated ${new Date().toLocaleTimeString()} · every ${settings.refresh_s}s`;
  }

  // ------------------------------------------------------------------ overview
  // The server searches, filters, sorts and pages (GET /api/streams?q=&health=&supervisor=&version=&sort=&dir=
  // &page=&per_page=): a thousand streams are never all sent or drawn. The controls are built once per
  // visit, so a refresh never takes the focus or a half-typed search away.
  const COLUMNS = [ // [key, label, server sort key or null]
    ["name", "Stream", "name"], ["version", "Version", "version"], ["severity", "Health", "severity"],
    ["state", "Driver", null], ["last_batch", "Last batch", null], ["input_rps", "In rows/s", null],
    ["processed_rps", "Processed rows/s", null], ["lag", "Lag", null], ["last_action", "Last action", null],
    ["supervisor", "Supervisor", "supervisor"],
  ];
  const SUPERVISOR_LABELS = { none: "not supervised", ok: "no restart in the window", restarted: "restarted in the window", gave_up: "gave up" };
  const query = { q: "", health: "", supervisor: "", version: "", sort: "severity", dir: "desc", page: 1, per_page: 50 };
  state.query = query;
  function queryString() {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== "" && v !== null) p.set(k, String(v));
    return p.toString();
  }
  function actionCell(a) {
    if (!a) return dash;
    const versions = a.from_version || a.to_version ? ` ${a.from_version || "∅"}→${a.to_version || "∅"}` : "";
    return el("div", {}, el("span", {}, `${a.action}${versions} `), badge(a.running ? "RUNNING" : a.outcome),
      el("div", { class: "small muted" }, a.running ? `since ${ago(a.start)}` : ago(a.end || a.start)),
      a.dag_run ? el("div", { class: "small" }, runLink(a.dag_run)) : null,
      a.error && !a.running ? el("div", { class: "err", title: a.error }, a.error.slice(0, 140)) : null);
  }
  // The hot standby as the reconcile core sees it (airflow_streaming.reconcile.observation.Standby).
  const STANDBY_LABELS = { MISSING: "missing", READY: "ready", TAKING_OVER: "taking over", TOOK_OVER: "took over" };
  function supervisorCell(s) {
    if (!s) return el("span", { class: "muted" }, "not supervised");
    if (s.gave_up) return el("div", {}, badge("GAVE_UP"), el("div", { class: "small muted" }, s.last_error_class || ""));
    return el("span", {}, `${s.restarts_in_window} restart${s.restarts_in_window === 1 ? "" : "s"} / ${Math.round(s.window_s / 60)} min`);
  }
  function overviewRow(r) {
    const h = r.health || {};
    const errors = Object.entries(r.errors || {}).filter(([k, v]) => k !== "health" && !String(h.reason || "").includes(v));
    return el("tr", { class: `sev-${r.severity}`, "data-stream": r.name, "data-health": h.state },
      el("td", {}, airflowLink(pageUrl(r.name), r.name, { class: "stream-link", onclick: (ev) => { ev.preventDefault(); go(pageUrl(r.name)); } }),
        r.source === "control_location" ? el("div", { class: "small muted" }, "from a control location") : null,
        errors.map(([k, v]) => el("div", { class: "err", title: v }, `${k}: ${v.slice(0, 160)}`))),
      el("td", { class: "nowrap" }, r.version || dash, r.pending ? el("div", { class: "small muted" }, `wanted ${r.wanted_version}`) : null),
      el("td", {}, badge(h.state), el("div", { class: "small" }, h.reason || ""),
        (h.warnings || []).map((w) => el("div", { class: "small muted" }, `⚠ ${w}`))),
      el("td", {}, r.state ? badge(r.state) : dash),
      el("td", { class: "num" }, r.last_batch ? `#${r.last_batch.id}` : dash,
        r.last_batch ? el("div", { class: "small muted" }, ago(r.last_batch.at)) : null),
      el("td", { class: "num" }, num(r.input_rps)), el("td", { class: "num" }, num(r.processed_rps)),
      el("td", { class: "num" }, lagCell(r.lag)),
      el("td", {}, actionCell(r.last_action)), el("td", {}, supervisorCell(r.supervisor),
        r.next && r.next.standby ? el("div", { class: "small standby", "data-standby": r.next.standby }, `hot standby ${STANDBY_LABELS[r.next.standby] || r.next.standby}`) : null),
      el("td", {}, r.spark_ui ? outsideLink(r.spark_ui, "Spark UI", { class: "spark-ui-link" }) : null));
  }
  // Options of a filter: the values the user's streams have (with counts), plus the chosen one.
  function fillSelect(select, counts, label, labels) {
    const values = Object.keys(counts || {}).sort();
    if (select.value && !values.includes(select.value)) values.push(select.value);
    const chosen = select.value;
    select.replaceChildren(el("option", { value: "" }, `${label}: any`),
      ...values.map((v) => el("option", { value: v, selected: v === chosen || null },
        `${(labels && labels[v]) || v || "(none)"} (${(counts || {})[v] || 0})`)));
    select.value = chosen;
  }
  function buildOverview(reload) {
    const changed = (key) => (ev) => { query[key] = ev.target.value; query.page = 1; reload(); };
    let typing = null;
    const search = el("input", { type: "search", id: "stream-search", placeholder: "Search streams by name", "aria-label": "Search streams by name",
      oninput: (ev) => { clearTimeout(typing); typing = setTimeout(() => { query.q = ev.target.value.trim(); query.page = 1; reload(); }, 250); } });
    const filters = {
      health: el("select", { id: "filter-health", "aria-label": "Health", onchange: changed("health") }),
      supervisor: el("select", { id: "filter-supervisor", "aria-label": "Supervisor", onchange: changed("supervisor") }),
      version: el("select", { id: "filter-version", "aria-label": "Version", onchange: changed("version") }),
    };
    const perPage = el("select", { id: "per-page", "aria-label": "Rows per page", onchange: (ev) => { query.per_page = Number(ev.target.value); query.page = 1; reload(); } },
      [25, 50, 100, 200].map((n) => el("option", { value: n, selected: n === query.per_page || null }, `${n} per page`)));
    const step = (d) => () => { query.page = Math.max(1, query.page + d); reload(); };
    const view = {
      counts: el("span", { class: "muted", id: "counts" }),
      errors: el("div", {}), table: el("div", {}),
      prev: el("button", { id: "page-prev", onclick: step(-1) }, "‹ Previous"),
      next: el("button", { id: "page-next", onclick: step(1) }, "Next ›"),
      info: el("span", { id: "page-info", class: "muted" }), filters,
    };
    app.replaceChildren(
      el("div", { class: "head" }, el("h1", {}, "Streams"), view.counts),
      el("div", { class: "actions filters" }, search, filters.health, filters.supervisor, filters.version, perPage),
      view.errors, view.table, el("div", { class: "actions pager" }, view.prev, view.info, view.next));
    return view;
  }
  function renderOverview(data, view, reload) {
    const facets = data.facets || {};
    fillSelect(view.filters.health, facets.health, "Health");
    fillSelect(view.filters.supervisor, facets.supervisor, "Supervisor", SUPERVISOR_LABELS);
    fillSelect(view.filters.version, facets.version, "Version");
    view.counts.textContent = Object.entries(facets.health || {}).sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `${v} ${k.toLowerCase().replaceAll("_", " ")}`).join(" · ");
    view.errors.replaceChildren(...(data.errors || []).map((e) => el("div", { class: "err discovery-error" }, e)));
    query.page = data.page || 1;
    const head = el("tr", {}, COLUMNS.map(([key, label, sortKey]) => sortKey
      ? el("th", { class: "sortable", "data-sort": sortKey, onclick: () => {
        query.dir = query.sort === sortKey ? (query.dir === "asc" ? "desc" : "asc") : (sortKey === "name" || sortKey === "version" ? "asc" : "desc");
        query.sort = sortKey; query.page = 1; reload(); } },
        label, query.sort === sortKey ? el("span", { class: "arrow" }, query.dir === "asc" ? " ▲" : " ▼") : null)
      : el("th", {}, label)), el("th", {}, ""));
    const rows = data.streams || [];
    view.table.replaceChildren(rows.length ? el("table", { id: "streams", "data-matched": data.matched, "data-page": data.page },
      el("thead", {}, head), el("tbody", {}, rows.map(overviewRow)))
      : el("p", { class: "muted", id: "no-streams" }, data.total ? "No stream matches the search and filters."
        : "No managed streams found. Configure [airflow_streaming] desired_state_file or control_locations (docs/ui.md)."));
    view.info.textContent = data.matched ? `page ${data.page} of ${data.pages} · ${data.matched} of ${data.total} streams` : "";
    view.prev.disabled = (data.page || 1) <= 1;
    view.next.disabled = (data.page || 1) >= (data.pages || 1);
  }
  async function overview() {
    document.getElementById("crumb").textContent = "";
    let view = null;
    let seq = 0;
    const load = async () => {
      const mine = ++seq;
      const data = await getJSON(`/api/streams?${queryString()}`);
      if (mine !== seq) return; // a newer request (a filter changed meanwhile) wins
      refreshed(data);
      renderOverview(data, view, reload);
      state.overviewLoaded = (state.overviewLoaded || 0) + 1;
    };
    const reload = () => load().catch(showError);
    view = buildOverview(reload);
    await load();
    schedule(load);
  }

  // ------------------------------------------------------------------ one stream: charts
  const TIMELINE_COLORS = { ok: "#16a34a", warn: "#d97706", crit: "#dc2626", running: "#2563eb" };
  function outcomeClass(a) {
    if (a.running) return "running";
    if (a.outcome === "SUCCEEDED") return "ok";
    if (a.outcome === "FAILED" || a.outcome === "ROLLBACK_FAILED") return "crit";
    return "warn";
  }
  function mergePoints(points) {
    for (const p of points || []) state.points.set(`${p.query}|${p.batch}|${p.t}`, p);
    const all = [...state.points.values()].sort((a, b) => a.t - b.t);
    if (all.length > MAX_POINTS) for (const p of all.splice(0, all.length - MAX_POINTS)) state.points.delete(`${p.query}|${p.batch}|${p.t}`);
    return all;
  }
  function chart(id, title) {
    const node = el("div", { class: "chart" + (id === "timeline" ? " timeline" : ""), id: `chart-${id}` });
    const card = el("div", { class: "card" }, el("h3", {}, title), node);
    return { card, node };
  }
  function baseOption(range) {
    return {
      animation: false, grid: { left: 64, right: 64, top: 30, bottom: 28 },
      tooltip: { trigger: "axis" }, legend: { top: 0, type: "scroll" },
      xAxis: { type: "time", min: range[0], max: range[1] },
      dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "none" }],
    };
  }
  function actionAreas(actions, range) {
    return {
      silent: true, itemStyle: { color: "rgba(37,99,235,0.08)" }, label: { show: true, position: "insideTop", fontSize: 10 },
      data: actions.filter((a) => (a.end || Date.now()) >= range[0] && a.start <= range[1])
        .map((a) => [{ name: a.action, xAxis: a.start }, { xAxis: a.end || Date.now() }]),
    };
  }
  const line = (name, data, extra) => Object.assign({ name, type: "line", showSymbol: true, symbolSize: 5, connectNulls: false, data }, extra || {});
  function chartOptions(d, points, range) {
    const byT = (f) => points.map((p) => [p.t, f(p)]);
    const areas = actionAreas(d.actions || [], range);
    const trigger = d.trigger_interval_s ? d.trigger_interval_s * 1000 : null;
    const ops = d.state_operators || [];
    const opSeries = (key) => ops.map((op) => byT((p) => { const s = p.state.find((x) => x.op === op); return s ? s[key] : null; }));
    return {
      rates: Object.assign(baseOption(range), { yAxis: { type: "value", name: "rows/s" }, series: [
        line("input rows/s", byT((p) => p.input_rps), { markArea: areas }), line("processed rows/s", byT((p) => p.processed_rps))] }),
      duration: Object.assign(baseOption(range), { yAxis: { type: "value", name: "ms" }, series: [
        line("batch duration (ms)", byT((p) => p.duration_ms), { markArea: areas, markLine: trigger ? { symbol: "none",
          lineStyle: { type: "dashed", color: "#dc2626" }, label: { position: "insideEndTop", formatter: `trigger interval ${d.trigger_interval_s}s` },
          data: [{ yAxis: trigger, name: "trigger interval" }] } : undefined })] }),
      rows: Object.assign(baseOption(range), { yAxis: { type: "value", name: "rows" }, series: [
        { name: "input rows per batch", type: "bar", barMaxWidth: 12, data: byT((p) => p.rows), markArea: areas },
        line("output rows per batch", byT((p) => p.output_rows))] }),
      state: Object.assign(baseOption(range), {
        yAxis: [{ type: "value", name: "state rows" }, { type: "value", name: "MiB", position: "right" }],
        title: ops.length ? undefined : { text: "no stateful operator", left: "center", top: "middle", textStyle: { fontSize: 13, color: "#9ca3af" } },
        series: [...ops.map((op, i) => line(`${op} rows`, opSeries("rows")[i], i === 0 ? { markArea: areas } : {})),
          ...ops.map((op, i) => line(`${op} memory (MiB)`, opSeries("memory")[i].map(([t, v]) => [t, v === null ? null : v / 1048576]),
            { yAxisIndex: 1, lineStyle: { type: "dotted" } }))] }),
      eventtime: Object.assign(baseOption(range), { yAxis: { type: "value", name: "seconds behind" }, series: [
        line("watermark lag (s)", byT((p) => p.watermark_lag_s), { markArea: areas }),
        line("event-time lag (s)", byT((p) => p.event_lag_s))] }),
      timeline: timelineOption(d, range),
    };
  }
  function timelineOption(d, range) {
    const actions = (d.actions || []).slice(-100);
    const lanes = [...new Set(actions.map((a) => a.action))];
    const labels = { ok: "succeeded", warn: "refused / rolled back", crit: "failed", running: "running" };
    // One series per action (a thick segment from its start to its end); series of one outcome share a
    // name, so the legend has one entry per outcome.
    const segments = actions.map((a) => {
      const k = outcomeClass(a), lane = lanes.indexOf(a.action);
      // Symbols at both ends carry the action's tooltip (a line without symbols has no item to hover).
      return { name: labels[k], type: "line", showSymbol: true, symbolSize: 10, lineStyle: { width: 10, color: TIMELINE_COLORS[k] },
        itemStyle: { color: TIMELINE_COLORS[k] }, data: [{ value: [a.start, lane], a }, { value: [a.end || Date.now(), lane], a }] };
    });
    const steps = actions.flatMap((a) => (a.steps || []).filter((s) => s.at).map((s) => ({ value: [s.at, lanes.indexOf(a.action)], s })));
    return {
      animation: false, grid: { left: 80, right: 64, top: 30, bottom: 50 }, legend: { top: 0 },
      // ECharts puts a formatter's string in the tooltip as HTML: every value in it is escaped.
      tooltip: { trigger: "item", formatter: (p) => {
        const s = p.data && p.data.s, a = (p.data && p.data.a) || {};
        if (s) return `${escapeHtml(s.step)} · ${escapeHtml(new Date(s.at).toLocaleString())}<br>${escapeHtml(String(s.detail || "").slice(0, 200))}`;
        return `${escapeHtml(a.action)} ${escapeHtml(a.from_version || "∅")}→${escapeHtml(a.to_version || "∅")}: ${escapeHtml(a.running ? "running" : a.outcome)}` +
          (a.verdict ? `<br>gate: ${escapeHtml(a.verdict)}` : "") + (a.error ? `<br>${escapeHtml(String(a.error).slice(0, 200))}` : "");
      } },
      xAxis: { type: "time", min: range[0], max: range[1] },
      yAxis: { type: "category", data: lanes.length ? lanes : ["(no action recorded)"] },
      dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "none" }, { type: "slider", xAxisIndex: 0, height: 16, bottom: 6, filterMode: "none" }],
      series: [...segments, { name: "steps", type: "scatter", z: 5, symbolSize: 8, itemStyle: { color: "#111827", borderColor: "#fff", borderWidth: 1 }, data: steps }],
    };
  }
  function timeRange(d, points) {
    const now = Date.now();
    const first = points.length ? points[0].t : (d.started_at || now - 15 * 60000);
    const recent = (d.actions || []).filter((a) => (a.end || now) >= now - 24 * 3600000).map((a) => a.start);
    const start = Math.min(first, ...(state.showAllHistory ? (d.actions || []).map((a) => a.start) : recent));
    return [Math.min(start, now - 60000), now + Math.max(2000, settings.refresh_s * 1000)];
  }
  function drawCharts(d) {
    const points = mergePoints(d.points);
    const range = timeRange(d, points);
    const options = chartOptions(d, points, range);
    for (const [id, option] of Object.entries(options)) {
      const node = document.getElementById(`chart-${id}`);
      if (!node || !window.echarts) continue;
      let c = state.charts[id];
      if (!c) { c = state.charts[id] = window.echarts.init(node, null, { renderer: "canvas" }); c.group = "stream"; }
      c.setOption(option, { replaceMerge: ["series"] });
      node.dataset.points = String(id === "timeline" ? (d.actions || []).length : points.length);
      node.dataset.lastBatch = points.length ? String(points[points.length - 1].batch) : "";
    }
    window.echarts && window.echarts.connect("stream");
  }

  // ------------------------------------------------------------------ one stream: panels
  function kv(pairs) {
    return el("dl", { class: "kv" }, pairs.filter(([, v]) => v !== undefined).map(([k, v]) => [el("dt", {}, k), el("dd", {}, v ?? dash)]));
  }
  function statsBar(d) {
    const h = d.health || {}, sup = d.supervisor;
    const stat = (label, value, id) => el("div", { class: "stat", id }, el("div", { class: "v" }, value), el("div", { class: "l" }, label));
    return el("div", { class: "stats" },
      stat("last batch", d.last_batch ? `#${d.last_batch.id} · ${ago(d.last_batch.at)}` : dash, "stat-last-batch"),
      stat("input rows/s", num(d.input_rps)), stat("processed rows/s", num(d.processed_rps)),
      stat("lag", lagCell(d.lag)), stat("batches this run", num((d.totals || {}).batches, 0)),
      stat("rows this run", num((d.totals || {}).input_rows, 0)),
      stat("quarantined", num((d.totals || {}).quarantined_rows, 0)),
      stat("heartbeat", d.heartbeat_age_s !== null && d.heartbeat_age_s !== undefined ? `${seconds(d.heartbeat_age_s)} ago` : dash),
      stat("supervisor", sup ? (sup.gave_up ? "GAVE UP" : `${sup.restarts_in_window} restarts / ${Math.round(sup.window_s / 60)} min`) : "not supervised"),
      d.next ? el("div", { class: "stat", id: "stat-next", title: d.next.reason || "" },
        el("div", { class: "v" }, d.next.act || dash), el("div", { class: "l" }, "next supervisor pass")) : null,
      d.next && d.next.standby ? el("div", { class: "stat", id: "stat-standby", "data-standby": d.next.standby },
        el("div", { class: "v" }, STANDBY_LABELS[d.next.standby] || d.next.standby), el("div", { class: "l" }, "hot standby")) : null,
      d.live && h.metrics && h.metrics.watermark_lag_s !== undefined ? stat("watermark lag now", seconds(Math.max(0, h.metrics.watermark_lag_s))) : null);
  }
  function historyTable(actions) {
    if (!actions.length) return el("p", { class: "muted" }, "No lifecycle action recorded.");
    return el("table", { id: "history" }, el("thead", {}, el("tr", {}, ["Started", "Action", "Versions", "Outcome", "Gate", "Took", "DAG run", "Error / steps"].map((h) => el("th", {}, h)))),
      el("tbody", {}, actions.slice().reverse().map((a) => el("tr", { "data-action": a.action, "data-outcome": a.outcome },
        el("td", { class: "nowrap" }, when(a.start)), el("td", {}, a.action),
        el("td", { class: "nowrap" }, `${a.from_version || "∅"} → ${a.to_version || "∅"}`,
          a.from_runtime !== a.to_runtime && (a.from_runtime || a.to_runtime) ? el("div", { class: "small muted runtime" }, `${a.from_runtime || "∅"} → ${a.to_runtime || "∅"}`) : null),
        el("td", {}, badge(a.running ? "RUNNING" : a.outcome)), el("td", {}, a.verdict ? badge(a.verdict) : dash),
        el("td", { class: "num" }, a.end ? seconds((a.end - a.start) / 1000) : dash),
        el("td", { class: "small" }, a.dag_run ? runLink(a.dag_run) : (a.owner ? el("span", { class: "muted" }, a.owner) : dash)),
        el("td", {}, a.error ? el("div", { class: "err" }, a.error) : null,
          a.steps && a.steps.length ? el("details", {}, el("summary", {}, `${a.steps.length} steps`),
            el("ol", { class: "small" }, a.steps.map((s) => el("li", {}, `${when(s.at)} ${s.step}`, s.detail ? el("span", { class: "muted" }, ` — ${s.detail}`) : null)))) : null)))));
  }
  function compatPanel(c) {
    if (!c) return el("p", { class: "muted" }, "No compatibility check recorded for this stream.");
    return el("div", { id: "compat" },
      el("div", { class: "actions" }, badge(c.verdict), el("span", {}, `${c.candidate_application || ""} ${c.candidate_version || ""} against the checkpoint`),
        el("span", { class: "muted" }, when(c.at)), c.dag_run ? runLink(c.dag_run) : null),
      c.dry_run ? el("p", { class: "small" }, `Spark's own restart check: ${c.dry_run.status}`, c.dry_run.error_class ? ` [${c.dry_run.error_class}]` : "",
        c.dry_run.message ? el("span", { class: "muted" }, ` ${String(c.dry_run.message).slice(0, 300)}`) : null) : null,
      (c.findings || []).length ? el("table", {}, el("thead", {}, el("tr", {}, ["Severity", "Rule", "Finding", "Checkpoint", "Candidate"].map((h) => el("th", {}, h)))),
        el("tbody", {}, c.findings.map((f) => el("tr", {}, el("td", {}, badge(f.severity)), el("td", { class: "mono" }, f.rule), el("td", {}, f.message),
          el("td", { class: "mono small" }, JSON.stringify(f.checkpoint)), el("td", { class: "mono small" }, JSON.stringify(f.candidate))))))
        : el("p", { class: "muted" }, "No findings."));
  }
  function actionsPanel(d) {
    const dag = settings.operations_dag_id;
    const dagUrl = `${settings.airflow_root}/dags/${encodeURIComponent(dag)}`;
    if (!d.actionable) return el("p", { class: "muted" }, "This stream is not in the desired-state file, so the operations DAG cannot act on it.");
    if (!settings.actions_enabled) {
      return el("p", {}, "Read-only. To stop, restart, upgrade or roll back, trigger the operations DAG ",
        airflowLink(dagUrl, dag), ` with stream = ${d.name} and the action; every action is an audited DAG run.`);
    }
    const action = el("select", { id: "op-action" }, ["status", "stop", "restart", "upgrade", "rollback"].map((a) => el("option", { value: a }, a)));
    const version = el("select", { id: "op-version" }, el("option", { value: "" }, `wanted (${d.wanted_version || "?"})`), (d.versions || []).map((v) => el("option", { value: v }, v)));
    const warnings = el("input", { type: "checkbox", id: "op-warnings" });
    const result = el("span", { id: "op-result" });
    let armed = false;
    const button = el("button", { id: "op-trigger", class: "danger", onclick: async () => {
      if (!armed) { armed = true; button.textContent = `Confirm: ${action.value} ${d.name}`; return; }
      armed = false; button.textContent = "Trigger"; button.disabled = true;
      try {
        const body = { logical_date: null, note: `Streams dashboard: ${action.value} ${d.name}`,
          conf: { stream: d.name, action: action.value, version: version.value, allow_warnings: warnings.checked } };
        const resp = await fetch(`${settings.airflow_root}/api/v2/dags/${encodeURIComponent(dag)}/dagRuns`, {
          method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json", Accept: "application/json" }, body: JSON.stringify(body) });
        const out = await resp.json().catch(() => ({}));
        if (!resp.ok) throw new Error(`HTTP ${resp.status}: ${JSON.stringify(out.detail || out).slice(0, 300)}`);
        result.replaceChildren("Triggered ", airflowLink(`${dagUrl}/runs/${encodeURIComponent(out.dag_run_id)}`, out.dag_run_id, { class: "triggered-run" }));
      } catch (e) { result.replaceChildren(el("span", { class: "err" }, e.message)); }
      finally { button.disabled = false; }
    } }, "Trigger");
    return el("div", { class: "actions" }, el("span", {}, "Run the operations DAG: "), action, version,
      el("label", {}, warnings, " allow compatibility warnings"), button, result);
  }
  // The Airflow Assets the spec declares: a link to Airflow's own asset page when Airflow knows the Asset.
  function assetsPanel(assets) {
    const item = (a) => el("li", {}, a.url ? airflowLink(a.url, a.uri, { class: "asset-link mono" }) : el("span", { class: "mono" }, a.uri));
    return el("div", {}, [["sources", "Reads"], ["sinks", "Writes"]].filter(([k]) => (assets[k] || []).length).map(([k, label]) =>
      el("div", { "data-kind": k }, el("span", { class: "muted" }, label), el("ul", {}, assets[k].map(item)))));
  }
  function renderDetail(d, first) {
    const h = d.health || {};
    document.getElementById("crumb").replaceChildren("/ ", d.name);
    const header = el("div", { class: "head", id: "stream-head", "data-health": h.state },
      el("h1", {}, d.name), badge(h.state), d.state ? badge(d.state) : null, el("span", {}, `version ${d.version || dash}`),
      d.pending ? el("span", { class: "muted" }, `(wanted ${d.wanted_version})`) : null,
      d.run_id ? el("span", { class: "muted mono" }, `run ${d.run_id}`) : null, d.app_id ? el("span", { class: "muted mono" }, d.app_id) : null,
      d.spark_ui ? outsideLink(d.spark_ui, "Spark UI ↗", { class: "spark-ui-link" }) : null);
    const reasons = el("div", { id: "reasons" }, (h.reasons || []).map((r) => el("div", {}, r)),
      (h.warnings || []).map((w) => el("div", { class: "muted" }, `⚠ ${w}`)),
      d.last_exception ? el("pre", { class: "err" }, `[${d.last_exception.error_class}] ${d.last_exception.message}`) : null,
      Object.entries(d.errors || {}).map(([k, v]) => el("div", { class: "err" }, `${k}: ${v}`)));
    if (first) {
      const c = [chart("rates", "Input vs processed rows/s"), chart("duration", "Batch duration vs trigger interval"),
        chart("rows", "Rows per batch"), chart("state", "State rows and memory per stateful operator"),
        chart("eventtime", "Watermark and event-time lag"), chart("timeline", "Lifecycle on the same time axis")];
      app.replaceChildren(el("div", { id: "top" }), el("div", { class: "grid" }, c.map((x) => x.card)),
        el("div", { class: "actions", style: "margin-top:.5rem" }, el("label", {}, el("input", { type: "checkbox", id: "all-history",
          onchange: (ev) => { state.showAllHistory = ev.target.checked; drawCharts(state.last); } }), " time axis covers the whole lifecycle history")),
        el("div", { id: "panels" }));
    }
    document.getElementById("top").replaceChildren(header, reasons, statsBar(d));
    const panels = document.getElementById("panels");
    const open = new Set([...panels.querySelectorAll("details[open]")].map((x) => x.dataset.key));
    const det = (key, title, body) => el("details", { "data-key": key, open: open.has(key) || null }, el("summary", {}, title), body);
    // The actions panel is built once per page: a refresh must not reset a person's choice, an armed
    // confirmation or the link to the run they just triggered.
    if (first || !state.actionsPanel) state.actionsPanel = actionsPanel(d);
    panels.replaceChildren(
      el("section", {}, el("h2", {}, "Actions"), state.actionsPanel),
      el("section", {}, el("h2", {}, "Lifecycle history"), historyTable(d.actions || [])),
      el("section", {}, el("h2", {}, "Last checkpoint compatibility report"), compatPanel(d.compat)),
      d.assets ? el("section", { id: "assets" }, el("h2", {}, "Assets"), assetsPanel(d.assets)) : null,
      el("section", {}, el("h2", {}, "DAG runs that acted on this stream"), (d.dag_runs || []).length ? el("ul", { id: "dag-runs" },
        d.dag_runs.map((r) => el("li", {}, badge(r.state, r.state), " ", runLink(r), el("span", { class: "muted small" }, ` ${r.run_id} · ${when(r.start)}`)))) : el("p", { class: "muted" }, "None recorded (or none you may read).")),
      el("section", {}, el("h2", {}, "Details"),
        det("spec", "Deployed spec (secrets masked)", d.spec ? el("div", {}, kv(Object.entries(d.spec).filter(([k]) => !["spark_conf", "application_args", "health", "cluster"].includes(k)).map(([k, v]) => [k, String(v)])),
          el("p", { class: "small" }, "application args: ", el("span", { class: "mono" }, (d.spec.application_args || []).join(" ") || dash)),
          el("table", { class: "small" }, el("tbody", {}, Object.entries(d.spec.spark_conf || {}).map(([k, v]) => el("tr", {}, el("td", { class: "mono" }, k), el("td", { class: "mono" }, v)))))) : el("p", { class: "muted" }, "unknown")),
        det("driver", "Driver and queries", el("div", {}, d.driver ? kv(Object.entries(d.driver).map(([k, v]) => [k, k === "submitted_at" ? when(v * 1000) : String(v ?? dash)])) : null,
          el("ul", {}, (d.queries || []).map((q) => el("li", {}, `${q.name || q.id}: ${q.active ? "active" : "inactive"}, ${q.message || ""}, last batch ${q.last_batch_id ?? dash}`))),
          d.exit ? el("p", { class: "small" }, `exit: ${JSON.stringify(d.exit)}`) : null))));
  }
  async function detail(name) {
    state.points = new Map(); state.charts = {}; state.detailName = name; state.actionsPanel = null;
    let first = true;
    const load = async () => {
      const d = await getJSON(`/api/streams/${encodeURIComponent(name)}`);
      refreshed(d); state.last = d;
      renderDetail(d, first); first = false;
      drawCharts(d);
    };
    await load();
    schedule(load);
    window.addEventListener("resize", () => Object.values(state.charts).forEach((c) => c.resize()));
  }

  // ------------------------------------------------------------------ routing
  function go(url) { window.location.href = url; }
  function route() {
    const rest = window.location.pathname.slice(ROOT.length);
    const m = rest.match(/^\/ui\/stream\/([^/]+)\/?$/);
    return (m ? detail(decodeURIComponent(m[1])) : overview()).catch((err) => {
      if (!String(err.message).startsWith("HTTP 40")) app.replaceChildren(el("p", { class: "err" }, `Could not load: ${err.message}`));
      else app.replaceChildren();
    });
  }
  document.querySelectorAll("a[data-nav]").forEach((a) => a.addEventListener("click", (ev) => { ev.preventDefault(); go(a.href); }));
  route();
})();
