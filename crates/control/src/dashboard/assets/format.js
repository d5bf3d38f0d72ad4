// How the dashboard writes numbers, sizes and times: the CLI's conventions (binary
// units, "1.0 GiB"), and the one size syntax the CLI accepts ("64G", "512M").

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/** Bytes as the CLI prints them: `1.0 GiB`, `512 B`. */
export function bytes(n) {
  if (!Number.isFinite(n)) return 'n/a';
  let i = 0;
  let v = n;
  while (v >= 1024 && i < UNITS.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${UNITS[i]}`;
}

/** A rate in bytes per second: `12.3 MiB/s`. */
export function rate(bytesPerSec) {
  return `${bytes(Math.round(bytesPerSec))}/s`;
}

/** Seconds as the shortest readable duration: `850 µs`, `3.2 ms`, `1.5 s`. */
export function seconds(s) {
  if (!Number.isFinite(s)) return 'n/a';
  if (s < 1e-3) return `${Math.round(s * 1e6)} µs`;
  if (s < 1) return `${(s * 1e3).toFixed(s < 0.01 ? 2 : 1)} ms`;
  return `${s.toFixed(1)} s`;
}

/** A wall-clock time from Unix milliseconds, in the viewer's time zone. */
export function clock(unixMs) {
  const d = new Date(unixMs);
  return d.toLocaleTimeString(undefined, { hour12: false });
}

/** `2 min ago` style age of a Unix-milliseconds time. */
export function ago(unixMs, nowMs = Date.now()) {
  const s = Math.max(0, Math.round((nowMs - unixMs) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

/** A percentage of done/total, `0` when there is nothing to do. */
export function percent(done, total) {
  if (!total) return 0;
  return Math.min(100, Math.max(0, (100 * done) / total));
}

const SHIFTS = { '': 0, b: 0, k: 10, kib: 10, m: 20, mib: 20, g: 30, gib: 30, t: 40, tib: 40, p: 50, pib: 50 };

/**
 * Parses a size the way the CLI does (`blockdev::parse_size_bytes`): digits and an
 * optional binary unit. Throws an Error whose message says what is wrong.
 */
export function parseSize(text) {
  const s = String(text).trim();
  const m = /^(\d+)\s*([a-zA-Z]*)$/.exec(s);
  if (!m) throw new Error(`size "${s}": expected a number with an optional unit K, M, G, T (e.g. 64G)`);
  const unit = m[2].toLowerCase();
  if (['kb', 'mb', 'gb', 'tb', 'pb'].includes(unit)) {
    const b = m[2][0].toUpperCase();
    throw new Error(`size "${s}": ambiguous unit "${m[2]}" (sizes are binary: use ${b} or ${b}iB)`);
  }
  if (!(unit in SHIFTS)) throw new Error(`size "${s}": unknown unit "${m[2]}" (expected K, M, G, T or P)`);
  const n = BigInt(m[1]) << BigInt(SHIFTS[unit]);
  if (n > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`size "${s}" is too large`);
  if (n === 0n) throw new Error('size must be more than 0');
  return Number(n);
}
