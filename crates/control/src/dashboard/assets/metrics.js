// Reads the Prometheus text format (0.0.4) that `/metrics` serves, and turns counter
// samples taken at two times into rates.

/** Parses `{a="x",b="y\"z"}`; returns [labels, index after '}']. */
function parseLabels(line, i) {
  const labels = {};
  i += 1; // '{'
  while (i < line.length && line[i] !== '}') {
    const eq = line.indexOf('=', i);
    if (eq < 0) throw new Error('label without "="');
    const name = line.slice(i, eq).trim();
    if (line[eq + 1] !== '"') throw new Error('label value without quotes');
    let j = eq + 2;
    let value = '';
    while (j < line.length && line[j] !== '"') {
      if (line[j] === '\\' && j + 1 < line.length) {
        const c = line[j + 1];
        value += c === 'n' ? '\n' : c;
        j += 2;
      } else {
        value += line[j];
        j += 1;
      }
    }
    labels[name] = value;
    i = j + 1;
    if (line[i] === ',') i += 1;
  }
  return [labels, i + 1];
}

/**
 * Every sample of the page: `[{name, labels, value}]`. Lines it cannot read are
 * skipped (a newer server may add syntax this page does not know).
 */
export function parse(text) {
  const out = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    try {
      const brace = line.indexOf('{');
      const space = line.indexOf(' ');
      let name;
      let labels = {};
      let rest;
      if (brace >= 0 && (space < 0 || brace < space)) {
        name = line.slice(0, brace);
        let end;
        [labels, end] = parseLabels(line, brace);
        rest = line.slice(end);
      } else {
        name = line.slice(0, space);
        rest = line.slice(space);
      }
      const value = Number(rest.trim().split(/\s+/)[0]);
      if (name && !Number.isNaN(value)) out.push({ name, labels, value });
    } catch {
      // skip the line
    }
  }
  return out;
}

/** Sums the samples of `name` by the value of label `by`: `Map(labelValue -> sum)`. */
export function sumBy(samples, name, by) {
  const m = new Map();
  for (const s of samples) {
    if (s.name !== name || !(by in s.labels)) continue;
    m.set(s.labels[by], (m.get(s.labels[by]) || 0) + s.value);
  }
  return m;
}

/** The per-second rate of a counter between two readings; null when it went back. */
export function perSecond(before, after, seconds) {
  if (before === undefined || after === undefined || seconds <= 0 || after < before) return null;
  return (after - before) / seconds;
}
