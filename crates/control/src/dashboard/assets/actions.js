// The dashboard's actions, each one REST call: create a volume, move it to another
// processor node, replace a member. A refused call shows the server's message next to
// the form that sent it; nothing is retried behind the user's back.

import { call, seg } from './api.js';
import { parseSize } from './format.js';
import { h } from './views.js';

/** Shows `text` in the page's notice line for a few seconds. */
export function notify(text, kind = 'good') {
  const host = document.getElementById('notice');
  host.replaceChildren(h('span', { class: `badge ${kind}` }, kind === 'bad' ? 'error' : 'done'), ` ${text}`);
  host.hidden = false;
  clearTimeout(notify.timer);
  notify.timer = setTimeout(() => { host.hidden = true; }, 8000);
}

/**
 * Runs `submit(form)` on the form's submit: the button shows `busy` meanwhile, a thrown
 * error's message goes to the form's `.error` line, success to `done(result)`.
 */
function bind(form, busy, submit, done) {
  const button = form.querySelector('button[type=submit]');
  const error = form.querySelector('.error');
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.textContent = '';
    const label = button.textContent;
    button.disabled = true;
    button.textContent = busy;
    try {
      done(await submit(form));
    } catch (e) {
      error.textContent = e.message;
    } finally {
      button.disabled = false;
      button.textContent = label;
    }
  });
}

function options(select, items, keep) {
  const before = keep ? select.value : '';
  select.replaceChildren(...items.map(([value, text]) => h('option', { value }, text)));
  if (items.some(([v]) => v === before)) select.value = before;
}

export class Actions {
  /** `refresh()`: reload the cluster state after an action. */
  constructor(refresh) {
    this.refresh = refresh;
    this.nodes = [];
    /** The node choices the create form shows now. */
    this.choices = '';
    this.createForm = document.getElementById('create-form');
    this.moveDialog = document.getElementById('move-dialog');
    this.replaceDialog = document.getElementById('replace-dialog');
    this.bindCreate();
    this.bindMove();
    this.bindReplace();
    for (const d of [this.moveDialog, this.replaceDialog]) {
      d.querySelector('.cancel').addEventListener('click', () => d.close());
    }
  }

  /** Keeps the forms' node choices current (checked boxes stay checked). */
  setNodes(nodes) {
    this.nodes = nodes;
    const storage = nodes.filter((n) => n.role === 'storage' && n.state === 'up').map((n) => n.name);
    const procs = nodes.filter((n) => n.role === 'processor' && n.state === 'up').map((n) => [n.name, n.name]);
    // Redrawn only when the choices change: a redraw would drop a user's focus.
    const key = JSON.stringify([storage, procs]);
    if (key === this.choices) return;
    this.choices = key;
    const box = this.createForm.querySelector('.storage-nodes');
    const checked = new Set([...box.querySelectorAll('input:checked')].map((i) => i.value));
    const first = box.dataset.filled !== 'yes';
    box.replaceChildren(...storage.map((name) => h('label', {},
      h('input', { type: 'checkbox', name: 'storage_node', value: name, checked: first || checked.has(name) }), ` ${name}`)));
    if (storage.length) box.dataset.filled = 'yes';
    options(this.createForm.elements.preferred_owner, [['', 'any'], ...procs], true);
  }

  bindCreate() {
    bind(this.createForm, 'Creating…', async (f) => {
      const name = f.elements.name.value.trim();
      if (!name) throw new Error('give the volume a name');
      const storage = [...f.querySelectorAll('input[name=storage_node]:checked')].map((i) => i.value);
      if (!storage.length) throw new Error('pick the storage nodes that hold its members');
      const body = {
        name,
        level: f.elements.level.value.trim(),
        size_bytes: parseSize(f.elements.size.value),
        storage_nodes: storage,
      };
      if (f.elements.preferred_owner.value) body.preferred_owner = f.elements.preferred_owner.value;
      // `log:CODEC`: the log layout (parity levels only; the server says why otherwise).
      const layout = f.elements.layout.value;
      if (layout.startsWith('log:')) {
        body.layout = 'log';
        body.compress = layout.slice(4);
      }
      return call('POST', '/volumes', body);
    }, (rec) => {
      notify(`volume ${rec.name} created (${rec.level}, ${rec.members.length} members)`);
      this.createForm.elements.name.value = '';
      this.refresh();
    });
  }

  /** Opens the move dialog for a volume. */
  move(view) {
    const d = this.moveDialog;
    const f = d.querySelector('form');
    f.dataset.volume = view.record.name;
    d.querySelector('.volume').textContent = view.record.name;
    const owner = view.owner ? view.owner.node : '';
    const to = this.nodes.filter((n) => n.role === 'processor' && n.state === 'up' && n.name !== owner);
    options(f.elements.to, to.map((n) => [n.name, n.name]), false);
    f.querySelector('.error').textContent = to.length ? '' : 'no other processor node is up to take it';
    d.showModal();
  }

  bindMove() {
    const f = this.moveDialog.querySelector('form');
    bind(f, 'Moving…', async () => {
      const to = f.elements.to.value;
      if (!to) throw new Error('no other processor node is up to take it');
      return call('POST', `/volumes/${seg(f.dataset.volume)}/move`, { to });
    }, (r) => {
      this.moveDialog.close();
      notify(`volume ${r.volume} is moving to ${r.to}`);
      this.refresh();
    });
  }

  /** Opens the replace dialog for a volume. */
  replace(view) {
    const d = this.replaceDialog;
    const f = d.querySelector('form');
    f.dataset.volume = view.record.name;
    d.querySelector('.volume').textContent = view.record.name;
    const st = view.status && view.status.status;
    const slots = view.record.members.map((m, i) => {
      const ms = st && st.members.find((x) => x.index === i);
      return [String(i), `${i}: ${m.storage_node || m.url} (${ms ? ms.state : 'unknown'})`];
    });
    options(f.elements.slot, slots, false);
    const failed = st && st.members.find((x) => x.state === 'failed');
    if (failed) f.elements.slot.value = String(failed.index);
    const storage = this.nodes.filter((n) => n.role === 'storage' && n.state === 'up');
    options(f.elements.storage_node, storage.map((n) => [n.name, n.name]), false);
    f.querySelector('.error').textContent = '';
    d.showModal();
  }

  bindReplace() {
    const f = this.replaceDialog.querySelector('form');
    bind(f, 'Replacing…', async () => {
      const slot = Number(f.elements.slot.value);
      const body = { storage_node: f.elements.storage_node.value };
      if (!body.storage_node) throw new Error('no storage node is up to hold the new member');
      return call('POST', `/volumes/${seg(f.dataset.volume)}/members/${slot}/replace`, body);
    }, () => {
      this.replaceDialog.close();
      notify(`volume ${f.dataset.volume}: member ${f.elements.slot.value} is being replaced`);
      this.refresh();
    });
  }
}
