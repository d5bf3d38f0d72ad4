// Renders the cluster's state into the page's tables. Every text goes in through
// textContent (never innerHTML): names come from the cluster and are not trusted.

import * as fmt from './format.js';

/** `h('td', {class: 'x'}, 'text', child)`: an element with attributes and children. */
export function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

/** The colour class of a state word. */
export function tone(state) {
  switch (state) {
    case 'healthy': case 'up': case 'ok': case 'active': case 'done':
      return 'good';
    case 'degraded': case 'rebuilding': case 'suspect': case 'starting': case 'resyncing': case 'spare':
      return 'warn';
    case 'failed': case 'failing': case 'down': case 'fenced': case 'offline': case 'unreachable': case 'errors':
      return 'bad';
    default:
      return 'neutral';
  }
}

export function badge(state, extra = {}) {
  return h('span', { class: `badge ${tone(state)}`, ...extra }, state);
}

function empty(cols, text) {
  return h('tr', { class: 'empty' }, h('td', { colspan: cols }, text));
}

/** The state a volume shows: the owner's published state, or why there is none. */
export function volumeState(view, nowMs = Date.now()) {
  if (!view.owner) return 'offline';
  const st = view.status;
  if (!st || st.owner !== view.owner.node) return 'starting';
  const s = st.status.state;
  if (s === 'healthy' && st.status.resync && st.status.resync.phase === 'running') return 'resyncing';
  if (nowMs - st.updated_unix_ms > 15000) return 'stale';
  return s;
}

/** Nodes: the live ones, and those the cluster names that are not live (down). */
export function nodeRows(live, volumes, seen) {
  const rows = new Map();
  for (const n of live) rows.set(n.name, { ...n, state: 'up' });
  const expect = (name, role) => {
    if (name && !rows.has(name)) rows.set(name, { name, role, state: 'down', nvme_addrs: [], api_addr: null });
  };
  for (const v of volumes) {
    for (const m of v.record.members) expect(m.storage_node, 'storage');
    if (v.owner) expect(v.owner.node, 'processor');
  }
  for (const [name, role] of seen) expect(name, role);
  return [...rows.values()].sort((a, b) => a.role.localeCompare(b.role) || a.name.localeCompare(b.name));
}

export function renderNodes(tbody, rows, volumes, nowMs = Date.now()) {
  const owned = new Map();
  for (const v of volumes) if (v.owner) owned.set(v.owner.node, (owned.get(v.owner.node) || 0) + 1);
  const trs = rows.map((n) => h('tr', { 'data-node': n.name, 'data-role': n.role },
    h('td', { class: 'name' }, n.name),
    h('td', {}, n.role),
    h('td', { class: 'state' }, badge(n.state)),
    h('td', { class: 'mono' }, (n.nvme_addrs || []).join(', ') || '—'),
    h('td', { class: 'mono' }, n.api_addr || '—'),
    h('td', {}, n.role === 'processor' ? `${owned.get(n.name) || 0} owned` : ''),
    h('td', {}, n.started_unix_ms ? `up since ${fmt.ago(n.started_unix_ms, nowMs).replace(' ago', '')}` : '—'),
    h('td', {}, n.version || '')));
  tbody.replaceChildren(...(trs.length ? trs : [empty(8, 'no nodes registered')]));
}

/** Prediction grade of a drive: the field when the API has it, "n/a" otherwise. */
export function grade(d) {
  const p = d.prediction ?? d.grade ?? null;
  if (p === null || p === undefined) return { grade: 'n/a', reason: '' };
  if (typeof p === 'string') return { grade: p, reason: '' };
  return { grade: p.grade || 'n/a', reason: p.reason || '' };
}

/**
 * One row per drive from `GET /drives` (`[{node, drives, error}]`); a node that did not
 * answer is one row saying why.
 */
export function driveRows(nodes) {
  return nodes.flatMap((n) => (n.error
    ? [{ node: n.node, name: '', status: `unreachable: ${n.error}`, error: n.error }]
    : n.drives.map((d) => ({ ...d, node: n.node }))));
}

export function renderDrives(tbody, drives) {
  const trs = drives.map((d) => {
    const g = grade(d);
    let health = 'n/a';
    if (d.status === 'ok') health = 'ok';
    else if (d.error) health = 'unreachable';
    else if (d.status) health = 'errors';
    return h('tr', { 'data-drive': `${d.node}/${d.name}` },
      h('td', { class: 'name' }, d.node),
      h('td', {}, d.name || '—'),
      h('td', {}, d.kind || ''),
      h('td', { class: 'num' }, fmt.bytes(d.size_bytes)),
      h('td', { class: 'num' }, fmt.bytes(d.allocated_bytes)),
      h('td', { class: 'health', title: d.status || '' }, badge(health)),
      h('td', { class: 'grade', title: g.reason }, badge(g.grade)),
      h('td', { class: 'num' }, String(d.media_errors ?? 0)),
      h('td', { class: 'num' }, String(d.command_errors ?? 0)));
  });
  tbody.replaceChildren(...(trs.length ? trs : [empty(9, 'no drives reported')]));
}

function progress(label, done, total, extra) {
  const pct = fmt.percent(done, total);
  return h('div', { class: 'progress', title: `${fmt.bytes(done)} of ${fmt.bytes(total)}` },
    h('div', { class: 'bar' }, h('div', { class: 'fill', 'data-pct': pct.toFixed(0) })),
    h('span', {}, `${label} ${pct.toFixed(0)} %${extra ? ` ${extra}` : ''}`));
}

/** Rebuild and resync progress of a volume, or a dash. */
function volumeProgress(st) {
  const out = [];
  const r = st && st.rebuild;
  if (r && r.phase === 'running') {
    const eta = r.eta_secs ? `(ETA ${Math.ceil(r.eta_secs)} s)` : '';
    out.push(progress(`rebuild member ${r.member}`, r.bytes_done, r.bytes_total, eta));
  }
  const s = st && st.resync;
  if (s && s.phase === 'running') out.push(progress('resync', s.bytes_done, s.bytes_total));
  const sc = st && st.scrub;
  if (sc && sc.phase === 'running') out.push(progress('scrub', sc.bytes_done, sc.bytes_total));
  return out.length ? out : ['—'];
}

function members(view) {
  const st = view.status && view.status.status;
  return h('div', { class: 'members' }, view.record.members.map((m, i) => {
    const ms = st && st.members.find((x) => x.index === i);
    const state = ms ? ms.state : 'unknown';
    return h('span', { class: `chip ${tone(state)}`, title: `${m.url} (${state})`, 'data-slot': i, 'data-state': state },
      `${i}: ${m.storage_node || m.failure_domain}`);
  }));
}

/** `zstd:3` from a volume::Compression (`{codec, level}`). */
function codecText(c) {
  return c.level === undefined ? c.codec : `${c.codec}:${c.level}`;
}

/** The level cell: `raid5`, or `raid5 · log zstd:3 2.41x` for the log layout (the ratio
 * as the owner last published it). */
export function levelText(view) {
  const log = view.record.log;
  if (!log) return view.record.level;
  const st = view.status && view.status.status && view.status.status.log;
  const ratio = st ? ` ${st.compression_ratio.toFixed(2)}x` : '';
  return `${view.record.level} · log ${codecText(log.compression)}${ratio}`;
}

/**
 * Volumes with their actions. `rates`: Map(volume -> {read, write}) bytes/s;
 * `actions`: {move(view), replace(view)}.
 */
export function renderVolumes(tbody, views, rates, actions, nowMs = Date.now()) {
  const trs = views.map((v) => {
    const state = volumeState(v, nowMs);
    const st = v.status && v.status.status;
    const r = rates.get(v.record.name);
    return h('tr', { 'data-volume': v.record.name, 'data-state': state },
      h('td', { class: 'name' }, v.record.name),
      h('td', { class: 'level' }, levelText(v)),
      h('td', { class: 'num' }, fmt.bytes(v.record.size_bytes)),
      h('td', { class: 'state' }, badge(state)),
      h('td', { class: 'owner' }, v.owner ? `${v.owner.node} (epoch ${v.owner.epoch})` : '—'),
      h('td', {}, members(v)),
      h('td', { class: 'progress-cell' }, volumeProgress(st)),
      h('td', { class: 'num' }, r ? `${fmt.rate(r.read)} / ${fmt.rate(r.write)}` : '—'),
      h('td', { class: 'actions' },
        h('button', { type: 'button', class: 'move', onclick: () => actions.move(v) }, 'Move'),
        h('button', { type: 'button', class: 'replace', onclick: () => actions.replace(v) }, 'Replace member')));
  });
  tbody.replaceChildren(...(trs.length ? trs : [empty(9, 'no volumes yet: create one below')]));
  // Widths from data attributes (the page's CSP allows no inline style attributes).
  for (const f of tbody.querySelectorAll('.fill')) f.style.width = `${f.dataset.pct}%`;
}

/** The header's one-line summary. */
export function renderSummary(host, nodes, views, nowMs = Date.now()) {
  const count = (pred) => nodes.filter(pred).length;
  const states = views.map((v) => volumeState(v, nowMs));
  const bad = states.filter((s) => tone(s) === 'bad').length;
  const warn = states.filter((s) => tone(s) === 'warn' || s === 'stale').length;
  host.replaceChildren(
    h('span', { class: 'stat' }, `${count((n) => n.role === 'storage' && n.state === 'up')} storage`),
    h('span', { class: 'stat' }, `${count((n) => n.role === 'processor' && n.state === 'up')} processor`),
    count((n) => n.state === 'down') ? badge('down', { title: 'nodes down' }) : '',
    h('span', { class: 'stat' }, `${views.length} volumes`),
    bad ? h('span', { class: 'badge bad' }, `${bad} failed or offline`) : '',
    warn ? h('span', { class: 'badge warn' }, `${warn} degraded`) : '',
    !bad && !warn && views.length ? badge('healthy') : '');
}
