// Small SVG line charts for the live throughput and latency panels, and the short
// history they draw from (kept in the page only: a reload starts empty).

const SVG = 'http://www.w3.org/2000/svg';
const W = 600;
const H = 200;
const PAD = { left: 64, right: 12, top: 12, bottom: 24 };

/** Line colours, in the order series first appear. */
export const PALETTE = ['#2f81f7', '#e16f24', '#1a7f37', '#8250df', '#bf8700', '#bf3989', '#1b7c83', '#57606a'];

function el(name, attrs = {}) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

/**
 * The axis top for a maximum `v`: 1, 2 or 5 times a power of `base` (10, or 1024 for
 * bytes so that ticks read 256 KiB, 512 KiB...), and never below `floor`.
 */
export function niceCeil(v, base = 10, floor = 0) {
  const x = Math.max(v, floor);
  if (!(x > 0)) return 1;
  const p = base ** Math.floor(Math.log(x) / Math.log(base));
  for (const m of [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]) if (m * p >= x) return m * p;
  return base * p;
}

/** Samples by series name, each at most `windowMs` old. */
export class History {
  constructor(windowMs) {
    this.windowMs = windowMs;
    this.series = new Map();
  }

  add(name, tMs, value) {
    if (!Number.isFinite(value)) return;
    let pts = this.series.get(name);
    if (!pts) {
      pts = [];
      this.series.set(name, pts);
    }
    pts.push({ t: tMs, v: value });
    const oldest = tMs - this.windowMs;
    while (pts.length && pts[0].t < oldest) pts.shift();
  }

  /** Drops series with no sample in the window (a deleted volume). */
  prune(nowMs) {
    for (const [name, pts] of this.series) {
      if (!pts.length || pts[pts.length - 1].t < nowMs - this.windowMs) this.series.delete(name);
    }
  }
}

export class LineChart {
  /**
   * `host`: an element the chart fills; `format(v)` writes an axis value;
   * `windowMs`: the time the x axis spans, ending now.
   */
  constructor(host, { format, windowMs, label, base = 10, floor = 0 }) {
    this.format = format;
    this.base = base;
    this.floor = floor;
    this.windowMs = windowMs;
    this.colors = new Map();
    this.svg = el('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': label, class: 'chart-svg' });
    this.legend = document.createElement('ul');
    this.legend.className = 'legend';
    host.replaceChildren(this.svg, this.legend);
  }

  color(name) {
    if (!this.colors.has(name)) this.colors.set(name, PALETTE[this.colors.size % PALETTE.length]);
    return this.colors.get(name);
  }

  /** Redraws from `history` (a History) with the x axis ending at `nowMs`. */
  draw(history, nowMs) {
    const x0 = nowMs - this.windowMs;
    const plotW = W - PAD.left - PAD.right;
    const plotH = H - PAD.top - PAD.bottom;
    let max = 0;
    for (const pts of history.series.values()) for (const p of pts) max = Math.max(max, p.v);
    const top = niceCeil(max, this.base, this.floor);
    const x = (t) => PAD.left + (plotW * (t - x0)) / this.windowMs;
    const y = (v) => PAD.top + plotH - (plotH * v) / top;

    const parts = [el('rect', { x: PAD.left, y: PAD.top, width: plotW, height: plotH, class: 'plot' })];
    for (let i = 0; i <= 4; i += 1) {
      const v = (top * i) / 4;
      parts.push(el('line', { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v), class: 'grid' }));
      const t = el('text', { x: PAD.left - 6, y: y(v) + 4, class: 'tick', 'text-anchor': 'end' });
      t.textContent = this.format(v);
      parts.push(t);
    }
    const secs = Math.round(this.windowMs / 1000);
    for (const [frac, text] of [[0, `-${secs} s`], [0.5, `-${Math.round(secs / 2)} s`], [1, 'now']]) {
      const t = el('text', { x: PAD.left + plotW * frac, y: H - 6, class: 'tick', 'text-anchor': frac === 0 ? 'start' : frac === 1 ? 'end' : 'middle' });
      t.textContent = text;
      parts.push(t);
    }
    const items = [];
    for (const [name, pts] of [...history.series.entries()].sort(([a], [b]) => a.localeCompare(b))) {
      const visible = pts.filter((p) => p.t >= x0);
      if (!visible.length) continue;
      const color = this.color(name);
      const d = visible.map((p, i) => `${i ? 'L' : 'M'}${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(' ');
      parts.push(el('path', { d, class: 'line', stroke: color, 'data-series': name }));
      if (visible.length === 1) {
        parts.push(el('circle', { cx: x(visible[0].t), cy: y(visible[0].v), r: 2.5, fill: color }));
      }
      const li = document.createElement('li');
      const sw = document.createElement('span');
      sw.className = 'swatch';
      sw.style.background = color;
      li.append(sw, `${name}: ${this.format(visible[visible.length - 1].v)}`);
      items.push(li);
    }
    if (!items.length) {
      const t = el('text', { x: W / 2, y: H / 2, class: 'empty', 'text-anchor': 'middle' });
      t.textContent = 'no samples yet';
      parts.push(t);
    }
    this.svg.replaceChildren(...parts);
    this.legend.replaceChildren(...items);
  }
}
