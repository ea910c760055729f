// Small DOM helpers, formatting, the message banner, dialogs and the
// parsing of form fields shared by the dashboard's views.

import { routeMissing } from './api.js';
import { here } from './router.js';

export const $ = (id) => document.getElementById(id);

/** Makes an element: `el('a', {href, class, onclick}, ...children)`. */
export function el(tag, attrs, ...kids) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') n.className = v;
    else if (k.startsWith('on')) n.addEventListener(k.slice(2), v);
    else if (v === true) n.setAttribute(k, '');
    else n.setAttribute(k, v);
  }
  for (const k of kids.flat()) {
    if (k === undefined || k === null || k === false) continue;
    n.append(k.nodeType ? k : document.createTextNode(String(k)));
  }
  return n;
}

// ---------- formatting ----------

export function ago(iso) {
  if (!iso) return '—';
  const s = Math.max(0, Math.round((Date.now() - new Date(iso).getTime()) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return new Date(iso).toLocaleString();
}

/** "paused 2m ago" for a paused sandbox, from its `pausedAt`. */
export function pausedAgo(sb) {
  return sb.pausedAt ? `paused ${ago(sb.pausedAt)}` : 'paused';
}

/**
 * Whether commands and code cells reach the sandbox: it runs, or it is
 * paused with `lifecycle.autoResume` (the call resumes it first).
 */
export function usable(sb) {
  if (!sb) return false;
  return sb.status === 'RUNNING' || (sb.status === 'PAUSED' && Boolean(sb.lifecycle && sb.lifecycle.autoResume));
}

/**
 * What a sandbox runs, in words: for one made from a snapshot or forked
 * (its image is then the snapshot's internal one), where it came from, as
 * its details say; else its image (and runtime preset).
 */
export function origin(sb) {
  const o = sb.origin;
  if (o && o.kind === 'fork') return `fork of ${o.sandboxName || o.sandboxId}`;
  if (o && o.kind === 'snapshot') return `snapshot ${o.snapshotName || o.snapshotId}${o.sandboxName ? ` of ${o.sandboxName}` : ''}`;
  return sb.runtime ? `${sb.runtime} (${sb.dockerImage})` : sb.dockerImage;
}

/** How long until `iso`: "in 5m", "in 3h", "in 30d"; "never" without a time, "expired" once past. */
export function until(iso) {
  if (!iso) return 'never';
  const s = Math.round((new Date(iso).getTime() - Date.now()) / 1000);
  if (s <= 0) return 'expired';
  if (s < 60) return `in ${s}s`;
  if (s < 3600) return `in ${Math.round(s / 60)}m`;
  if (s < 86400) return `in ${Math.round(s / 3600)}h`;
  return `in ${Math.round(s / 86400)}d`;
}

export function when(iso) {
  return iso ? new Date(iso).toLocaleString() : '—';
}

export function duration(s) {
  if (s == null) return '—';
  const d = Math.floor(s / 86400); const h = Math.floor(s / 3600) % 24; const m = Math.floor(s / 60) % 60;
  if (d) return `${d}d ${h}h ${m}m`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s % 60}s`;
  return `${s}s`;
}

/** A number without needless decimals: 1, 0.5, 1.25. */
export function num(n) {
  return String(Math.round(Number(n) * 100) / 100);
}

/** "1 core", "0.5 cores", "2 cores". */
export function cores(n) {
  return `${num(n)} ${Number(n) === 1 ? 'core' : 'cores'}`;
}

/** Memory as it was entered: `memoryGB` 1 is "1 GB". */
export function gb(n) {
  return `${num(n)} GB`;
}

/**
 * Memory in use, in the units a memory size is entered in (Stockade's
 * `memoryGB` counts 1024³ bytes), so "512 MB of 1 GB" adds up.
 */
export function memory(bytesUsed) {
  if (bytesUsed == null) return '—';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let v = bytesUsed; let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

/** Disk and file sizes, decimal as the server reports them ("1.2 MB"). */
export function bytes(n) {
  if (n == null) return '—';
  const u = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0; let v = n;
  while (v >= 1000 && i < u.length - 1) { v /= 1000; i++; }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${u[i]}`;
}

/**
 * Whether a view may take the keyboard focus as it opens: not while the
 * user moves along a tab list with the arrow keys.
 */
export function mayTakeFocus() {
  const a = document.activeElement;
  return !(a && a.getAttribute && a.getAttribute('role') === 'tab');
}

// ---------- the message banner ----------

let noticeTimer = null;
/** The place (see `placeOf`) the message shown belongs to, and who showed it. */
let noticePlace = null;
let noticeOwner = null;

/**
 * Where a message belongs: one sandbox (whichever tab), one shared volume
 * (whichever folder), or one page. A message stays while the user stays
 * there and goes when they leave.
 */
export function placeOf(route) {
  if (route.page === 'sandbox') return `sandbox/${route.id}`;
  if (route.page === 'admin') return `admin/${route.section}`;
  if (route.page === 'shared-volumes' && route.volume) return `shared-volumes/${route.volume}`;
  return route.page;
}

/**
 * Shows a message above the page; errors stay until dismissed, replaced or
 * the user goes elsewhere. It belongs to the place shown now, or to `place`
 * (a route) for a message about where the page is about to go. `owner`
 * names who showed it, so that it can take back its own (`clearNotice`).
 */
export function notice(message, kind = 'info', { place, owner } = {}) {
  const n = $('notice');
  clearTimeout(noticeTimer);
  $('notice-text').textContent = message || '';
  n.hidden = !message;
  n.className = `notice ${kind}`;
  noticePlace = message ? placeOf(place || here()) : null;
  noticeOwner = message ? (owner || null) : null;
}

/** Clears the message; with `owner`, only a message that owner showed. */
export function clearNotice(owner) {
  if (owner && owner !== noticeOwner) return;
  notice('');
}

/** The page shows `route`: a message that belongs elsewhere goes. */
export function noticeFollows(route) {
  if (noticePlace !== null && placeOf(route) !== noticePlace) notice('');
}

/** "Could not stop ui-demo: <the API's message>". */
export function showError(what, e, opts) {
  notice(`${what}: ${explain(e)}`, 'error', opts);
}

/** The API's message, or a plain word for a feature this server lacks. */
export function explain(e) {
  if (routeMissing(e)) return `this server does not offer that yet (${e.message}).`;
  return e && e.message ? e.message : String(e);
}

// ---------- dialogs ----------

/**
 * Asks for one line of text in a modal dialog; resolves to the text, or
 * null when cancelled. With `label: null` it only asks for confirmation
 * and resolves to '' or null.
 */
export function ask({ title, text = '', label = 'Name', value = '', confirm = 'OK', danger = false }) {
  const dialog = $('prompt-dialog');
  $('prompt-title').textContent = title;
  $('prompt-text').textContent = text;
  $('prompt-text').hidden = !text;
  const input = $('prompt-input');
  $('prompt-label-wrap').hidden = label === null;
  $('prompt-label').textContent = label || '';
  input.value = value;
  const ok = $('prompt-confirm');
  ok.textContent = confirm;
  ok.className = danger ? 'danger' : 'primary';
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => {
      resolve(dialog.returnValue === 'confirm' ? (label === null ? '' : input.value.trim()) : null);
    }, { once: true });
    dialog.returnValue = '';
    dialog.showModal();
    if (label !== null) { input.focus(); input.select(); } else ok.focus();
  });
}

// ---------- forms ----------

/** Thrown for a form field a user filled in wrongly; names the field. */
export class FieldError extends Error {
  constructor(field, message) {
    super(`${field}: ${message}`);
    this.field = field;
  }
}

/** Lines of `KEY=value` into an object; `field` names the input in errors. */
export function parsePairs(text, field, { max, keyPattern } = {}) {
  const out = {};
  const lines = String(text || '').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
  for (const [i, line] of lines.entries()) {
    const eq = line.indexOf('=');
    if (eq <= 0) throw new FieldError(field, `line ${i + 1} ("${line}") is not KEY=value`);
    const key = line.slice(0, eq).trim();
    if (keyPattern && !keyPattern.test(key)) throw new FieldError(field, `"${key}" is not a valid name`);
    out[key] = line.slice(eq + 1);
  }
  if (max !== undefined && Object.keys(out).length > max) throw new FieldError(field, `at most ${max} entries (got ${Object.keys(out).length})`);
  return out;
}

export function formatPairs(obj) {
  return Object.entries(obj || {}).map(([k, v]) => `${k}=${v}`).join('\n');
}

/** A comma-separated list, empty items dropped. */
export function parseList(text) {
  return String(text || '').split(',').map((s) => s.trim()).filter(Boolean);
}

/** A number field: undefined when empty, else a finite number in range. */
export function parseNumber(value, field, { min, max, integer } = {}) {
  const s = String(value ?? '').trim();
  if (!s) return undefined;
  const n = Number(s);
  if (!Number.isFinite(n)) throw new FieldError(field, `"${s}" is not a number`);
  if (integer && !Number.isInteger(n)) throw new FieldError(field, `must be a whole number (got ${s})`);
  if (min !== undefined && n < min) throw new FieldError(field, `must be at least ${min} (got ${s})`);
  if (max !== undefined && n > max) throw new FieldError(field, `must be at most ${max} (got ${s})`);
  return n;
}

/** A status line's setter: `text` in the element `id`, styled by `kind`. */
export function statusLine(id) {
  return (text, kind = '') => {
    const s = $(id);
    s.className = `status-line ${kind}`.trim();
    s.textContent = text;
  };
}

/**
 * Sends a create form's request (`post`): on a refusal marks the fields the
 * server names and says why on `status`, else clears the marks and resets
 * the form. What was made, or undefined when refused.
 */
export async function submitCreate(form, mapping, status, post) {
  let made;
  try {
    made = await post();
  } catch (err) {
    markFields(form, err.fields || [], mapping);
    status(`Not created: ${explain(err)}`, 'error');
    return undefined;
  }
  markFields(form, [], mapping);
  form.reset();
  return made;
}

/** Marks the inputs of `form` named by field errors (from the API or the form). */
export function markFields(form, fields, mapping) {
  for (const input of form.querySelectorAll('[aria-invalid]')) input.removeAttribute('aria-invalid');
  for (const f of fields) {
    const apiField = String(f.field || f).replace(/\[.*$/, '');
    const name = mapping[apiField] || apiField;
    const input = form.elements[name];
    if (input && input.setAttribute) input.setAttribute('aria-invalid', 'true');
  }
}

/** Runs `fn` with `button` disabled, so a double click acts once. */
export async function busy(button, fn) {
  if (button.disabled) return undefined;
  button.disabled = true;
  try { return await fn(); } finally { button.disabled = false; }
}

/** A table with a header row; `rows` are arrays of cells (text or nodes). */
export function table(headers, rows, attrs = {}) {
  return el('div', { class: 'table-wrap' },
    el('table', attrs,
      el('thead', {}, el('tr', {}, headers.map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, rows.map((r) => (r.nodeType ? r : el('tr', {}, r.map((c) => el('td', {}, c))))))));
}

// ---------- egress policy ----------

/** The entries of a textarea: one a line, blank lines and `#` comments left out. */
function entries(text) {
  return String(text || '').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
}

/**
 * The network control of a form: a `network` select (`allow-all`,
 * `deny-all`, `allow`: only these destinations, `deny`: all except these),
 * an `egress` textarea of entries, and for `allow` an optional
 * `egressExcept` textarea (the policy's deny list). It reads and fills a
 * `networkPolicy` value as the API takes and answers it.
 */
export function egressControl(form) {
  // The control's markup is written once, in index.html's template.
  const slot = form.querySelector('[data-egress="slot"]');
  if (slot) slot.replaceWith(document.getElementById('egress-control').content.cloneNode(true));
  const f = form.elements;
  const listBox = form.querySelector('[data-egress="list"]');
  const exceptBox = form.querySelector('[data-egress="except"]');
  const listLabel = form.querySelector('[data-egress="label"]');
  const show = () => {
    const mode = f.network.value;
    listBox.hidden = mode !== 'allow' && mode !== 'deny';
    exceptBox.hidden = mode !== 'allow';
    listLabel.textContent = mode === 'deny' ? 'Destinations to refuse, one a line' : 'Destinations to allow, one a line';
  };
  f.network.addEventListener('change', show);
  show();
  return {
    show,
    /** The `networkPolicy` the control stands for; throws FieldError. */
    read() {
      const mode = f.network.value;
      if (mode === 'allow-all' || mode === 'deny-all') return mode;
      const list = entries(f.egress.value);
      if (!list.length) throw new FieldError(`networkPolicy.${mode}`, 'enter at least one destination, one a line');
      if (mode === 'deny') return { deny: list };
      const except = entries(f.egressExcept.value);
      return except.length ? { allow: list, deny: except } : { allow: list };
    },
    /** Shows `policy` (as the API answers it). */
    fill(policy) {
      let mode = 'allow-all'; let list = []; let except = [];
      if (policy === 'deny-all') mode = 'deny-all';
      else if (policy && typeof policy === 'object') {
        if (Array.isArray(policy.allow)) { mode = 'allow'; list = policy.allow; except = policy.deny || []; } else { mode = 'deny'; list = policy.deny || []; }
      }
      f.network.value = mode;
      f.egress.value = list.join('\n');
      f.egressExcept.value = except.join('\n');
      show();
    },
    /** API field → input name, for `markFields`. */
    fields() {
      return {
        networkPolicy: 'network',
        'networkPolicy.allow': 'egress',
        'networkPolicy.deny': f.network.value === 'allow' ? 'egressExcept' : 'egress',
        networkAccess: 'network',
      };
    },
  };
}

/** A policy in words: "No egress", "Only pypi.org, *.pythonhosted.org (except …)". */
export function describePolicy(policy) {
  if (policy === 'deny-all') return 'No egress';
  if (!policy || policy === 'allow-all' || typeof policy !== 'object') return 'All egress';
  const deny = policy.deny || [];
  if (Array.isArray(policy.allow)) {
    return `Only ${policy.allow.join(', ') || 'nothing'}${deny.length ? ` (except ${deny.join(', ')})` : ''}`;
  }
  return deny.length ? `All except ${deny.join(', ')}` : 'All egress';
}

// ---------- quotas ----------

/** One limit against its use: "3 of 5", "0.5 of 2 cores", "1 GB (no limit)". */
function against(used, limit, unit) {
  const u = unit ? ` ${unit}` : '';
  if (limit == null) return `${num(used)}${u} (no limit)`;
  return `${num(used)} of ${num(limit)}${u}`;
}

/**
 * An account's quota and use (`GET …/quota`) as `[label, text, key]` rows;
 * snapshots and uploads show their count and the GB they keep in the object
 * store in one row each.
 */
export function quotaRows(q) {
  const l = q.quota || {}; const u = q.usage || {};
  return [
    ['Sandboxes', against(u.sandboxes, l.sandboxes, ''), 'sandboxes'],
    ['CPU', against(u.cpuCores, l.cpuCores, Number(l.cpuCores ?? u.cpuCores) === 1 ? 'core' : 'cores'), 'cpuCores'],
    ['Memory', against(u.memoryGB, l.memoryGB, 'GB'), 'memoryGB'],
    ['Disk', against(u.diskGB, l.diskGB, 'GB'), 'diskGB'],
    ['Snapshots', `${against(u.snapshots ?? 0, l.snapshots, '')}; ${against(u.snapshotGB ?? 0, l.snapshotGB, 'GB')}`, 'snapshots'],
    ['Uploads', `${against(u.uploads ?? 0, l.uploads, '')}; ${against(u.uploadGB ?? 0, l.uploadGB, 'GB')}`, 'uploads'],
  ];
}
