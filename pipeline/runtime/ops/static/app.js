// The dashboard: one document a second over the WebSocket (pipeline/runtime/ops/dashboard.py describes
// it), drawn with DOM calls only (text through textContent: nothing from the pipeline becomes markup).
// Operator actions POST to /api/... with the token as a Bearer header, after a confirmation.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
let lastDoc = null;
let lastAt = 0;

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function num(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return "-";
  return Number(v).toLocaleString("en-US", {maximumFractionDigits: digits === undefined ? 0 : digits,
    minimumFractionDigits: digits === undefined ? 0 : Math.min(digits, 2)});
}

function stateClass(state) {
  if (state === "RUNNING" || state === "ACTIVE" || state === "closed") return "ok";
  if (state === "REDUCING" || state === "STARTING" || state === "BACKOFF" || state === "half_open") return "warn";
  return "bad";
}

function fillBody(table, rows) {
  const body = table.tBodies[0];
  body.replaceChildren(...rows);
}

// ---------------------------------------------------------------------------------------- graph
function drawGraph(doc) {
  const g = $("graph");
  const nodes = doc.graph.nodes;
  const cols = Math.max(1, ...nodes.map((n) => n.col + 1));
  const rows = Math.max(1, ...nodes.map((n) => n.row + 1));
  const W = 150, H = 56, GX = 90, GY = 50, TOP = 36;
  const width = cols * (W + GX), height = rows * (H + GY) + TOP + 20;
  g.setAttribute("viewBox", `0 0 ${width} ${height}`);
  g.setAttribute("height", String(height));
  g.replaceChildren();
  const at = {};
  for (const n of nodes) at[n.name] = {x: 10 + n.col * (W + GX), y: TOP + n.row * (H + GY)};
  const stages = Object.fromEntries(doc.stages.map((s) => [s.name, s]));
  const rings = Object.fromEntries(doc.rings.map((r) => [r.name, r]));
  const below = {};
  for (const e of doc.graph.edges) {
    const a = at[e.from], b = at[e.to];
    if (!a || !b) continue;
    const r = rings[e.ring] || {};
    let d, lx, ly;
    const span = Math.round((b.x - a.x) / (W + GX));
    if (!e.back && span === 1) {  // to the next column: side to side
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
      d = `M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2},${y2}`;
      lx = (x1 + x2) / 2; ly = (y1 + y2) / 2 - 6;
    } else if (!e.back && span > 1) {  // over the columns between: an arc above the boxes
      const x1 = a.x + W * 0.75, y1 = a.y, x2 = b.x + W * 0.25, y2 = b.y, top = Math.min(y1, y2) - 28;
      d = `M${x1},${y1} C${x1},${top} ${x2},${top} ${x2},${y2}`;
      lx = (x1 + x2) / 2; ly = top + 4;
    } else {  // back to an earlier column (or from below): an arc under the boxes, deeper for each one
      const k = (below[e.to] = (below[e.to] || 0) + 1);
      const x1 = a.x + W / 2, y1 = a.y + H, x2 = b.x + W / 2 - 12 * k, y2 = b.y + H, dy = 18 + 16 * k;
      d = `M${x1},${y1} C${x1},${y1 + dy} ${x2},${y2 + dy} ${x2},${y2}`;
      lx = (x1 + x2) / 2; ly = Math.max(y1, y2) + dy - 4;
    }
    const bad = (r.dropped || 0) > 0 || (r.crc_errors || 0) > 0;
    g.appendChild(svg("path", {d, class: "edge" + (bad ? " edge-bad" : "")}));
    g.appendChild(svg("text", {x: lx, y: ly, class: "edge-label" + (bad ? " bad-label" : ""), "text-anchor": "middle"},
      `${e.ring} ${num(r.depth)}` + ((r.dropped || 0) > 0 ? ` ✕${num(r.dropped)}` : "")));
  }
  for (const n of nodes) {
    const p = at[n.name], s = stages[n.name];
    const grp = svg("g", {"data-node": n.name});
    grp.appendChild(svg("rect", {x: p.x, y: p.y, width: W, height: H, rx: 6,
      class: "node " + (s ? stateClass(s.state) : "sup")}));
    grp.appendChild(svg("text", {x: p.x + 8, y: p.y + 18, class: "node-name"}, n.name));
    const line2 = s ? `${s.state}  ${num(s.out_per_s)} out/s` : "control";
    grp.appendChild(svg("text", {x: p.x + 8, y: p.y + 36, class: "node-sub"}, line2));
    if (s) grp.appendChild(svg("text", {x: p.x + 8, y: p.y + 50, class: "node-sub"},
      `p99 ${num(s.p99_us)} µs`));
    g.appendChild(grp);
  }
}

// ---------------------------------------------------------------------------------------- tables
function sparkline(series) {
  const w = 160, h = 28;
  const s = svg("svg", {width: w, height: h, viewBox: `0 0 ${w} ${h}`, class: "spark"});
  const all = [...series.p50_us, ...series.p99_us].filter((v) => v > 0);
  if (!all.length) return s;
  const lo = Math.log10(Math.min(...all)), hi = Math.log10(Math.max(...all));
  const span = Math.max(hi - lo, 0.3);
  const line = (vals, cls) => {
    if (vals.length < 2) return;
    const step = w / (vals.length - 1);
    const pts = vals.map((v, i) => `${(i * step).toFixed(1)},${(h - 2 - (Math.log10(Math.max(v, 1e-3)) - lo) / span * (h - 4)).toFixed(1)}`);
    s.appendChild(svg("polyline", {points: pts.join(" "), class: cls}));
  };
  line(series.p99_us, "spark-p99");
  line(series.p50_us, "spark-p50");
  return s;
}

function drawStages(doc) {
  fillBody($("stages"), doc.stages.map((s) => {
    const tr = el("tr", {"data-stage": s.name});
    tr.appendChild(el("td", {}, s.name));
    tr.appendChild(el("td", {class: "state " + stateClass(s.state)}, s.state));
    tr.appendChild(el("td", {class: "n"}, s.pid || "-"));
    tr.appendChild(el("td", {class: "n"}, s.restarts));
    tr.appendChild(el("td", {class: "n in-rate"}, num(s.in_per_s)));
    tr.appendChild(el("td", {class: "n out-rate"}, num(s.out_per_s)));
    tr.appendChild(el("td", {class: "n"}, num(s.cpu_pct, 1)));
    tr.appendChild(el("td", {class: "n"}, num(s.p50_us, 1)));
    tr.appendChild(el("td", {class: "n"}, num(s.p99_us, 1)));
    const sp = el("td", {});
    sp.appendChild(sparkline(doc.spark[s.name] || {p50_us: [], p99_us: []}));
    tr.appendChild(sp);
    tr.appendChild(el("td", {class: "n"}, num(s.heartbeat_age_ms)));
    tr.appendChild(el("td", {class: "err"}, s.last_error));
    return tr;
  }));
}

function drawRings(doc) {
  fillBody($("rings"), doc.rings.map((r) => {
    const tr = el("tr", {"data-ring": r.name});
    tr.appendChild(el("td", {}, `${r.name} (${r.policy})`));
    tr.appendChild(el("td", {}, `${r.producer || "?"} → ${r.consumer || "?"}`));
    const depth = el("td", {class: "n"});
    const bar = el("div", {class: "bar"});
    const fill = el("div", {class: "fill"});
    fill.style.width = `${Math.min(100, 100 * r.depth / Math.max(r.capacity, 1)).toFixed(1)}%`;
    bar.appendChild(fill);
    depth.appendChild(bar);
    depth.appendChild(el("span", {}, `${num(r.depth)}/${num(r.capacity)}`));
    tr.appendChild(depth);
    tr.appendChild(el("td", {class: "n"}, num(r.written_per_s)));
    tr.appendChild(el("td", {class: "n" + (r.dropped ? " bad" : "")}, num(r.dropped)));
    tr.appendChild(el("td", {class: "n" + (r.crc_errors ? " bad" : "")}, num(r.crc_errors)));
    tr.appendChild(el("td", {class: "n"}, num(r.full_events)));
    tr.appendChild(el("td", {class: "n"}, num(r.stall_ms, 1)));
    return tr;
  }));
}

function drawTrading(doc) {
  fillBody($("positions"), doc.positions.map((p) => {
    const tr = el("tr", {"data-instrument": p.instrument});
    tr.appendChild(el("td", {}, p.instrument));
    tr.appendChild(el("td", {class: "n"}, num(p.lots, 4)));
    tr.appendChild(el("td", {class: "n " + ((p.pnl || 0) < 0 ? "bad" : "")}, num(p.pnl, 2)));
    return tr;
  }));
  const risk = $("risk");
  risk.replaceChildren(...doc.risk.map((r) => {
    const div = el("div", {class: "risk-row"});
    div.appendChild(el("span", {class: "state " + stateClass(r.state)}, `${r.stage} ${r.state}`));
    div.appendChild(el("span", {}, ` approved ${num(r.approved)} · denied ${num(r.denied)}`));
    const reasons = Object.entries(r.denials_by_reason).filter(([, n]) => n > 0)
      .map(([k, n]) => `${k} ${num(n)}`).join(", ");
    if (reasons) div.appendChild(el("div", {class: "muted"}, reasons));
    return div;
  }));
  fillBody($("denials"), doc.denials.slice().reverse().map((d) => {
    const tr = el("tr", {});
    for (const v of [num(d.age_s, 1), d.instrument, d.side, num(d.price, 2), num(d.size, 4), d.reason]) {
      tr.appendChild(el("td", {}, v));
    }
    tr.title = d.detail || "";
    return tr;
  }));
}

function drawHeader(doc) {
  const h = $("health");
  h.textContent = doc.health.ok ? "healthy" : "unhealthy";
  h.className = "badge " + (doc.health.ok ? "ok" : "bad");
  $("why").textContent = doc.health.why.join("; ");
  const t = $("trading");
  t.textContent = doc.halted ? "halted by operator/supervisor" : "trading";
  t.className = "badge " + (doc.halted ? "bad" : "ok");
  const risk = doc.risk[0];
  const rs = $("risk-state");
  rs.textContent = risk ? risk.state : "-";
  rs.className = risk ? stateClass(risk.state) : "";
  const llm = doc.llm[0];
  const bs = $("breaker-state");
  bs.textContent = llm ? llm.breaker : "-";
  bs.className = llm ? stateClass(llm.breaker) : "";
  const guard = $("guard-state");
  guard.textContent = doc.latency_guard ? doc.latency_guard.state : "-";
  guard.className = doc.latency_guard ? (doc.latency_guard.state === "OK" ? "ok" : "bad") : "";
  guard.title = doc.latency_guard ? doc.latency_guard.reason : "";
  $("breaker-score").textContent = llm && llm.score !== null && llm.score !== undefined ? `score ${num(llm.score, 2)}` : "";
  const sel = $("restart-stage");
  const names = doc.stages.map((s) => s.name);
  if (sel.options.length !== names.length) {
    sel.replaceChildren(...names.map((n) => el("option", {value: n}, n)));
  }
}

function render(doc) {
  lastDoc = doc;
  lastAt = Date.now();
  drawHeader(doc);
  drawGraph(doc);
  drawStages(doc);
  drawRings(doc);
  drawTrading(doc);
  $("updated").textContent = "just now";
}

// ---------------------------------------------------------------------------------------- live feed
function connect() {
  const ws = new WebSocket(`ws://${location.host}/ws`);
  ws.onopen = () => { $("conn").textContent = "live"; };
  ws.onmessage = (ev) => { try { render(JSON.parse(ev.data)); } catch (e) { $("conn").textContent = "bad update: " + e; } };
  ws.onclose = () => { $("conn").textContent = "disconnected, retrying"; setTimeout(connect, 1000); };
}

setInterval(() => {
  if (lastAt) $("updated").textContent = `${((Date.now() - lastAt) / 1000).toFixed(0)} s ago`;
}, 1000);

// ---------------------------------------------------------------------------------------- operator
async function act(path, what) {
  const token = $("token").value.trim();
  const result = $("result");
  if (!token) { result.textContent = "enter the operator token first"; return; }
  if (!window.confirm(`${what}?`)) { result.textContent = `${what}: cancelled`; return; }
  result.textContent = `${what}: sending`;
  try {
    const resp = await fetch(path, {method: "POST", headers: {"Authorization": "Bearer " + token}, cache: "no-store"});
    const body = await resp.json().catch(() => ({}));
    result.textContent = `${what}: ${resp.status} ${body.ok ? "ok" : (body.error || "refused")}`;
    result.className = resp.ok ? "ok" : "bad";
  } catch (e) {
    result.textContent = `${what}: ${e}`;
    result.className = "bad";
  }
}

window.addEventListener("DOMContentLoaded", () => {
  $("token").value = sessionStorage.getItem("shmpipe-token") || "";
  $("token").addEventListener("input", () => sessionStorage.setItem("shmpipe-token", $("token").value.trim()));
  $("btn-halt").addEventListener("click", () => act("/api/halt", "Halt trading (the risk gateway stops new orders and cancels working ones)"));
  $("btn-resume").addEventListener("click", () => act("/api/resume", "Resume trading"));
  $("btn-kill").addEventListener("click", () => act("/api/kill-switch", "Kill switch: halt, cancel every working order, stay halted until resume"));
  $("btn-restart").addEventListener("click", () => {
    const name = $("restart-stage").value;
    if (name) act(`/api/restart/${encodeURIComponent(name)}`, `Restart stage ${name}`);
  });
  connect();
});
