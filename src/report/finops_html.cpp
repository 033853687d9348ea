// The FinOps page of `tern report --ledger`: the run report's technique (report/html.h) — one file, Chart.js
// inlined, the figures of FinOpsJson embedded, no network. After drawing, the script writes what each chart
// drew (points per dataset) and any JavaScript error into <pre id="tern-drawn">, as the run report does;
// table cells carry data-key/data-value with the exact numbers.
#include "report/finops.h"
#include "report/html.h"

namespace tern::report {
namespace {

const char* const kFinOpsHead = R"TERN(<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tern FinOps</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:18px 0 6px}
table{border-collapse:collapse;margin:4px 0 10px} td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:14px}
.card{border:1px solid #ddd;border-radius:6px;padding:8px} .card h3{margin:0 0 4px;font-size:14px}
.note{color:#666;font-size:12px}
</style>
<script>
window.ternErrors = [];
window.onerror = function (msg, src, line) { window.ternErrors.push(String(msg) + ' (line ' + line + ')'); };
window.addEventListener('unhandledrejection', function (e) { window.ternErrors.push('promise: ' + e.reason); });
</script>
<script>
)TERN";

const char* const kFinOpsBody = R"TERN(
</script>
</head><body>
<h1>tern FinOps: every job in the ledger</h1>
<div class="note" id="subtitle"></div>
<h2>Totals</h2>
<table id="totals"></table>
<div class="note">GPU-hours: wall time × ranks of every attempt. Productive: time in steps that advanced a job.
Lost: steps redone after a preemption or crash (the supervisor's count). Money and hours count pro rata to the
part of an attempt inside the window; a preemption or failure counts when its attempt ended inside it.</div>
<div class="grid" id="charts"></div>
<h2>By project</h2>
<table id="projects"></table>
<h2>Top jobs by $</h2>
<table id="jobs"></table>
<div id="serving-section" hidden>
<h2>Serving (tern serve --usage-file)</h2>
<table id="serving"></table>
<table id="serving-projects"></table>
<table id="serving-models"></table>
<div class="note">Busy: at least one request in flight. The cost is the whole reserved time (busy + idle) at the
server's --price-per-hour; a project's share is its share of the generated tokens.</div>
</div>
<pre id="tern-drawn" hidden></pre>
<script id="tern-data" type="application/json">@@DATA@@</script>
<script>
(function () {
'use strict';
const D = JSON.parse(document.getElementById('tern-data').textContent);
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf'];
const charts = {};
const none = v => v === null || v === undefined;
const usd = v => none(v) ? '—' : '$' + (Math.abs(v) < 0.01 && v !== 0 ? Number(v).toPrecision(3) : Number(v).toFixed(2));
const num = (v, d) => none(v) ? '—' : Number(v).toFixed(d);
const pct = v => none(v) ? '—' : (100 * v).toFixed(1) + '%';
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function row(table, cells, key, value, th) {
  const tr = el('tr', key ? {'data-key': key} : {});
  cells.forEach((c, k) => {
    const td = el(th ? 'th' : 'td', {}, c);
    if (k === 1 && key) { td.setAttribute('data-key', key); td.setAttribute('data-value', none(value) ? '' : String(value)); }
    tr.appendChild(td);
  });
  table.appendChild(tr);
}
function totals() {
  const t = document.getElementById('totals'), T = D.totals, R = D.rates, L = D.lost;
  [['spend', usd(T.usd), 'usd', T.usd], ['GPU-hours', num(T.gpu_hours, 2), 'gpu_hours', T.gpu_hours],
   ['$ per GPU-hour', usd(T.usd_per_gpu_hour), 'usd_per_gpu_hour', T.usd_per_gpu_hour],
   ['productive time', pct(T.productive_fraction), 'productive_fraction', T.productive_fraction],
   ['GPU utilisation (jobs with NVML rows)', none(T.gpu_util_pct) ? '—' : num(T.gpu_util_pct, 1) + '%', 'gpu_util_pct', T.gpu_util_pct],
   ['jobs / attempts', T.jobs + ' / ' + T.attempts, 'jobs', T.jobs],
   ['preemptions', R.preemptions + ' (' + num(R.preemptions_per_job, 2) + ' a job, ' + num(R.preemptions_per_gpu_hour, 3) + ' a GPU-hour)', 'preemptions', R.preemptions],
   ['failures', R.failures + ' (' + num(R.failures_per_job, 2) + ' a job, ' + num(R.failures_per_gpu_hour, 3) + ' a GPU-hour)', 'failures', R.failures],
   ['jobs preempted / failed', pct(R.jobs_preempted_fraction) + ' / ' + pct(R.jobs_failed_fraction), 'jobs_preempted_fraction', R.jobs_preempted_fraction],
   ['lost work', Math.round(L.steps) + ' steps, ' + num(L.seconds, 1) + ' s, ' + usd(L.usd) + ' (' + pct(L.fraction_of_usd) + ' of spend)', 'lost_usd', L.usd]
  ].forEach(r => row(t, [r[0], r[1]], r[2], r[3]));
}
function projects() {
  const t = document.getElementById('projects');
  row(t, ['project', '$', 'GPU-hours', 'jobs', 'attempts', 'preemptions', 'failures', 'lost $'], null, null, true);
  D.by_project.forEach(p => row(t, [p.project, usd(p.usd), num(p.gpu_hours, 2), p.jobs, p.attempts, p.preemptions,
                                    p.failures, usd(p.lost_usd)], 'project.' + p.project, p.usd));
}
function jobs() {
  const t = document.getElementById('jobs');
  row(t, ['job', '$', 'project', 'state', 'instance', 'GPU-hours', 'attempts', 'preempted', 'lost $', '$/1M tokens', 'GPU util'], null, null, true);
  D.top_jobs.forEach(j => row(t, [j.job_id, usd(j.usd), j.project, j.state, j.instance || '—', num(j.gpu_hours, 2),
                                  j.attempts, j.preemptions, usd(j.lost_usd), usd(j.usd_per_mtok),
                                  none(j.gpu_util_pct) ? '—' : num(j.gpu_util_pct, 1) + '%'], 'job.' + j.job_id, j.usd));
}
function serving() {
  const S = D.serving;
  if (!S || !S.servers.length) return;
  document.getElementById('serving-section').hidden = false;
  const t = document.getElementById('serving');
  row(t, ['server (usage file)', '$', 'model', 'busy s', 'idle s', 'utilisation', 'requests', 'generated tokens', '$/1M tokens'], null, null, true);
  S.servers.forEach(s => row(t, [s.file, usd(s.usd), s.model, num(s.busy_s, 0), num(s.idle_s, 0), pct(s.utilisation),
                                 s.requests, s.generation_tokens, usd(s.usd_per_mtok)], 'serving.' + s.file, s.usd));
  const p = document.getElementById('serving-projects');
  row(p, ['project', '$', 'requests', 'prompt tokens', 'generated tokens', '429s'], null, null, true);
  S.by_project.forEach(x => row(p, [x.project, usd(x.usd), x.requests, x.prompt_tokens, x.generation_tokens, x.rate_limited],
                                'serving_project.' + x.project, x.usd));
  // The base model and each LoRA fine-tune served beside it (tern serve --lora): what each owner is billed.
  if (!S.by_model || !S.by_model.length) return;
  const m = document.getElementById('serving-models');
  row(m, ['served model or LoRA adapter', '$', 'requests', 'prompt tokens', 'generated tokens'], null, null, true);
  S.by_model.forEach(x => row(m, [x.model, usd(x.usd), x.requests, x.prompt_tokens, x.generation_tokens],
                              'serving_model.' + x.model, x.usd));
}
function chart(id, title, note, config) {
  const card = el('div', {'class': 'card'});
  card.appendChild(el('h3', {}, title));
  if (note) card.appendChild(el('div', {'class': 'note'}, note));
  const canvas = el('canvas', {id: id, height: 260});
  card.appendChild(canvas);
  document.getElementById('charts').appendChild(card);
  config.options = Object.assign({animation: false, responsive: true, plugins: {legend: {labels: {boxWidth: 12}}}},
                                 config.options || {});
  charts[id] = new Chart(canvas, config);
}
function draw() {
  const days = D.by_day_utc.map(d => d.day);
  chart('chart-spend-day', 'Spend per day (UTC), by project', 'stacked: one colour per project tag', {
    type: 'bar',
    data: {labels: days, datasets: D.projects.map((p, i) => ({label: p, backgroundColor: COLORS[i % COLORS.length],
        data: D.by_day_utc.map(d => d.by_project[p] || 0)}))},
    options: {scales: {x: {stacked: true}, y: {stacked: true, title: {display: true, text: 'dollars ($)'}}}}});
  chart('chart-project', 'Spend and GPU-hours per project', 'bars: $ (left), GPU-hours (right)', {
    type: 'bar',
    data: {labels: D.by_project.map(p => p.project), datasets: [
      {label: '$', data: D.by_project.map(p => p.usd), backgroundColor: '#4c78a8', yAxisID: 'y'},
      {label: 'GPU-hours', data: D.by_project.map(p => p.gpu_hours), backgroundColor: '#f58518', yAxisID: 'y1'}]},
    options: {scales: {y: {title: {display: true, text: 'dollars ($)'}},
                       y1: {position: 'right', grid: {drawOnChartArea: false}, title: {display: true, text: 'GPU-hours'}}}}});
  chart('chart-events', 'Preemptions, failures and lost $ per project', 'counts (left), lost $ (right)', {
    type: 'bar',
    data: {labels: D.by_project.map(p => p.project), datasets: [
      {label: 'preemptions', data: D.by_project.map(p => p.preemptions), backgroundColor: '#e45756', yAxisID: 'y'},
      {label: 'failures', data: D.by_project.map(p => p.failures), backgroundColor: '#9467bd', yAxisID: 'y'},
      {label: 'lost $', data: D.by_project.map(p => p.lost_usd), backgroundColor: '#72b7b2', yAxisID: 'y1'}]},
    options: {scales: {y: {title: {display: true, text: 'count'}, ticks: {precision: 0}},
                       y1: {position: 'right', grid: {drawOnChartArea: false}, title: {display: true, text: 'dollars ($)'}}}}});
}
function report() {
  const out = {charts: {}, errors: window.ternErrors};
  for (const k in charts) {
    const c = charts[k];
    out.charts[k] = c.data.datasets.map((d, j) => ({label: d.label, points: c.getDatasetMeta(j).data.length}));
  }
  const pre = document.getElementById('tern-drawn');
  pre.textContent = JSON.stringify(out);
  pre.setAttribute('data-ready', '1');
}
try {
  document.getElementById('subtitle').textContent = D.ledger + ' · ' + D.window.since_utc + ' to ' + D.window.now_utc;
  totals();
  projects();
  jobs();
  serving();
  draw();
  report();
} catch (e) {
  window.ternErrors.push(String(e && e.stack || e));
  report();
}
})();
</script>
</body></html>
)TERN";

}  // namespace

std::string FinOpsHtml(const FinOps& f, const std::string& chartjs) {
  const std::string body = kFinOpsBody;
  const size_t at = body.find("@@DATA@@");
  const std::string data = ScriptSafeJson(FinOpsJson(f, /*top=*/20).dump());
  std::string out;
  out.reserve(std::char_traits<char>::length(kFinOpsHead) + chartjs.size() + body.size() + data.size());
  out += kFinOpsHead;
  out += chartjs;
  out.append(body, 0, at);
  out += data;
  out.append(body, at + 8, std::string::npos);
  return out;
}

}  // namespace tern::report
