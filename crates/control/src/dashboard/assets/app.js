// The dashboard's main loop: every POLL_MS it reads the cluster (nodes, drives,
// volumes), the event log and /metrics through the REST API, keeps a short history of
// throughput and latency in the page, and redraws. A section whose call fails shows
// why and keeps its last data; the others go on.

import { ApiError, adoptTokenFromUrl, call, metricsText, setToken, token } from './api.js';
import { Actions } from './actions.js';
import { History, LineChart } from './chart.js';
import { EventLog } from './events.js';
import * as fmt from './format.js';
import * as metrics from './metrics.js';
import * as views from './views.js';

const POLL_MS = 2000;
/** How much history the charts keep and show. */
const WINDOW_MS = 120000;
/** The NQN prefix of volume subsystems (`docs/cluster.md`). */
const VOLUME_NQN = 'nqn.2026-01.io.ferrobay:vol:';

const $ = (id) => document.getElementById(id);

const state = {
  nodes: [],
  volumes: [],
  /** Nodes seen during this visit, so one that vanishes shows as down. */
  seen: new Map(),
  /** volume -> {t, read, write}: the last status counters. */
  lastIo: new Map(),
  /** volume -> {read, write} bytes/s now. */
  rates: new Map(),
  lastMetrics: null,
  timer: null,
  /** A refresh is running; another was asked for meanwhile. */
  running: false,
  again: false,
  stopped: false,
};

const throughput = { volume: new History(WINDOW_MS), node: new History(WINDOW_MS) };
const latency = new History(WINDOW_MS);
let throughputBy = 'volume';
let throughputChart;
let latencyChart;
let events;
let actions;

/** Shows (or clears) a section's error line. */
function sectionError(id, err) {
  const e = $(id);
  e.textContent = err ? err.message : '';
  e.hidden = !err;
}

function needToken(message) {
  state.stopped = true;
  const d = $('token-dialog');
  d.querySelector('.error').textContent = message;
  if (!d.open) d.showModal();
}

/** Rates from the owners' published I/O counters (every volume, any processor node). */
function sampleVolumeIo(views_) {
  const byNode = new Map();
  for (const v of views_) {
    const st = v.status;
    if (!st) continue;
    const name = v.record.name;
    const now = { t: st.updated_unix_ms, read: st.status.read_bytes, write: st.status.write_bytes, owner: st.owner };
    const before = state.lastIo.get(name);
    if (before && now.t > before.t && now.owner === before.owner) {
      const secs = (now.t - before.t) / 1000;
      const read = metrics.perSecond(before.read, now.read, secs);
      const write = metrics.perSecond(before.write, now.write, secs);
      if (read !== null && write !== null) {
        state.rates.set(name, { read, write });
        throughput.volume.add(`${name} read`, now.t, read);
        throughput.volume.add(`${name} write`, now.t, write);
        const n = byNode.get(now.owner) || { read: 0, write: 0, t: 0 };
        byNode.set(now.owner, { read: n.read + read, write: n.write + write, t: Math.max(n.t, now.t) });
      }
    }
    if (!before || now.t !== before.t) state.lastIo.set(name, now);
  }
  for (const [node, r] of byNode) {
    throughput.node.add(`${node} read`, r.t, r.read);
    throughput.node.add(`${node} write`, r.t, r.write);
  }
}

/** Mean command latency per volume from the processor's namespace histograms. */
function sampleLatency(text) {
  const now = Date.now();
  const samples = metrics.parse(text);
  const sum = metrics.sumBy(samples, 'ferrobay_namespace_latency_seconds_sum', 'subsystem');
  const count = metrics.sumBy(samples, 'ferrobay_namespace_latency_seconds_count', 'subsystem');
  const prev = state.lastMetrics;
  state.lastMetrics = { sum, count };
  let any = false;
  for (const [nqn, c] of count) {
    if (!nqn.startsWith(VOLUME_NQN)) continue;
    any = true;
    if (!prev || !prev.count.has(nqn)) continue;
    const dc = c - prev.count.get(nqn);
    const ds = sum.get(nqn) - prev.sum.get(nqn);
    // No command in the interval: no mean to draw (a gap, not a zero).
    if (dc <= 0 || ds < 0) continue;
    latency.add(nqn.slice(VOLUME_NQN.length), now, ds / dc);
  }
  $('latency-note').hidden = any;
}

async function refresh() {
  const [nodes, volumes, drives, ev, text] = await Promise.allSettled([
    call('GET', '/nodes'),
    call('GET', '/volumes'),
    call('GET', '/drives'),
    events.poll(),
    metricsText(),
  ]);
  const all = [nodes, volumes, drives, ev, text];
  const denied = all.find((r) => r.status === 'rejected' && r.reason instanceof ApiError && (r.reason.status === 401 || r.reason.status === 403));
  if (denied) {
    needToken(token() ? `the API refused the token: ${denied.reason.message}` : 'the API needs a token');
    return;
  }
  const now = Date.now();
  if (nodes.status === 'fulfilled') state.nodes = nodes.value;
  if (volumes.status === 'fulfilled') state.volumes = volumes.value.slice().sort((a, b) => a.record.name.localeCompare(b.record.name));
  sectionError('nodes-error', nodes.status === 'rejected' ? nodes.reason : null);
  sectionError('volumes-error', volumes.status === 'rejected' ? volumes.reason : null);
  sectionError('drives-error', drives.status === 'rejected' ? drives.reason : null);
  sectionError('events-error', ev.status === 'rejected' ? ev.reason : null);
  sectionError('charts-error', text.status === 'rejected' ? text.reason : null);

  const rows = views.nodeRows(state.nodes, state.volumes, state.seen);
  for (const n of rows) state.seen.set(n.name, n.role);
  views.renderSummary($('summary'), rows, state.volumes, now);
  views.renderNodes($('nodes').tBodies[0], rows, state.volumes, now);
  if (drives.status === 'fulfilled') views.renderDrives($('drives').tBodies[0], views.driveRows(drives.value));
  sampleVolumeIo(state.volumes);
  views.renderVolumes($('volumes').tBodies[0], state.volumes, state.rates, actions, now);
  actions.setNodes(rows);
  if (text.status === 'fulfilled') sampleLatency(text.value);
  for (const hist of [throughput.volume, throughput.node, latency]) hist.prune(now);
  throughputChart.draw(throughput[throughputBy], now);
  latencyChart.draw(latency, now);
  events.render(now);
  const ok = all.every((r) => r.status === 'fulfilled');
  $('updated').textContent = `${ok ? 'updated' : 'partly updated'} ${fmt.clock(now)}`;
  $('updated').dataset.ok = ok ? 'yes' : 'no';
  document.body.dataset.loaded = 'yes';
}

/** One refresh now (or right after the one running), then every POLL_MS. */
async function loop() {
  clearTimeout(state.timer);
  if (state.stopped) return;
  if (state.running) {
    state.again = true;
    return;
  }
  state.running = true;
  try {
    await refresh();
  } catch (e) {
    $('updated').textContent = `refresh failed: ${e.message}`;
  } finally {
    state.running = false;
  }
  if (state.stopped) return;
  if (state.again) {
    state.again = false;
    loop();
  } else {
    state.timer = setTimeout(loop, POLL_MS);
  }
}

function bindToken() {
  const d = $('token-dialog');
  d.querySelector('form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = d.querySelector('input[name=token]').value.trim();
    if (!t) {
      d.querySelector('.error').textContent = 'paste the token `ferrobay up` printed';
      return;
    }
    setToken(t);
    d.close();
    state.stopped = false;
    loop();
  });
  $('forget-token').addEventListener('click', () => {
    setToken(null);
    needToken('token forgotten: paste one to go on');
  });
}

function main() {
  adoptTokenFromUrl();
  throughputChart = new LineChart($('throughput-chart'), { format: fmt.rate, windowMs: WINDOW_MS, label: 'throughput', base: 1024, floor: 1 << 20 });
  latencyChart = new LineChart($('latency-chart'), { format: fmt.seconds, windowMs: WINDOW_MS, label: 'mean latency', floor: 1e-3 });
  events = new EventLog($('events'));
  actions = new Actions(() => loop());
  for (const b of document.querySelectorAll('[data-by]')) {
    b.addEventListener('click', () => {
      throughputBy = b.dataset.by;
      for (const o of document.querySelectorAll('[data-by]')) o.setAttribute('aria-pressed', String(o === b));
      throughputChart.draw(throughput[throughputBy], Date.now());
    });
  }
  bindToken();
  loop();
}

main();
