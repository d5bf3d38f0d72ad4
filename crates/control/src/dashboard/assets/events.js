// The event log panel: the cluster's events (`GET /events`), newest first, kept up to
// date by polling for the ones after the newest seen.

import { call } from './api.js';
import * as fmt from './format.js';
import { h, tone } from './views.js';

/** How many events the panel keeps. */
const KEEP = 200;

/** The colour of an event kind. */
function eventTone(e) {
  if (e.severity === 'error' || e.severity === 'critical') return 'bad';
  if (e.severity === 'warning') return 'warn';
  const k = e.kind || '';
  if (/fail|lost|fenced|failing/.test(k)) return 'bad';
  if (/degrad|rebuild_started|suspect|throttl|takeover/.test(k)) return 'warn';
  if (/done|healthy|ok|created/.test(k)) return 'good';
  return tone(k);
}

export class EventLog {
  constructor(list) {
    this.list = list;
    this.events = new Map();
    this.newest = null;
  }

  /** Fetches what is new (everything on the first call). */
  async poll() {
    const q = this.newest === null ? `?limit=${KEEP}` : `?after=${this.newest}`;
    const got = await call('GET', `/events${q}`);
    const items = Array.isArray(got) ? got : (got && got.events) || [];
    for (const e of items) {
      this.events.set(e.id, e);
      if (this.newest === null || e.id > this.newest) this.newest = e.id;
    }
    const ids = [...this.events.keys()].sort((a, b) => b - a);
    for (const id of ids.slice(KEEP)) this.events.delete(id);
    return items.length;
  }

  render(nowMs = Date.now()) {
    const ids = [...this.events.keys()].sort((a, b) => b - a);
    const lis = ids.map((id) => {
      const e = this.events.get(id);
      const subject = [e.volume && `volume ${e.volume}`, e.node && `node ${e.node}`].filter(Boolean).join(', ');
      return h('li', { class: `event ${eventTone(e)}`, 'data-kind': e.kind, 'data-id': e.id },
        h('time', { datetime: new Date(e.unix_ms).toISOString(), title: fmt.ago(e.unix_ms, nowMs) }, fmt.clock(e.unix_ms)),
        h('span', { class: `badge ${eventTone(e)}` }, e.kind),
        subject ? h('span', { class: 'subject' }, subject) : '',
        h('span', { class: 'message' }, e.message || ''));
    });
    this.list.replaceChildren(...(lis.length ? lis : [h('li', { class: 'empty' }, 'no events yet')]));
  }
}
