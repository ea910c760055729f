// Webhooks of the signed-in account: the list (enable, disable, delete),
// a form that registers one (its URL, the event types it wants, an
// optional signing secret; a secret the server makes is shown once), and
// one webhook's deliveries with their attempts, each of which can be sent
// again.

import { api } from './api.js';
import { $, el, notice, showError, ago, when, table, busy, ask, markFields, explain, statusLine, submitCreate } from './ui.js';
import { shortType } from './events.js';

/** Every event type a webhook can ask for, as the server names them. */
export const EVENT_TYPES = [
  'sandbox.lifecycle.created', 'sandbox.lifecycle.started', 'sandbox.lifecycle.stopped',
  'sandbox.lifecycle.paused', 'sandbox.lifecycle.resumed', 'sandbox.lifecycle.updated',
  'sandbox.lifecycle.checkpointed', 'sandbox.lifecycle.killed', 'sandbox.lifecycle.errored',
  'sandbox.lifecycle.timed_out', 'sandbox.lifecycle.moved', 'sandbox.lifecycle.forked',
  'snapshot.created', 'snapshot.deleted',
];

/** How often the deliveries shown are read again. */
const DELIVERIES_MS = 5000;

let shown = false;
/** The webhooks listed last. */
let hooks = [];
/** The webhook whose deliveries are shown, or null. */
let openHook = null;
let deliveriesTimer = null;

const hookPath = (id, rest = '') => `/api/v1/webhooks/${encodeURIComponent(id)}${rest}`;

const form = $('webhook-form');
/** API field → the form's input. */
const FIELDS = { url: 'url', name: 'name', signatureSecret: 'secret', events: 'events' };

// The event type checkboxes, written once.
$('webhook-types').append(...EVENT_TYPES.map((t) => el('label', { class: 'check' },
  el('input', { type: 'checkbox', name: 'events', value: t }), t.startsWith('sandbox.lifecycle.') ? shortType(t) : t)));

const formStatus = statusLine('webhook-status');

/** Shows a webhook's new secret this once, with Copy and a button that hides it. */
function showSecret(hook) {
  const box = $('webhook-secret');
  box.textContent = '';
  const code = el('code', { id: 'new-webhook-secret', class: 'token' }, hook.signatureSecret);
  box.append(
    el('p', {}, el('strong', {}, `Webhook ${hook.name} created.`),
      ' Its signing secret is shown this once; copy it now to check the e2b-signature of each delivery:'),
    code,
    el('div', { class: 'row' },
      el('button', { type: 'button', onclick: async (ev) => {
        try { await navigator.clipboard.writeText(hook.signatureSecret); ev.target.textContent = 'Copied'; } catch (_) {
          const range = document.createRange(); range.selectNodeContents(code);
          getSelection().removeAllRanges(); getSelection().addRange(range);
          ev.target.textContent = 'Selected: press Ctrl+C';
        }
      } }, 'Copy secret'),
      el('button', { type: 'button', onclick: () => { box.hidden = true; box.textContent = ''; } }, 'Done, hide it')));
  box.hidden = false;
}

/** The event types a webhook wants, in few words. */
function typesText(events) {
  if (!events || !events.length || EVENT_TYPES.every((t) => events.includes(t))) return 'every type';
  return events.map((t) => (t.startsWith('sandbox.lifecycle.') ? shortType(t) : t)).join(', ');
}

async function loadList() {
  const host = $('webhooks-list');
  let list;
  try {
    list = await api('GET', '/api/v1/webhooks');
  } catch (e) {
    if (!shown) return;
    host.textContent = '';
    host.append(el('p', { class: 'error' }, `Could not load the webhooks: ${explain(e)}`));
    return;
  }
  if (!shown) return;
  hooks = Array.isArray(list) ? list : [];
  host.textContent = '';
  if (!hooks.length) {
    host.append(el('p', { class: 'muted', id: 'webhooks-empty' }, 'No webhooks yet.'));
  } else {
    host.append(table(['Webhook', 'Events', 'Status', 'Created', ''], hooks.map((h) => el('tr', { 'data-webhook': h.id, 'data-enabled': String(h.enabled) },
      el('td', {}, el('strong', {}, h.name), el('div', { class: 'mono small' }, h.url), el('div', { class: 'muted small' }, h.id)),
      el('td', { class: 'small' }, typesText(h.events)),
      el('td', {}, el('span', { class: `chip ${h.enabled ? 'enabled' : 'disabled'}` }, h.enabled ? 'enabled' : 'disabled')),
      el('td', { title: when(h.createdAt) }, ago(h.createdAt)),
      el('td', {}, el('span', { class: 'row-actions' },
        el('button', { type: 'button', class: 'small', 'aria-label': `Deliveries of ${h.name}`, 'aria-pressed': String(openHook === h.id), onclick: () => openDeliveries(h) }, 'Deliveries'),
        el('button', { type: 'button', class: 'small', 'aria-label': `${h.enabled ? 'Disable' : 'Enable'} ${h.name}`, onclick: (ev) => busy(ev.target, () => setEnabled(h, !h.enabled)) }, h.enabled ? 'Disable' : 'Enable'),
        el('button', { type: 'button', class: 'small danger', 'aria-label': `Delete ${h.name}`, onclick: (ev) => busy(ev.target, () => remove(h)) }, 'Delete'))))),
    { class: 'webhooks' }));
  }
  // A webhook deleted elsewhere takes its deliveries with it.
  if (openHook && !hooks.some((h) => h.id === openHook)) closeDeliveries();
}

async function setEnabled(h, enabled) {
  try {
    await api('PATCH', hookPath(h.id), { enabled });
    notice(enabled ? `Enabled ${h.name}: it receives events again.` : `Disabled ${h.name}: it receives no events until enabled again.`);
  } catch (e) {
    showError(`Could not ${enabled ? 'enable' : 'disable'} ${h.name}`, e);
  }
  loadList();
}

async function remove(h) {
  const ok = await ask({ title: `Delete the webhook ${h.name}?`, text: `${h.url} receives no more events; its deliveries not made yet are dropped.`, label: null, confirm: 'Delete', danger: true });
  if (ok === null) return;
  try {
    await api('DELETE', hookPath(h.id));
    notice(`Deleted the webhook ${h.name}.`);
  } catch (e) {
    showError(`Could not delete ${h.name}`, e);
  }
  if (openHook === h.id) closeDeliveries();
  loadList();
}

// ---------- deliveries ----------

/** The latest attempt of a delivery in words: "answered 500", "no answer: …". */
function lastAttempt(d) {
  const a = (d.attemptLog || [])[0];
  if (!a) return el('span', { class: 'muted' }, 'not tried yet');
  const answer = a.statusCode != null ? `answered ${a.statusCode}` : 'no answer';
  return el('span', { title: when(a.at) }, `${answer}${a.error ? `: ${a.error}` : ''} (${ago(a.at)}, ${a.durationMs} ms)`);
}

async function loadDeliveries() {
  clearTimeout(deliveriesTimer);
  const id = openHook;
  if (!id) return;
  const host = $('deliveries-list');
  let answer;
  try {
    answer = await api('GET', hookPath(id, '/deliveries'));
  } catch (e) {
    if (openHook !== id) return;
    host.textContent = '';
    host.append(el('p', { class: 'error' }, `Could not load the deliveries: ${explain(e)}`));
    deliveriesTimer = setTimeout(loadDeliveries, DELIVERIES_MS);
    return;
  }
  if (openHook !== id) return;
  const list = (answer && answer.deliveries) || [];
  host.textContent = '';
  host.append(list.length
    ? table(['Event', 'Status', 'Attempts', 'Last attempt', 'Next attempt', ''], list.map((d) => el('tr', { 'data-delivery': d.id, 'data-status': d.status },
      el('td', {}, d.eventType, el('div', { class: 'muted small' }, d.sandboxId ? `${d.sandboxId} · ` : '', el('span', { class: 'mono' }, d.eventId)),
        el('div', { class: 'muted small', title: when(d.createdAt) }, ago(d.createdAt))),
      el('td', {}, el('span', { class: `chip delivery ${d.status}` }, d.status)),
      el('td', { class: 'num' }, String(d.attempts)),
      el('td', { class: 'small' }, lastAttempt(d)),
      el('td', { class: 'small' }, d.status === 'pending' && d.nextAttemptAt ? when(d.nextAttemptAt) : '—'),
      el('td', {}, el('button', { type: 'button', class: 'small', 'aria-label': `Re-send ${d.eventType} (${d.id})`, onclick: (ev) => busy(ev.target, () => redeliver(id, d)) }, 'Re-send')))),
    { class: 'deliveries' })
    : el('p', { class: 'muted' }, 'No deliveries yet: none of the events it wants has happened since it was made.'));
  deliveriesTimer = setTimeout(loadDeliveries, DELIVERIES_MS);
}

async function redeliver(hookId, d) {
  try {
    await api('POST', hookPath(hookId, `/deliveries/${encodeURIComponent(d.id)}/redeliver`), {});
    notice(`Queued ${d.eventType} to be sent again.`);
  } catch (e) {
    showError(`Could not send ${d.eventType} again`, e);
  }
  loadDeliveries();
}

function openDeliveries(h) {
  openHook = h.id;
  $('deliveries-title').textContent = `Deliveries of ${h.name}`;
  $('deliveries-list').textContent = '';
  $('deliveries').hidden = false;
  for (const b of document.querySelectorAll('#webhooks-list [aria-pressed]')) b.setAttribute('aria-pressed', String(b.closest('tr').dataset.webhook === h.id));
  loadDeliveries();
}

function closeDeliveries() {
  openHook = null;
  clearTimeout(deliveriesTimer);
  $('deliveries').hidden = true;
  $('deliveries-list').textContent = '';
  for (const b of document.querySelectorAll('#webhooks-list [aria-pressed]')) b.setAttribute('aria-pressed', 'false');
}

$('deliveries-refresh').addEventListener('click', () => loadDeliveries());
$('deliveries-close').addEventListener('click', () => closeDeliveries());

// ---------- the form ----------

/** The request the form stands for; a field error names the input. */
function requestOf() {
  const f = form.elements;
  const url = f.url.value.trim();
  if (!url) return { error: { field: 'url', message: 'url: enter where the events go (http or https)' } };
  let parsed;
  try { parsed = new URL(url); } catch (_) { parsed = null; }
  if (!parsed || !['http:', 'https:'].includes(parsed.protocol)) return { error: { field: 'url', message: `url: "${url}" is not an http or https URL` } };
  const body = { url };
  const name = f.name.value.trim();
  if (name) body.name = name;
  const events = [...form.querySelectorAll('input[name="events"]:checked')].map((i) => i.value);
  if (events.length) body.events = events;
  const secret = f.secret.value;
  if (secret) {
    if (secret.length < 8 || secret.length > 256) return { error: { field: 'signatureSecret', message: 'signatureSecret: 8 to 256 characters, or empty to have one made' } };
    body.signatureSecret = secret;
  }
  return { body };
}

form.addEventListener('submit', (e) => {
  e.preventDefault();
  const { body, error } = requestOf();
  if (error) {
    markFields(form, [error], FIELDS);
    formStatus(`Not created: ${error.message}`, 'error');
    return;
  }
  busy($('webhook-create'), async () => {
    formStatus('Creating…');
    const made = await submitCreate(form, FIELDS, formStatus, () => api('POST', '/api/v1/webhooks', body));
    if (!made) return;
    formStatus(`Created ${made.name}${made.signatureSecret ? '' : ', signed with the secret given'}.`);
    if (made.signatureSecret) showSecret(made);
    else { $('webhook-secret').hidden = true; $('webhook-secret').textContent = ''; }
    loadList();
  });
});

export const webhooksPage = {
  show() {
    shown = true;
    loadList();
    if (openHook) loadDeliveries();
  },
  hide() {
    shown = false;
    closeDeliveries();
    formStatus('');
    $('webhook-secret').hidden = true;
    $('webhook-secret').textContent = '';
  },
};
