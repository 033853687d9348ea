// The page of `tern report`: HTML, CSS and the script that draws the charts from the embedded JSON
// (report_json.cpp's ReportJson). html.cpp fills the @@...@@ markers. After drawing, the script writes what
// each chart drew (points per dataset) and any JavaScript error into <pre id="tern-drawn"> (the browser test
// reads it with chromium --dump-dom).
#include "report/html.h"

namespace tern::report {

const char* const kPageHead = R"TERN(<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@@TITLE@@</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:18px 0 6px}
table{border-collapse:collapse;margin:4px 0 10px} td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:14px}
.card{border:1px solid #ddd;border-radius:6px;padding:8px} .card h3{margin:0 0 4px;font-size:14px}
.note{color:#666;font-size:12px} #ab-sentence{font-size:16px;font-weight:600}
.axis label{margin-right:12px} .lost{background:rgba(220,50,50,.15);padding:0 4px}
</style>
<script>
window.ternErrors = [];
window.onerror = function (msg, src, line) { window.ternErrors.push(String(msg) + ' (line ' + line + ')'); };
window.addEventListener('unhandledrejection', function (e) { window.ternErrors.push('promise: ' + e.reason); });
</script>
<script>
)TERN";

const char* const kPageBody = R"TERN(
</script>
</head><body>
<h1 id="title"></h1>
<div class="note" id="subtitle"></div>
<h2>Cost and quality</h2>
<table id="summary"></table>
<div class="note">$ to reach: the first evaluation at or below the target validation loss (one run: its final
val loss rounded up; several: the best val loss all of them reach). Lost work: steps a resumed attempt redid.</div>
<section id="comparison"></section>
<section id="diagnosis"><h2>Diagnosis</h2>@@DIAGNOSIS@@</section>
<h2>Curves</h2>
<div class="axis">x axis:
 <label><input type="radio" name="axis" value="step" checked> step</label>
 <label><input type="radio" name="axis" value="tokens"> tokens</label>
 <label><input type="radio" name="axis" value="t"> wall time</label>
 <label id="usd-choice"><input type="radio" name="axis" value="usd"> dollars</label>
 <span class="note">marks: <span style="color:#0a0">┆ checkpoint</span> · <span style="color:#c00">│ preempted</span>
 · <span style="color:#00c">│ resume</span> · <span class="lost">lost work</span></span>
</div>
<div class="grid" id="charts"></div>
<pre id="tern-drawn" hidden></pre>
<script id="tern-data" type="application/json">@@DATA@@</script>
<script>
(function () {
'use strict';
const D = JSON.parse(document.getElementById('tern-data').textContent);
const runs = D.runs;
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf'];
const AXIS_TITLE = {step: 'step', tokens: 'tokens', t: 'wall time (s)', usd: 'dollars ($)'};
const hasUsd = runs.every(r => r.summary.usd !== null);
let axis = 'step';
const charts = {};

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
const none = v => v === null || v === undefined;
const num = (v, d) => none(v) ? '—' : Number(v).toFixed(d);
const int = v => none(v) ? '—' : Math.round(v).toLocaleString('en-US');
const usd = v => none(v) ? '—' : '$' + (Math.abs(v) < 0.01 ? Number(v).toPrecision(3) : Number(v).toFixed(4));
function dur(s) {
  if (none(s)) return '—';
  if (s < 120) return s.toFixed(1) + ' s';
  if (s < 7200) return (s / 60).toFixed(1) + ' min';
  return (s / 3600).toFixed(2) + ' h';
}

// --- tables ---
function cell(tr, run, key, value, text) {
  const td = el('td', {'data-run': run, 'data-key': key}, text);
  if (!none(value)) td.setAttribute('data-value', String(value));
  tr.appendChild(td);
}
function summaryTable() {
  const t = document.getElementById('summary');
  const target = D.comparison.target_val_loss;
  const head = ['run', 'precision', 'attempts', 'steps', 'tokens', 'wall time', 'final train loss',
                'final val loss', 'compute $', 'storage $', 'egress $', '$ / 1M tokens', 'tokens/s', 'MFU', 'energy kWh', 'J / token',
                'lost work', none(target) ? '$ to reach' : '$ to reach val ' + target.toFixed(2), 'time to reach'];
  const hr = el('tr');
  head.forEach(h => hr.appendChild(el('th', {}, h)));
  t.appendChild(hr);
  runs.forEach((r, i) => {
    const s = r.summary, tr = el('tr');
    const name = el('td', {'data-run': i, 'data-key': 'name'}, r.name);
    name.style.color = COLORS[i % COLORS.length];
    tr.appendChild(name);
    cell(tr, i, 'precision', r.precision, r.precision);
    cell(tr, i, 'attempts', r.attempts, String(r.attempts));
    cell(tr, i, 'steps', s.steps, int(s.steps));
    cell(tr, i, 'tokens', s.tokens, int(s.tokens));
    cell(tr, i, 'wall_s', s.wall_s, dur(s.wall_s));
    cell(tr, i, 'final_train_loss', s.final_train_loss, num(s.final_train_loss, 4));
    cell(tr, i, 'final_val_loss', s.final_val_loss, num(s.final_val_loss, 4));
    cell(tr, i, 'usd', s.usd, usd(s.usd));
    const np = 'no provider';
    cell(tr, i, 'storage_usd', s.storage_usd, none(s.storage_usd) ? np : usd(s.storage_usd) + ' (' + s.stored_gb.toPrecision(3) + ' GB in s3)');
    cell(tr, i, 'egress_usd', s.egress_usd, none(s.egress_usd) ? np : usd(s.egress_usd) + ' (model ' + s.model_gb.toPrecision(3) + ' GB out)');
    cell(tr, i, 'usd_per_mtok', s.usd_per_mtok, usd(s.usd_per_mtok));
    cell(tr, i, 'tokens_per_s', s.tokens_per_s, int(s.tokens_per_s));
    cell(tr, i, 'mfu', s.mfu, none(s.mfu) ? '—' : (100 * s.mfu).toFixed(1) + '%');
    cell(tr, i, 'energy_kwh', s.energy_kwh, none(s.energy_kwh) ? 'not measured' : s.energy_kwh.toPrecision(3));
    cell(tr, i, 'joules_per_token', s.joules_per_token, none(s.joules_per_token) ? '—' : s.joules_per_token.toPrecision(3));
    cell(tr, i, 'lost_steps', r.lost_steps, r.lost_steps ? r.lost_steps + ' steps (' + dur(r.lost_s) + ')' : 'none');
    const re = r.reach;
    const reached = re && re.reached;
    cell(tr, i, 'reach_usd', reached ? re.usd : null, !re ? '—' : reached ? usd(re.usd) : 'not reached');
    cell(tr, i, 'reach_t_s', reached ? re.t_s : null, reached ? dur(re.t_s) + ' (step ' + re.step + ')' : '—');
    t.appendChild(tr);
  });
}
function comparison() {
  if (runs.length < 2) return;
  const sec = document.getElementById('comparison');
  sec.appendChild(el('h2', {}, 'Comparison'));
  const r = D.comparison.ratios;
  if (r) sec.appendChild(el('p', {id: 'ab-sentence'}, r.sentence));
  const diff = D.comparison.config_diff, keys = Object.keys(diff);
  sec.appendChild(el('div', {'class': 'note'}, keys.length ? 'Config keys that differ (start row: start.*, ' +
      'the run directory\'s config.yaml: config.*):' : 'The runs\' configs do not differ.'));
  if (!keys.length) return;
  const t = el('table', {id: 'config-diff'}), hr = el('tr');
  hr.appendChild(el('th', {}, 'key'));
  runs.forEach(x => hr.appendChild(el('th', {}, x.name)));
  t.appendChild(hr);
  keys.forEach(k => {
    const tr = el('tr', {'data-key': k});
    tr.appendChild(el('td', {}, k));
    diff[k].forEach(v => tr.appendChild(el('td', {}, v)));
    t.appendChild(tr);
  });
  sec.appendChild(t);
}

// --- charts ---
function pts(run, name) {
  const s = run.series.series[name];
  if (!s) return [];
  const X = run.series.x[axis], out = [];
  for (let j = 0; j < s.i.length; j++) {
    const x = X[s.i[j]];
    if (!none(x)) out.push({x: x, y: s.y[j]});
  }
  return out;
}
const evalPts = run => run.series.evals.filter(e => !none(e[axis])).map(e => ({x: e[axis], y: e.y}));
// Checkpoints, preemptions and resumes as vertical lines, lost work shaded, on every chart.
const overlay = {
  id: 'ternOverlay',
  beforeDatasetsDraw(chart) {
    const xs = chart.scales.x, a = chart.chartArea, ctx = chart.ctx;
    ctx.save();
    (chart.options.plugins.ternOverlay.runs || runs).forEach(r => {
      r.series.lost.forEach(l => {
        if (none(l[axis][0]) || none(l[axis][1])) return;
        const x0 = xs.getPixelForValue(l[axis][0]), x1 = xs.getPixelForValue(l[axis][1]);
        ctx.fillStyle = 'rgba(220,50,50,0.15)';
        ctx.fillRect(Math.min(x0, x1), a.top, Math.max(2, Math.abs(x1 - x0)), a.bottom - a.top);
      });
      r.series.marks.forEach(m => {
        if (none(m[axis])) return;
        const x = xs.getPixelForValue(m[axis]);
        if (x < a.left || x > a.right) return;
        const ck = m.kind === 'checkpoint';
        ctx.strokeStyle = ck ? 'rgba(0,160,0,0.45)' : m.kind === 'preempted' ? '#c00' : '#00c';
        ctx.setLineDash(ck ? [2, 3] : []);
        ctx.beginPath(); ctx.moveTo(x, a.top); ctx.lineTo(x, a.bottom); ctx.stroke();
      });
    });
    ctx.restore();
  }
};
Chart.register(overlay);
function line(label, data, color, extra) {
  return Object.assign({label: label, data: data, borderColor: color, backgroundColor: color, borderWidth: 1.5,
                        pointRadius: 0, tension: 0}, extra || {});
}
function makeChart(id, title, note, build, yaxes, overlayRuns, stacked) {
  const card = el('div', {'class': 'card'});
  card.appendChild(el('h3', {}, title));
  if (note) card.appendChild(el('div', {'class': 'note'}, note));
  const canvas = el('canvas', {id: id, height: 260});
  card.appendChild(canvas);
  document.getElementById('charts').appendChild(card);
  const scales = {x: {type: 'linear', title: {display: true, text: AXIS_TITLE[axis]}}};
  yaxes.forEach((y, k) => {
    scales[y.id] = {type: y.log ? 'logarithmic' : 'linear', position: k ? 'right' : 'left', stacked: !!stacked,
                    title: {display: true, text: y.title}, grid: {drawOnChartArea: k === 0}};
  });
  const chart = new Chart(canvas, {
    type: 'line', data: {datasets: build()},
    options: {animation: false, responsive: true, parsing: true, normalized: true, spanGaps: true,
              interaction: {mode: 'nearest', intersect: false}, scales: scales,
              plugins: {legend: {labels: {boxWidth: 12}}, ternOverlay: {runs: overlayRuns}}}
  });
  charts[id] = {chart: chart, build: build};
}
function color(i, k) { return COLORS[(i + k) % COLORS.length]; }
function lossSets() {
  const sets = [];
  runs.forEach((r, i) => {
    const c = COLORS[i % COLORS.length], p = runs.length > 1 ? r.name + ' ' : '';
    sets.push(line(p + 'train loss', pts(r, 'loss'), c, {yAxisID: 'y'}));
    sets.push(line(p + 'val loss', evalPts(r), c, {yAxisID: 'y', borderDash: [6, 3], pointRadius: 2,
                                                    borderWidth: 2}));
  });
  return sets;
}
function pairSets(a, b, fa, fb) {
  return () => {
    const sets = [];
    runs.forEach((r, i) => {
      const p = runs.length > 1 ? r.name + ' ' : '';
      sets.push(line(p + a, pts(r, fa).map(q => ({x: q.x, y: q.y * (fa === 'mfu' ? 100 : 1)})), color(i, 0), {yAxisID: 'y'}));
      sets.push(line(p + b, pts(r, fb).map(q => ({x: q.x, y: q.y * (fb === 'mfu' ? 100 : 1)})), color(i, 0),
                     {yAxisID: 'y1', borderDash: [4, 3]}));
    });
    return sets;
  };
}
function draw() {
  document.getElementById('charts').textContent = '';
  for (const k in charts) { charts[k].chart.destroy(); delete charts[k]; }
  makeChart('chart-loss', 'Loss', 'train (solid) and validation (dashed)', lossSets, [{id: 'y', title: 'loss (nats)'}]);
  makeChart('chart-throughput', 'Throughput', 'tokens/s (solid) and MFU (dashed)',
            pairSets('tokens/s', 'MFU %', 'tokens_per_s', 'mfu'),
            [{id: 'y', title: 'tokens/s'}, {id: 'y1', title: 'MFU (%)'}]);
  makeChart('chart-optim', 'Learning rate and gradient norm', 'LR (solid), grad norm before clipping (dashed)',
            pairSets('LR', 'grad norm', 'lr', 'grad_norm'), [{id: 'y', title: 'LR'}, {id: 'y1', title: 'grad norm'}]);
  const parts = [['compute', 'compute_ms', '#4c78a8'], ['data wait', 'data_wait_ms', '#f58518'],
                 ['communication', 'comm_ms', '#54a24b'], ['checkpoint stall', 'ckpt_stall_ms', '#e45756']];
  runs.forEach((r, i) => {
    makeChart('chart-breakdown-' + i, 'Step time' + (runs.length > 1 ? ': ' + r.name : ''),
              'compute = step − data wait − communication; checkpoint stall after the step',
              () => parts.map(p => line(p[0], pts(r, p[1]), p[2], {fill: true, yAxisID: 'y'})),
              [{id: 'y', title: 'ms'}], [r], true);
  });
  if (runs.some(r => r.series.evals.some(e => !none(e.acc)))) {
    makeChart('chart-choices', 'Multiple-choice accuracy', 'eval.choices at each evaluation: acc (solid), acc_norm (dashed)', () => {
      const sets = [];
      runs.forEach((r, i) => {
        const p = runs.length > 1 ? r.name + ' ' : '';
        const at = k => r.series.evals.filter(e => !none(e[axis]) && !none(e[k])).map(e => ({x: e[axis], y: e[k]}));
        sets.push(line(p + 'acc', at('acc'), color(i, 0), {yAxisID: 'y', pointRadius: 2}));
        sets.push(line(p + 'acc_norm', at('acc_norm'), color(i, 0), {yAxisID: 'y', borderDash: [4, 3], pointRadius: 2}));
      });
      return sets;
    }, [{id: 'y', title: 'accuracy'}]);
  }
  if (runs.some(r => r.series.evals.some(e => e.mix))) {
    makeChart('chart-mix', 'Validation loss by dataset', 'data.mix: data.dir (solid) and each mixed-in dataset (dashed)', () => {
      const sets = [];
      runs.forEach((r, i) => {
        const p = runs.length > 1 ? r.name + ' ' : '';
        const ev = r.series.evals.filter(e => !none(e[axis]));
        sets.push(line(p + 'data.dir', ev.map(e => ({x: e[axis], y: e.y})), color(i, 0), {yAxisID: 'y', pointRadius: 2}));
        const dirs = [...new Set(ev.flatMap(e => Object.keys(e.mix || {})))];
        dirs.forEach((d, k) => sets.push(line(p + d, ev.filter(e => e.mix && !none(e.mix[d])).map(e => ({x: e[axis], y: e.mix[d]})),
                                              color(i, k + 1), {yAxisID: 'y', borderDash: [4, 3], pointRadius: 2})));
      });
      return sets;
    }, [{id: 'y', title: 'val loss'}]);
  }
  if (runs.some(r => r.series.series.gpu_util)) {
    makeChart('chart-gpu', 'GPU', 'utilisation (solid), power (dashed), memory (dotted)', () => {
      const sets = [];
      runs.forEach((r, i) => {
        const p = runs.length > 1 ? r.name + ' ' : '';
        if (!r.series.series.gpu_util) return;
        sets.push(line(p + 'util %', pts(r, 'gpu_util'), color(i, 0), {yAxisID: 'y'}));
        sets.push(line(p + 'power W', pts(r, 'gpu_power_w'), color(i, 0), {yAxisID: 'y1', borderDash: [4, 3]}));
        sets.push(line(p + 'memory GB', pts(r, 'gpu_mem_gb'), color(i, 0), {yAxisID: 'y2', borderDash: [1, 2]}));
      });
      return sets;
    }, [{id: 'y', title: 'utilisation (%)'}, {id: 'y1', title: 'power (W)'}, {id: 'y2', title: 'memory (GB)'}]);
  }
  report();
}
// What each chart drew, for the browser test and for anyone curious.
function report() {
  const out = {axis: axis, charts: {}, errors: window.ternErrors};
  for (const k in charts) {
    const c = charts[k].chart;
    out.charts[k] = c.data.datasets.map((d, j) => ({label: d.label, points: c.getDatasetMeta(j).data.length}));
  }
  const pre = document.getElementById('tern-drawn');
  pre.textContent = JSON.stringify(out);
  pre.setAttribute('data-ready', '1');
}
try {
  const names = runs.map(r => r.name).join(' vs ');
  document.title = 'tern report: ' + names;
  document.getElementById('title').textContent = 'tern report: ' + names;
  document.getElementById('subtitle').textContent = runs.map(r => r.name + ': ' + r.model + ', ' + r.device +
      ', ' + r.precision + (r.price_per_hour > 0 ? ', $' + r.price_per_hour + '/h' : ', no price')).join(' · ');
  if (!hasUsd) {
    document.getElementById('usd-choice').title = 'no price: run with --price-per-hour for a dollar axis';
    document.querySelector('input[value=usd]').disabled = true;
  }
  summaryTable();
  comparison();
  document.querySelectorAll('input[name=axis]').forEach(b => b.addEventListener('change', e => {
    axis = e.target.value;
    draw();
  }));
  // Several runs: loss against dollars first (what an A/B test is about), when every run has a price.
  if (runs.length > 1 && hasUsd) {
    axis = 'usd';
    document.querySelector('input[value=usd]').checked = true;
  }
  const want = new URLSearchParams(location.search).get('x');
  if (want && AXIS_TITLE[want] && (want !== 'usd' || hasUsd)) {
    axis = want;
    document.querySelector('input[value=' + want + ']').checked = true;
  }
  draw();
} catch (e) {
  window.ternErrors.push(String(e && e.stack || e));
  report();
}
})();
</script>
</body></html>
)TERN";

}  // namespace tern::report
