// The event log panel: the cluster's events (`GET /events`, an `EventPage`), newest
// first, kept up to date by asking for the ones after the newest id seen (`since`).

import { call } from './api.js';
import * as fmt from './format.js';
import { h } from './views.js';

/** How many events the panel keeps. */
const KEEP = 200;

/** The colour of an event: its severity, and good news in green. */
function eventTone(e) {
  if (e.severity === 'error') return 'bad';
  if (e.severity === 'warning') return 'warn';
  return /done|returned|created/.test(e.kind || '') ? 'good' : 'neutral';
}

export class EventLog {
  constructor(list) {
    this.list = list;
    this.events = new Map();
    this.newest = null;
  }

  /** Fetches what is new (everything on the first call). */
  async poll() {
    const page = await call('GET', `/events?since=${this.newest ?? 0}&limit=${KEEP}`);
    const items = page.events || [];
    for (const e of items) this.events.set(e.id, e);
    this.newest = Math.max(this.newest ?? 0, page.last_id || 0, ...items.map((e) => e.id));
    const ids = [...this.events.keys()].sort((a, b) => b - a);
    for (const id of ids.slice(KEEP)) this.events.delete(id);
    return items.length;
  }

  render(nowMs = Date.now()) {
    const ids = [...this.events.keys()].sort((a, b) => b - a);
    const lis = ids.map((id) => {
      const e = this.events.get(id);
      const subject = e.subject ? `${e.subject.kind} ${e.subject.name}` : '';
      return h('li', { class: `event ${eventTone(e)}`, 'data-kind': e.kind, 'data-id': e.id },
        h('time', { datetime: new Date(e.time_unix_ms).toISOString(), title: fmt.ago(e.time_unix_ms, nowMs) }, fmt.clock(e.time_unix_ms)),
        h('span', { class: `badge ${eventTone(e)}` }, e.kind),
        subject ? h('span', { class: 'subject' }, subject) : '',
        h('span', { class: 'message' }, e.message || ''));
    });
    this.list.replaceChildren(...(lis.length ? lis : [h('li', { class: 'empty' }, 'no events yet')]));
  }
}
