/* sketchql error dashboard: frames over SSE (fetch stream, reconnecting), bounded series, Plotly charts.
 *
 * Every figure comes from the server's frame (GET /dashboard/api/state, GET /dashboard/api/events);
 * a figure the engine does not provide is null and shown as "not available", never computed here.
 */
"use strict";

const MAX_POINTS = 600;                 // bounded series in the browser (same bound as the server)
const MAX_EVENTS = 40;                  // collapse / zone events kept per summary
const S = {
  boot: null, frame: null, points: [], controlBase: "/dashboard/api/control",
  view: "queries", lastId: "", zones: {}, events: {}, visible: new Set(), frames: 0,
};
const PLOT_CFG = { displayModeBar: false, responsive: true };
const C = { est: "#2563eb", aud: "#9333ea", contract: "#d92d20", miss: "#d92d20", recall: "#0e9384",
  prec: "#c11574", mse: "#b54708", out: "#2563eb", budget: "#dc6803", sample: "#12805c", shed: "#7a5af8",
  data: "#2563eb", wall: "#98a2b3", late: "#b54708", rej: "#d92d20", mem: "#475467" };
const ZONE_COLORS = { period: "#60a5fa", max: "#2dd4bf", collapse: "#fb923c", change: "#a78bfa" };

// ---------------------------------------------------------------- helpers
const $ = (sel, root) => (root || document).querySelector(sel);
const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null) continue;
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
}
const isNum = (v) => typeof v === "number" && isFinite(v);
function fmt(v, kind) {
  if (!isNum(v)) return null;
  if (kind === "pct") {
    const p = 100 * v;
    return (Math.abs(p - Math.round(p)) < 1e-9 ? String(Math.round(p)) : p.toFixed(v < 0.001 && v > 0 ? 3 : 1)) + " %";
  }
  if (kind === "bytes") {
    const u = ["B", "KiB", "MiB", "GiB"]; let i = 0; let x = v;
    while (Math.abs(x) >= 1024 && i < u.length - 1) { x /= 1024; i++; }
    return (i ? x.toFixed(1) : String(Math.round(x))) + " " + u[i];
  }
  if (kind === "int") return Math.round(v).toLocaleString("en-US");
  if (kind === "s") return v.toFixed(1) + " s";
  if (Math.abs(v) >= 1e5) return v.toExponential(2);
  if (Math.abs(v) >= 100) return v.toFixed(0);
  if (Math.abs(v) >= 1) return v.toFixed(2);
  return v.toPrecision(3);
}
function setMetric(root, key, v, kind, why) {
  const m = root.querySelector(`[data-metric="${key}"]`);
  if (!m) return;
  const out = m.querySelector(".v");
  const s = typeof v === "string" ? v : fmt(v, kind);
  m.dataset.value = v == null ? "" : String(v);
  if (s == null) {
    out.textContent = "not available"; out.classList.add("na");
    out.title = why || "not measured for this query (or the engine does not provide it yet)";
  } else { out.textContent = s; out.classList.remove("na"); out.title = String(v); }
}
function metricBox(key, label, tip) {
  return el("div", { class: "metric", "data-metric": key, title: tip || label },
    el("div", { class: "l", text: label }), el("div", { class: "v", text: "…" }));
}
function toast(msg, err) {
  const t = $("#toast"); t.textContent = msg; t.className = "show" + (err ? " err" : "");
  clearTimeout(toast._t); toast._t = setTimeout(() => { t.className = ""; }, err ? 7000 : 3000);
}
function headers(extra) {
  const h = Object.assign({}, extra || {});
  const tok = sessionStorage.getItem("sketchql.token");
  if (tok) h.Authorization = "Bearer " + tok;
  return h;
}
async function api(path, opts) {
  const o = Object.assign({ cache: "no-store" }, opts || {});
  o.headers = headers(o.headers);
  const r = await fetch(path, o);
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (!r.ok) {
    const msg = body && body.error ? body.error.message : `HTTP ${r.status}`;
    throw new Error(msg);
  }
  return body;
}
const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

// ---------------------------------------------------------------- feed
function setConn(state, text) {
  const c = $("#conn"); c.className = "pill " + state; c.textContent = text;
  c.dataset.state = state;
}
async function loadState() {
  const st = await api("/dashboard/api/state");
  S.controlBase = st.control_base || S.controlBase;
  S.boot = st.frame.boot;
  S.points = (st.history || []).slice(-MAX_POINTS);
  S.zones = {}; S.events = {};
  onFrame(st.frame, true);
}
async function feed() {
  let backoff = 500;
  for (;;) {
    try {
      if (!S.frame) await loadState();
      const h = headers({ Accept: "text/event-stream" });
      if (S.lastId) h["Last-Event-ID"] = S.lastId;
      const r = await fetch("/dashboard/api/events", { headers: h, cache: "no-store" });
      if (!r.ok) throw new Error("HTTP " + r.status);
      setConn("live", "live");
      backoff = 500;
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const raw = buf.slice(0, i); buf = buf.slice(i + 2);
          let ev = "message", data = "", id = null;
          for (const line of raw.split("\n")) {
            if (line.startsWith("event:")) ev = line.slice(6).trim();
            else if (line.startsWith("data:")) data += line.slice(5).trim();
            else if (line.startsWith("id:")) id = line.slice(3).trim();
          }
          if (id) S.lastId = id;
          if (ev === "frame" && data) {
            const f = JSON.parse(data);
            if (f.boot !== S.boot) { S.frame = null; S.lastId = ""; await loadState(); }
            else onFrame(f, false);
          }
        }
      }
      // the server ends each response after a while: reconnect at once
    } catch (e) {
      setConn(S.frame ? "down" : "wait", "reconnecting…");
      await sleep(backoff);
      backoff = Math.min(backoff * 2, 4000);
      if (S.frame) {
        try { await loadState(); } catch (e2) { /* still down: retry */ }
      }
    }
  }
}
function onFrame(f, fromState) {
  S.frame = f;
  S.frames++;
  if (!fromState && f.point) {
    const last = S.points[S.points.length - 1];
    if (!last || last.sig !== f.point.sig) S.points.push(f.point);
    if (S.points.length > MAX_POINTS) S.points.splice(0, S.points.length - MAX_POINTS);
  }
  trackZones(f);
  render();
}

// ---------------------------------------------------------------- render: header
function render() {
  const f = S.frame; if (!f) return;
  const clocks = f.streams.map((s) => s.clock).filter(isNum);
  $("#clock").textContent = clocks.length ? fmt(Math.max(...clocks), "s") : "–";
  $("#clock").dataset.value = clocks.length ? String(Math.max(...clocks)) : "";
  const d = f.demo;
  $("#demo").textContent = d ? (d.error ? "demo stopped: " + d.error : d.finished ? "demo data replayed"
    : `demo: ${fmt(d.pushed, "int")} tuples pushed`) : "";
  document.body.dataset.seq = f.seq; document.body.dataset.boot = f.boot;
  renderEngine(f);
  if (S.view === "queries") renderQueries(f);
  if (S.view === "streams") renderStreams(f);
  if (S.view === "plans") renderPlans(f);
}
function renderEngine(f) {
  const form = $("#budgets");
  for (const n of ["memory_bytes", "cpu_units_per_s"]) {
    const inp = form.elements[n]; const k = f.engine.knobs[n];
    if (!k) { inp.disabled = true; continue; }
    if (!inp.classList.contains("dirty") && document.activeElement !== inp) inp.value = k.value == null ? "" : k.value;
    inp.dataset.value = k.value == null ? "" : String(k.value);
    inp.title = k.doc || n;
  }
  const a = f.allocator;
  $("#alloc-summary").textContent = a ? `allocator: ${a.enabled === false ? "disabled" : "enabled"} · ${a.replans ?? 0} replans · ${a.reason || ""}`
    : "allocator: not available";
  const av = f.available;
  $("#avail").textContent = `precision API: ${av.precision ? "yes" : "not available"} · plan view: ${av.plan_view ? "yes" : "from control tables"}`;
}

// ---------------------------------------------------------------- queries view
function orderQueries(qs) {
  // approximate ones (promising operators or an error contract) first: they are what the page is for
  const approx = (q) => q.engine !== "exact" || q.contract.error != null ? 0 : 1;
  return qs.slice().sort((a, b) => approx(a) - approx(b) || a.id - b.id);
}
function queryStatus(q) {
  if (!q.active) return ["inactive", "inactive"];
  const p = q.precision;
  if (p && p.status) return [p.status, p.status];
  return ["n/a", "precision n/a"];
}
function lastMissed(q) {
  const s = q.series;
  if (!Array.isArray(s) || !s.length) return false;
  return !!s[s.length - 1].missed;
}
function buildQueryCard(q) {
  const n = q.name;
  const card = el("article", { class: "card query", id: "card-" + n, "data-query": n });
  card.append(el("div", { class: "chead" },
    el("h3", {}, el("span", { text: n }), el("span", { class: "kind", text: q.kind })),
    el("code", { class: "sql", title: q.sql, text: q.sql }),
    el("div", { class: "right" }, el("span", { class: "badge engine", text: q.engine }),
      el("span", { class: "badge status", "data-testid": "status-" + n, text: "…" }))));
  const m = el("div", { class: "metrics" },
    metricBox(n + ".contract", "contract (error @ conf.)", "WITH ERROR e CONFIDENCE c (the query's contract knobs)"),
    metricBox(n + ".est_error", "estimated error", "the precision API's estimate of the relative error"),
    metricBox(n + ".aud_error", "audited error", "relative error measured against an exact audit"),
    metricBox(n + ".recall", "recall est. / audited", "PT results: share of the exact result produced (estimated; audited against an exact run)"),
    metricBox(n + ".hist_mse", "Hist-MSE", "PT weighted: mean squared error of the output histogram"),
    metricBox(n + ".outlier_precision", "outlier precision", "PT asc: share of output pairs that are outliers"),
    metricBox(n + ".output_rate", "output rate /s", "result change rows per second of data time (between the last two frames)"),
    metricBox(n + ".budget_used", "budget used", "share of the probe budget spent between the last two frames"),
    metricBox(n + ".sample_rate", "sampling rate", "the precision API's sample rate, else stream sample_rate x the scan's sample knob"),
    metricBox(n + ".shed_rate", "shed rate", "share of queued probe entries dropped without a probe"),
    metricBox(n + ".changes_out", "changes out", "result change rows produced so far"),
    metricBox(n + ".state_rows", "state rows", "rows held by the operators' synopses"));
  const charts = el("div", { class: "charts" },
    el("div", { class: "chart", id: `ch-${n}-err`, "data-chart": "error" }),
    el("div", { class: "chart", id: `ch-${n}-qual`, "data-chart": "quality" }),
    el("div", { class: "chart", id: `ch-${n}-rate`, "data-chart": "rates" }));
  const form = el("form", { class: "qcontrols", "data-testid": "controls-" + n },
    el("label", {}, "error ", el("input", { type: "text", name: "error", placeholder: "exact" })),
    el("label", {}, "confidence ", el("input", { type: "text", name: "confidence", placeholder: "–" })),
    el("label", {}, "weight ", el("input", { type: "text", name: "weight" })),
    el("label", {}, "budget ", el("input", { type: "text", name: "budget", placeholder: "default" })),
    el("label", {}, el("input", { type: "checkbox", name: "active" }), " active"),
    el("button", { type: "submit", text: "Apply" }));
  wireForm(form, () => `query/${n}`, ["error", "confidence", "weight", "budget"], ["active"]);
  card.append(el("div", { class: "qbody" }, el("div", { class: "left" }, m, form), charts));
  return card;
}
function wireForm(form, target, nums, bools) {
  for (const inp of form.querySelectorAll("input")) {
    inp.addEventListener("input", () => inp.classList.add("dirty"));
    inp.addEventListener("change", () => inp.classList.add("dirty"));
  }
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = {};
    for (const n of nums) {
      const inp = form.elements[n];
      if (!inp || !inp.classList.contains("dirty")) continue;
      const s = inp.value.trim();
      body[n] = s === "" ? null : Number(s);
      if (s !== "" && !isFinite(body[n])) { toast(`${n}: "${s}" is not a number`, true); return; }
    }
    for (const n of bools) {
      const inp = form.elements[n];
      if (inp && inp.classList.contains("dirty")) body[n] = inp.checked;
    }
    if (!Object.keys(body).length) { toast("nothing changed"); return; }
    const path = `${S.controlBase}/${target()}`;
    try {
      await api(path, { method: "PATCH", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
      for (const inp of form.querySelectorAll("input.dirty")) inp.classList.remove("dirty");
      toast(`${target()}: set ${Object.entries(body).map(([k, v]) => `${k}=${v}`).join(", ")}`);
    } catch (e) { toast(`${target()}: ${e.message}`, true); }
  });
}
function syncForm(form, values) {
  for (const [n, v] of Object.entries(values)) {
    const inp = form.elements[n]; if (!inp) continue;
    inp.dataset.value = v == null ? "" : String(v);
    if (inp.classList.contains("dirty") || document.activeElement === inp) continue;
    if (inp.type === "checkbox") inp.checked = !!v; else inp.value = v == null ? "" : String(v);
  }
}
function renderQueries(f) {
  const root = $("#view-queries");
  const qs = orderQueries(f.queries);
  const want = qs.map((q) => q.name).join(",");
  if (root.dataset.order !== want) {
    root.replaceChildren(...qs.map(buildQueryCard));
    root.dataset.order = want;
    observeCharts(root);
  }
  for (const q of qs) {
    const card = $("#card-" + q.name); const n = q.name;
    const p = q.precision || {}; const est = p.estimated || {}; const aud = p.audited || {};
    const noP = "not available: the engine has no precision API for this query yet";
    const [st, label] = queryStatus(q);
    const badge = card.querySelector(".badge.status");
    badge.textContent = label; badge.className = "badge status " + st.replace(/[^a-z]/g, "");
    const missed = st === "missed" || lastMissed(q);
    card.classList.toggle("missed", missed);
    card.dataset.missed = missed ? "1" : "0";
    const c = q.contract;
    setMetric(card, n + ".contract", c.error == null ? "none"
      : `${fmt(c.error, "pct")} @ ${c.confidence == null ? "–" : fmt(c.confidence, "pct")}`);
    card.querySelector(`[data-metric="${n}.contract"]`).dataset.value = JSON.stringify([c.error, c.confidence]);
    setMetric(card, n + ".est_error", q.precision ? est.rel_error : null, "pct", noP);
    setMetric(card, n + ".aud_error", q.precision ? aud.rel_error : null, "pct", noP);
    const lastS = Array.isArray(q.series) && q.series.length ? q.series[q.series.length - 1] : {};
    const rec = [fmt(est.recall, "pct"), fmt(aud.recall, "pct")];
    setMetric(card, n + ".recall", rec[0] == null && rec[1] == null ? null : `${rec[0] ?? "–"} / ${rec[1] ?? "–"}`, null, noP);
    setMetric(card, n + ".hist_mse", lastS.hist_mse, null, noP);
    setMetric(card, n + ".outlier_precision", lastS.outlier_precision, "pct", noP);
    card.querySelector(`[data-metric="${n}.est_error"]`).classList.toggle("bad", missed);
    const m = q.measured;
    setMetric(card, n + ".output_rate", m.output_rate ?? lastS.output_rate, null,
      "measured between two frames whose data time advanced");
    setMetric(card, n + ".budget_used", m.budget_used, "pct",
      "only promising-tuple operators report the share of their probe budget they spend");
    const pk = p.knobs || {};
    setMetric(card, n + ".sample_rate", isNum(pk.sample_rate) ? pk.sample_rate : m.sample_rate, "pct");
    setMetric(card, n + ".shed_rate", isNum(lastS.shed_rate) ? lastS.shed_rate : m.shed_rate, "pct",
      "only promising-tuple operators (or the precision API) report shedding");
    setMetric(card, n + ".changes_out", q.stats.changes_out, "int");
    setMetric(card, n + ".state_rows", q.stats.state_rows, "int");
    syncForm(card.querySelector("form"), { error: c.error, confidence: c.confidence, weight: q.weight,
      budget: c.budget, active: q.active });
    drawQueryCharts(q);
  }
}
function seriesOf(name, key, from) {
  // from my points (measured between frames): x = data time
  const xs = [], ys = [];
  for (const p of S.points) {
    const v = p[from] && p[from][name]; if (!v || !isNum(v.t)) continue;
    xs.push(v.t); ys.push(isNum(v[key]) ? v[key] : null);
  }
  return [xs, ys];
}
function pseries(q, key) {
  const s = Array.isArray(q.series) ? q.series : [];
  const xs = [], ys = [];
  for (const p of s) { if (!isNum(p.t)) continue; xs.push(p.t); ys.push(isNum(p[key]) ? p[key] : null); }
  return [xs, ys, ys.some(isNum)];
}
function baseLayout(title, extra) {
  return Object.assign({
    title: { text: title, font: { size: 12 }, x: 0.01, xanchor: "left", y: 0.97 },
    margin: { l: 44, r: 40, t: 24, b: 28 }, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#fbfcfe",
    font: { size: 10.5, family: "system-ui, sans-serif" }, showlegend: true,
    legend: { orientation: "h", y: -0.2, x: 0, font: { size: 10 } },
    xaxis: { title: { text: "" }, gridcolor: "#eef1f5", zeroline: false, ticksuffix: " s" },
    yaxis: { gridcolor: "#eef1f5", zeroline: false, rangemode: "tozero" },
    uirevision: "keep",
  }, extra || {});
}
function naNote(text) {
  return { text, xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false,
    font: { size: 11, color: "#98a2b3" } };
}
function react(id, traces, layout) {
  const div = document.getElementById(id);
  if (!div || !window.Plotly) return;
  if (!S.visible.has(id) && div.dataset.drawn) return;        // off screen: drawn again when it shows
  div.dataset.drawn = "1";
  div.dataset.points = String(traces.reduce((a, t) => a + (t.x ? t.x.filter((_, i) => t.y[i] != null).length : 0), 0));
  Plotly.react(div, traces, layout, PLOT_CFG);
}
function drawQueryCharts(q) {
  const n = q.name;
  // 1. error against the contract
  const [cx, cy] = seriesOf(n, "error", "queries");
  const traces = [{ x: cx, y: cy, name: "contract", mode: "lines", line: { color: C.contract, dash: "dash", shape: "hv", width: 1.5 } }];
  const [ex, ey, hasE] = pseries(q, "estimated_rel_error");
  const [ax, ay, hasA] = pseries(q, "audited_rel_error");
  const notes = [];
  if (hasE) traces.push({ x: ex, y: ey, name: "estimated", mode: "lines", line: { color: C.est, width: 1.8 } });
  if (hasA) traces.push({ x: ax, y: ay, name: "audited", mode: "markers", marker: { color: C.aud, size: 5 } });
  if (Array.isArray(q.series)) {
    const mx = [], my = [];
    for (const p of q.series) if (p.missed && isNum(p.t)) { mx.push(p.t); my.push(isNum(p.estimated_rel_error) ? p.estimated_rel_error : (isNum(p.audited_rel_error) ? p.audited_rel_error : 0)); }
    if (mx.length) traces.push({ x: mx, y: my, name: "contract missed", mode: "markers", marker: { color: C.miss, symbol: "x", size: 9 } });
  }
  const noContract = q.contract.error == null && !cy.some(isNum);
  if (!hasE && !hasA) notes.push(naNote(noContract ? "no error contract (WITH ERROR): not available"
    : "estimated / audited error: not available"));
  react(`ch-${n}-err`, traces, baseLayout("relative error vs contract", { annotations: notes,
    yaxis: Object.assign({ gridcolor: "#eef1f5", rangemode: "tozero", tickformat: ".1%" },
      (!hasE && !hasA && noContract) ? { range: [0, 0.1] } : {}) }));
  // 2. PT result quality
  const qt = [];
  const [rx, ry, hasR] = pseries(q, "recall");
  const [ox, oy, hasO] = pseries(q, "outlier_precision");
  const [hx, hy, hasH] = pseries(q, "hist_mse");
  if (hasR) qt.push({ x: rx, y: ry, name: "recall", mode: "lines", line: { color: C.recall } });
  if (hasO) qt.push({ x: ox, y: oy, name: "outlier precision", mode: "lines", line: { color: C.prec } });
  if (hasH) qt.push({ x: hx, y: hy, name: "Hist-MSE", mode: "lines", yaxis: "y2", line: { color: C.mse, dash: "dot" } });
  react(`ch-${n}-qual`, qt, baseLayout("recall · Hist-MSE · outlier precision", {
    annotations: qt.length ? [] : [naNote(q.kind.startsWith("PT") ? "not available: not measured yet (no precision API)" : "not available: not a promising-tuple query")],
    yaxis: { gridcolor: "#eef1f5", range: [0, 1.02], tickformat: ".0%" },
    yaxis2: { overlaying: "y", side: "right", showgrid: false, rangemode: "tozero", visible: hasH } }));
  // 3. output rate, budget used, sampling and shedding
  const rt = [];
  const [ox2, oy2] = seriesOf(n, "output_rate", "queries");
  rt.push({ x: ox2, y: oy2, name: "output rows/s", mode: "lines", line: { color: C.out, width: 1.6 } });
  for (const [key, name, color] of [["budget_used", "budget used", C.budget], ["sample_rate", "sampling", C.sample], ["shed_rate", "shed", C.shed]]) {
    let [x, y] = seriesOf(n, key, "queries");
    const [px, py, hasP] = pseries(q, key);
    if (key !== "budget_used" && hasP) { x = px; y = py; }      // the precision API's rates win
    if (y.some(isNum)) rt.push({ x, y, name, mode: "lines", yaxis: "y2", line: { color, width: 1.3, dash: key === "sample_rate" ? "dot" : "solid" } });
  }
  react(`ch-${n}-rate`, rt, baseLayout("output rate · budget · sampling · shedding", {
    yaxis2: { overlaying: "y", side: "right", range: [0, 1.05], tickformat: ".0%", showgrid: false } }));
}

// ---------------------------------------------------------------- streams & index view
function buildStreamCard(s) {
  const n = s.name;
  const card = el("article", { class: "card stream", id: "stream-" + n, "data-stream": n });
  card.append(el("div", { class: "chead" }, el("h3", {}, el("span", { text: n }), el("span", { class: "kind", text: "stream" }))));
  card.append(el("div", { class: "kv" },
    metricBox(`${n}.clock`, "clock (data time)"), metricBox(`${n}.tuples_in`, "tuples in"),
    metricBox(`${n}.ingest_rate`, "ingest /s (data time)"), metricBox(`${n}.ingest_rate_wall`, "ingest /s (wall)"),
    metricBox(`${n}.late_rows`, "late rows"), metricBox(`${n}.rejected_rows`, "rejected rows"),
    metricBox(`${n}.rejected_batches`, "rejected batches"), metricBox(`${n}.memory_bytes`, "memory")));
  card.append(el("div", { class: "sbody" }, el("div", { class: "chart", id: `ch-s-${n}-rate` }),
    el("div", { class: "chart", id: `ch-s-${n}-bad` })));
  const form = el("form", { class: "qcontrols" }, el("b", { text: "Knobs" }),
    el("label", {}, "sample rate ", el("input", { type: "text", name: "sample_rate" })),
    el("label", {}, "allowed lateness (s) ", el("input", { type: "text", name: "allowed_lateness" })),
    el("button", { type: "submit", text: "Apply" }));
  wireForm(form, () => `stream/${n}`, ["sample_rate", "allowed_lateness"], []);
  card.append(form);
  return card;
}
function buildSummaryCard(z) {
  const n = z.name;
  const card = el("article", { class: "card summary", id: "summary-" + n.replace(/\W/g, "_"), "data-summary": n });
  card.append(el("div", { class: "chead" }, el("h3", {}, el("span", { text: n }),
    el("span", { class: "kind", text: `on ${z.stream} · granularity ${z.granularity} s · COLLAPSE(${z.rate}, ${z.depth})` }))));
  const side = el("div", {},
    el("table", { class: "small prune" }),
    el("div", { class: "muted", text: "zone events (newest first)" }),
    el("ul", { class: "events" }));
  card.append(el("div", { class: "zrow" }, el("div", { class: "chart tall", id: `ch-z-${n.replace(/\W/g, "_")}` }), side));
  return card;
}
function renderStreams(f) {
  const sroot = $("#streams");
  const want = f.streams.map((s) => s.name).join(",");
  if (sroot.dataset.order !== want) { sroot.replaceChildren(...f.streams.map(buildStreamCard)); sroot.dataset.order = want; observeCharts(sroot); }
  for (const s of f.streams) {
    const card = $("#stream-" + s.name); const n = s.name;
    setMetric(card, `${n}.clock`, s.clock, "s");
    setMetric(card, `${n}.tuples_in`, s.tuples_in, "int");
    setMetric(card, `${n}.ingest_rate`, s.ingest_rate, null, "measured once two frames' data time differs");
    setMetric(card, `${n}.ingest_rate_wall`, s.ingest_rate_wall);
    setMetric(card, `${n}.late_rows`, s.late_rows, "int", "no summary or stream counts late rows");
    setMetric(card, `${n}.rejected_rows`, s.rejected_rows, "int");
    setMetric(card, `${n}.rejected_batches`, s.rejected_batches, "int");
    setMetric(card, `${n}.memory_bytes`, s.memory_bytes, "bytes", "no summary on this stream reports memory");
    card.querySelector(`[data-metric="${n}.late_rows"] .l`).textContent = s.late_source === "summaries" ? "late rows (index)" : "late rows";
    card.querySelector(`[data-metric="${n}.memory_bytes"] .l`).textContent = s.memory_source === "summaries" ? "memory (summaries)" : "memory";
    syncForm(card.querySelector("form"), { sample_rate: s.knobs.sample_rate && s.knobs.sample_rate.value,
      allowed_lateness: s.knobs.allowed_lateness && s.knobs.allowed_lateness.value });
    const [x1, y1] = seriesOf(n, "ingest_rate", "streams");
    const [x2, y2] = seriesOf(n, "ingest_rate_wall", "streams");
    react(`ch-s-${n}-rate`, [
      { x: x1, y: y1, name: "per s of data time", mode: "lines", line: { color: C.data } },
      { x: x2, y: y2, name: "per s of wall time", mode: "lines", yaxis: "y2", line: { color: C.wall, dash: "dot" } }],
    baseLayout("ingest rate (tuples/s)", { yaxis2: { overlaying: "y", side: "right", showgrid: false, rangemode: "tozero" } }));
    const [lx, ly] = seriesOf(n, "late_rows", "streams");
    const [qx, qy] = seriesOf(n, "rejected_rows", "streams");
    const [mx, my] = seriesOf(n, "memory_bytes", "streams");
    react(`ch-s-${n}-bad`, [
      { x: lx, y: ly, name: "late rows", mode: "lines", line: { color: C.late, shape: "hv" } },
      { x: qx, y: qy, name: "rejected rows", mode: "lines", line: { color: C.rej, shape: "hv" } },
      { x: mx, y: my, name: "memory (bytes)", mode: "lines", yaxis: "y2", line: { color: C.mem, dash: "dot" } }],
    baseLayout("late · rejected (cumulative) · memory", { yaxis2: { overlaying: "y", side: "right", showgrid: false, rangemode: "tozero" } }));
  }
  const zroot = $("#summaries");
  const zwant = f.summaries.map((z) => z.name).join(",");
  if (zroot.dataset.order !== zwant) {
    zroot.replaceChildren(...(f.summaries.length ? f.summaries.map(buildSummaryCard)
      : [el("div", { class: "card na-box", text: "no summaries declared (CREATE SUMMARY ... ON stream)" })]));
    zroot.dataset.order = zwant; observeCharts(zroot);
  }
  for (const z of f.summaries) drawSummary(z);
}
function trackZones(f) {
  // zone events from consecutive frames: a zone id that is new in granularity g (reason "collapse":
  // COLLAPSE moved older data down into g) or that left g
  for (const z of f.summaries) {
    const prev = S.zones[z.name]; const cur = {};
    z.zones_per_granularity.forEach((zs, g) => zs.forEach((zz) => { cur[zz.id] = [g, zz]; }));
    const evs = S.events[z.name] || (S.events[z.name] = []);
    if (prev) {
      for (const [id, [g, zz]] of Object.entries(cur)) {
        if (prev[id]) continue;
        if (zz.reason === "collapse") evs.unshift({ t: z.clock, kind: "collapse", text: `COLLAPSE → G${g + 1}: [${fmt(zz.start, "s")}, ${fmt(zz.max_ts, "s")}] ${zz.n} tuples` });
        else if (g === 0) evs.unshift({ t: z.clock, kind: "new", text: `boundary at ${fmt(zz.start, "s")} (G1, ${zz.reason})` });
      }
      for (const [id, [g, zz]] of Object.entries(prev)) {
        if (cur[id] || g !== z.zones_per_granularity.length - 1) continue;
        evs.unshift({ t: z.clock, kind: "drop", text: `dropped from G${g + 1}: [${fmt(zz.start, "s")}, ${fmt(zz.max_ts, "s")}]` });
      }
      if (evs.length > MAX_EVENTS) evs.length = MAX_EVENTS;
    }
    S.zones[z.name] = cur;
  }
}
function drawSummary(z) {
  const key = z.name.replace(/\W/g, "_");
  const card = $("#summary-" + key); if (!card) return;
  const G = z.zones_per_granularity.length;
  const labels = z.zones_per_granularity.map((_, g) => `G${g + 1}`);
  const byReason = {};
  let lo = Infinity;
  z.zones_per_granularity.forEach((zs, g) => zs.forEach((zz) => {
    const r = zz.reason in ZONE_COLORS ? zz.reason : "period";
    const b = byReason[r] || (byReason[r] = { base: [], x: [], y: [], text: [], custom: [] });
    const start = Math.min(zz.start, isNum(zz.min_ts) ? zz.min_ts : zz.start);
    const end = Math.max(isNum(zz.max_ts) ? zz.max_ts : start, start + 0.05);
    b.base.push(start); b.x.push(end - start); b.y.push(labels[g]); b.text.push(String(zz.n));
    b.custom.push(`zone ${zz.id} · ${zz.reason} · [${start.toFixed(2)}, ${end.toFixed(2)}] · ${zz.n} tuples`);
    lo = Math.min(lo, start);
  }));
  const traces = Object.entries(byReason).map(([r, b]) => ({
    type: "bar", orientation: "h", name: r === "period" ? "new zone (period)" : r === "max" ? "new zone (max length)" : r,
    base: b.base, x: b.x, y: b.y, text: b.text, textposition: "inside", insidetextanchor: "middle",
    hovertext: b.custom, hoverinfo: "text", marker: { color: ZONE_COLORS[r], line: { color: "#fff", width: 1.5 } },
  }));
  const now = isNum(z.clock) ? z.clock : 0;
  const shapes = isNum(z.clock) ? [{ type: "line", x0: now, x1: now, yref: "paper", y0: 0, y1: 1, line: { color: "#111827", width: 1, dash: "dot" } }] : [];
  const ann = traces.length ? [{ x: now, y: 1, yref: "paper", text: "now", showarrow: false, font: { size: 10 }, yanchor: "bottom" }]
    : [naNote("no zones yet")];
  react(`ch-z-${key}`, traces, baseLayout("time zones per granularity (newest at the right; COLLAPSE moves zones down)", {
    barmode: "overlay", bargap: 0.25, shapes, annotations: ann,
    yaxis: { categoryorder: "array", categoryarray: labels.slice().reverse(), type: "category", gridcolor: "#eef1f5",
      range: [-0.5, G - 0.5], fixedrange: true },
    xaxis: { gridcolor: "#eef1f5", ticksuffix: " s", range: isFinite(lo) ? [lo - 1, now + 2] : undefined },
    legend: { orientation: "h", y: -0.16, x: 0, font: { size: 10 } }, margin: { l: 36, r: 12, t: 24, b: 30 } }));
  card.dataset.zones = String(z.zones);
  const c = z.counters || {};
  const rows = [["zones (cells)", `${fmt(z.zones, "int")} (${fmt(z.cells, "int")})`], ["tuples held", fmt(z.tuples, "int")],
    ["memory", fmt(z.nbytes, "bytes")], ["ingested", fmt(c.ingested, "int")], ["collapses", fmt(c.collapses, "int")],
    ["zones started", fmt(c.zones_started, "int")], ["zones dropped (tuples)", `${fmt(c.zones_dropped, "int")} (${fmt(c.tuples_dropped, "int")})`],
    ["probe nodes visited", fmt(c.nodes_visited, "int")], ["tuples compared", fmt(c.tuples_compared, "int")],
    ["tuples compared per node visited", c.tuples_compared && c.nodes_visited ? fmt(c.tuples_compared / c.nodes_visited) : "not available"]];
  const tbl = card.querySelector("table.prune");
  tbl.replaceChildren(...rows.map(([k, v]) => el("tr", {}, el("td", { text: k }), el("td", { text: v == null ? "not available" : v }))));
  tbl.rows[0].cells[1].dataset.metric = `${z.name}.zones`; tbl.rows[0].cells[1].dataset.value = String(z.zones);
  const ul = card.querySelector("ul.events");
  const evs = S.events[z.name] || [];
  ul.replaceChildren(...(evs.length ? evs.slice(0, 12).map((e) => el("li", { class: e.kind },
    `t=${fmt(e.t, "s")}  ${e.text}`)) : [el("li", { class: "muted", text: "waiting for the next boundary…" })]));
}

// ---------------------------------------------------------------- plans & allocator view
function opLine(st) {
  const bits = [];
  for (const [k, lab] of [["tuples_in", "in"], ["tuples_out", "out"], ["state_rows", "state"], ["work", "work"],
    ["pt_probes", "probes"], ["queued", "queued"], ["outputs", "outputs"]]) {
    if (isNum(st[k])) bits.push(`${lab} ${fmt(st[k], "int")}`);
  }
  return bits.join(" · ");
}
function planNode(node, byId) {
  const st = node.stats || {};
  const cls = "op" + (String(node.kind).startsWith("pt_") ? " pt" : node.kind === "scan" ? " scan" : "");
  const chips = el("div", { class: "chips" });
  for (const s of node.synopses || []) chips.append(el("span", { class: "chip syn", title: "synopsis", text: `synopsis: ${s.structure || s.kind || "?"}${isNum(s.rows) ? " · " + fmt(s.rows, "int") + " rows" : ""}` }));
  for (const qu of node.queues || []) {
    const qs = qu.stats || {};
    // the plan view gives a queue's length as ``rows`` (and ``bytes``); control tables as entries / nbytes
    const n = qs.entries ?? qs.size ?? qu.rows ?? null;
    const b = isNum(qs.nbytes) ? qs.nbytes : qu.bytes;
    chips.append(el("span", { class: "chip q", title: qu.kind || "queue", text: `${qu.name === "queue" ? "queue" : "queue " + qu.name}: ${fmt(n, "int") ?? "?"} entries${isNum(b) ? " · " + fmt(b, "bytes") : ""}` }));
  }
  for (const [k, v] of Object.entries(node.knobs || {})) {
    if (typeof v === "object" && v !== null) continue;
    chips.append(el("span", { class: "chip knob", title: "knob", text: `${k} = ${v}` }));
  }
  const box = el("div", { class: cls, "data-node": node.id, title: JSON.stringify(st, null, 1).slice(0, 1500) },
    el("div", { class: "h" }, node.label || node.kind, el("span", { class: "k", text: node.kind })),
    el("div", { class: "s", text: opLine(st) }), chips);
  const li = el("li", {}, box);
  const kids = (node.children || []).map((c) => byId[c]).filter(Boolean);
  if (kids.length) li.append(el("ul", {}, ...kids.map((k) => planNode(k, byId))));
  return li;
}
function renderPlans(f) {
  const root = $("#plans");
  const cards = orderQueries(f.queries).map((q) => {
    const p = q.plan || {}; const nodes = p.nodes || [];
    const byId = {}; for (const nd of nodes) byId[nd.id] = nd;
    if (p.edges && nodes.length && !nodes.some((nd) => nd.children)) {       // plan_view: edges child -> parent
      for (const nd of nodes) nd.children = [];
      for (const [a, b] of p.edges) if (byId[b]) byId[b].children.push(a);
    }
    const kids = new Set(nodes.flatMap((nd) => nd.children || []));
    const roots = nodes.filter((nd) => !kids.has(nd.id));
    const card = el("article", { class: "card plan", "data-plan": q.name },
      el("div", { class: "chead" }, el("h3", {}, el("span", { text: q.name }), el("span", { class: "kind", text: q.kind })),
        el("div", { class: "right" }, el("span", { class: "badge", title: "where the plan comes from", text: p.source === "plan_view" ? "plan view" : "control tables" }))),
      el("ul", { class: "tree" }, ...roots.map((r) => planNode(r, byId))));
    return card;
  });
  root.replaceChildren(...cards);
  renderAllocator(f);
}
function renderAllocator(f) {
  const box = $("#allocator");
  const a = f.allocator;
  const kids = [el("h3", { text: "Allocator" })];
  if (!a) {
    kids.push(el("div", { class: "na-box", text: "not available: this engine has no allocator (engine.allocator); budgets and weights are still stored and shown." }));
  } else if (a.error) {
    kids.push(el("div", { class: "na-box", text: "allocator error: " + a.error }));
  } else {
    kids.push(el("div", {}, el("b", { text: "why: " }), a.reason || "–"));
    kids.push(el("table", { class: "small" },
      el("tr", {}, el("td", { text: "enabled" }), el("td", { text: String(a.enabled !== false) })),
      el("tr", {}, el("td", { text: "decided at (data time)" }), el("td", { text: fmt(a.t, "s") ?? "–" })),
      el("tr", {}, el("td", { text: "memory budget" }), el("td", { text: fmt(a.memory_bytes, "bytes") ?? "unlimited" })),
      el("tr", {}, el("td", { text: "CPU budget (units/s)" }), el("td", { text: fmt(a.cpu_units_per_s) ?? "unlimited" })),
      el("tr", {}, el("td", { text: "replans" }), el("td", { text: fmt(a.replans, "int") ?? "–" })),
      el("tr", {}, el("td", { text: "method" }), el("td", { text: a.method ?? "–" })),
      el("tr", {}, el("td", { text: "objective (Σ weight × precision)" }), el("td", { text: fmt(a.objective) ?? "–" }))));
    const pq = a.per_query || {};
    const rows = Object.entries(pq).map(([qid, d]) => el("tr", {},
      el("td", { text: "q" + String(qid).replace(/^q/, "") }), el("td", { text: fmt(d.weight) ?? "–" }),
      el("td", { text: fmt(d.predicted_precision) ?? "–" }), el("td", { text: fmt(d.memory, "bytes") ?? "–" }),
      el("td", { text: fmt(d.cpu) ?? "–" }),
      el("td", { class: "wrap", text: Object.entries(d.knobs || {}).map(([k, v]) => `${k}=${typeof v === "number" ? fmt(v) : v}`).join(" ") + (d.infeasible ? ` · infeasible: ${d.infeasible}` : "") })));
    kids.push(el("h4", { text: "per query" }), el("table", { class: "small alloc" },
      el("tr", {}, ...["query", "weight", "pred. precision", "memory", "cpu", "knobs"].map((h) => el("th", { text: h }))), ...rows));
  }
  kids.push(el("h4", { text: "Budgets and weights (control tables)" }));
  kids.push(el("table", { class: "small" },
    ...Object.entries(f.engine.knobs).map(([k, v]) => el("tr", {}, el("td", { text: k }), el("td", { text: v.value == null ? "unlimited" : String(v.value) }))),
    ...f.queries.map((q) => el("tr", {}, el("td", { text: `${q.name} weight · active` }), el("td", { text: `${q.weight} · ${q.active}` })))));
  box.replaceChildren(...kids);
}

// ---------------------------------------------------------------- visibility, tabs, start
const io = ("IntersectionObserver" in window) ? new IntersectionObserver((entries) => {
  let redraw = false;
  for (const e of entries) {
    if (e.isIntersecting) { if (!S.visible.has(e.target.id)) redraw = true; S.visible.add(e.target.id); }
    else S.visible.delete(e.target.id);
  }
  if (redraw) render();
}, { rootMargin: "200px" }) : null;
function observeCharts(root) {
  for (const c of root.querySelectorAll(".chart")) { if (io) io.observe(c); else S.visible.add(c.id); }
}
function showView(v) {
  S.view = v;
  for (const t of $$(".tab")) t.classList.toggle("active", t.dataset.view === v);
  for (const s of $$(".view")) s.classList.toggle("active", s.id === "view-" + v);
  render();
  window.dispatchEvent(new Event("resize"));
}
function start() {
  for (const t of $$(".tab")) t.addEventListener("click", () => showView(t.dataset.view));
  const tok = $("#token");
  const fromUrl = new URLSearchParams(location.search).get("access_token");   // /dashboard?access_token=...
  if (fromUrl) sessionStorage.setItem("sketchql.token", fromUrl);
  tok.value = sessionStorage.getItem("sketchql.token") || "";
  tok.addEventListener("change", () => {
    if (tok.value) sessionStorage.setItem("sketchql.token", tok.value); else sessionStorage.removeItem("sketchql.token");
    S.frame = null;     // reload with the new credentials
  });
  wireForm($("#budgets"), () => "engine/engine", ["memory_bytes", "cpu_units_per_s"], []);
  if (!window.Plotly) toast("chart library missing: install the service extra (pip install 'sketchql[service]')", true);
  const v = (location.hash || "").replace("#", "");
  if (["queries", "streams", "plans"].includes(v)) showView(v);
  feed();
}
document.addEventListener("DOMContentLoaded", start);
