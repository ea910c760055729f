// The audit log, for administrators: every call that changed something or
// was refused, newest first, a page at a time ("Load older" reads back from
// the last entry shown), narrowed to one account or one resource. The
// filters live in the URL (#/audit?accountId=…&resourceId=…). Another
// account is told the log is not for it, and nothing is asked of the
// server.

import { api } from './api.js';
import { $, el, when, ago, table, busy, explain } from './ui.js';
import { go } from './router.js';

const PAGE = 100;

/** The log being read: `{ me, filter, cursor, count, done }`, or null when the page is hidden. */
let reading = null;
/** account id → name, for the Account column. */
let names = new Map();

function status(text, kind = '') {
  const s = $('audit-status');
  s.className = `status-line ${kind}`.trim();
  s.textContent = text;
}

const CLASSES = [[500, 'error'], [400, 'refused'], [300, 'ok'], [200, 'ok']];
function statusClass(code) {
  return (CLASSES.find(([min]) => code >= min) || [0, ''])[1];
}

function row(a) {
  const name = a.accountId ? names.get(a.accountId) : null;
  return el('tr', { 'data-audit': a.id, 'data-action': a.action, 'data-status': String(a.status) },
    el('td', { title: a.timestamp }, when(a.timestamp), el('div', { class: 'muted small' }, ago(a.timestamp))),
    el('td', {}, a.accountId ? [name ? el('div', {}, name) : null, el('div', { class: 'mono small' }, a.accountId)] : el('span', { class: 'muted' }, 'none accepted')),
    el('td', {}, a.frontEnd),
    el('td', { class: 'mono small' }, a.action),
    el('td', { class: 'mono small' }, a.resourceId || '—'),
    el('td', { class: `num audit-${statusClass(a.status)}` }, String(a.status)),
    el('td', { class: 'mono small' }, a.clientIp || '—'));
}

/** Reads the next older page before `r.cursor` and adds its entries to the table. */
async function readMore(r) {
  const q = new URLSearchParams({ limit: String(PAGE), order: 'desc' });
  if (r.cursor) q.set('before', r.cursor);
  if (r.filter.accountId) q.set('accountId', r.filter.accountId);
  if (r.filter.resourceId) q.set('resourceId', r.filter.resourceId);
  status('Loading…', 'loading');
  let page;
  try {
    page = await api('GET', `/api/v1/audit?${q}`);
  } catch (e) {
    if (reading !== r) return;
    status(`Could not load the audit log: ${explain(e)}`, 'error');
    return;
  }
  if (reading !== r) return;
  const entries = page.entries || [];
  if (page.nextCursor) r.cursor = page.nextCursor;
  r.count += entries.length;
  r.done = entries.length < PAGE;
  const host = $('audit-list');
  let body = host.querySelector('tbody');
  if (!body) {
    host.textContent = '';
    host.append(table(['Time', 'Account', 'Front end', 'Action', 'Resource', 'Status', 'Client IP'], [], { class: 'audit' }));
    body = host.querySelector('tbody');
  }
  body.append(...entries.map(row));
  const filtered = r.filter.accountId || r.filter.resourceId ? ' matching the filter' : '';
  status(r.count
    ? `${r.count} ${r.count === 1 ? 'entry' : 'entries'}${filtered}, newest first${r.done ? '; that is all.' : '.'}`
    : `No entries${filtered}.`);
  $('audit-more').hidden = r.done;
  $('audit-more').textContent = 'Load older';
}

async function loadNames() {
  try {
    const { accounts } = await api('GET', '/api/v1/accounts');
    names = new Map(accounts.map((a) => [a.id, a.name]));
  } catch (_) { /* ids alone then */ }
}

$('audit-more').addEventListener('click', (e) => { if (reading) busy(e.target, () => readMore(reading)); });

$('audit-filter').addEventListener('submit', (e) => {
  e.preventDefault();
  const f = e.target.elements;
  go({ page: 'audit', params: { accountId: f.accountId.value.trim(), resourceId: f.resourceId.value.trim() } });
});
$('audit-clear').addEventListener('click', () => go({ page: 'audit', params: {} }));

export const auditPage = {
  async show(route, me) {
    const admin = Boolean(me && me.account.isAdmin);
    $('audit-refused').hidden = admin;
    $('audit-body').hidden = !admin;
    if (!admin) { reading = null; return; }
    const filter = { accountId: (route.params.accountId || '').trim(), resourceId: (route.params.resourceId || '').trim() };
    if (reading && reading.me === me && reading.filter.accountId === filter.accountId && reading.filter.resourceId === filter.resourceId) return;
    const f = $('audit-filter').elements;
    f.accountId.value = filter.accountId;
    f.resourceId.value = filter.resourceId;
    const r = { me, filter, cursor: null, count: 0, done: false };
    reading = r;
    $('audit-list').textContent = '';
    $('audit-more').hidden = true;
    await loadNames();
    if (reading === r) await readMore(r);
  },
  hide() {
    reading = null;
    $('audit-list').textContent = '';
    $('audit-more').hidden = true;
    status('');
  },
};
