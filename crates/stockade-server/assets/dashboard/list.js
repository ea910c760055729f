// The sandbox list in the sidebar: the caller's active sandboxes, or
// the terminated ones, refreshed every few seconds.

import { api } from './api.js';
import { $, el, ago, pausedAgo } from './ui.js';
import { here, go, format } from './router.js';

export const list = {
  sandboxes: [],
  filter: 'active',
  loaded: false,
};

const listeners = [];
/** Calls `fn(sandboxes)` after every successful refresh. */
export function onRefresh(fn) { listeners.push(fn); }

let seq = 0;

/**
 * The order of the list: active sandboxes as the API answers them (newest
 * first), terminated ones by when they ended, the latest first.
 */
function ordered(sandboxes) {
  if (list.filter !== 'terminated') return sandboxes;
  const ended = (s) => Date.parse(s.terminatedAt) || 0;
  return [...sandboxes].sort((a, b) => ended(b) - ended(a));
}

/** Reloads the list; answers of an older request never overwrite a newer one. */
export async function refresh() {
  const mine = ++seq;
  const filter = list.filter;
  const query = filter === 'terminated' ? 'is_active=false&per_page=200' : 'per_page=200';
  let page;
  try {
    page = await api('GET', `/api/v1/sandbox?${query}`);
  } catch (e) {
    if (mine !== seq || e.status === 401) return;
    $('list-error').textContent = `Could not load sandboxes: ${e.message}`;
    $('list-error').hidden = false;
    return;
  }
  if (mine !== seq || filter !== list.filter) return;
  list.sandboxes = ordered(page.sandboxes);
  list.loaded = true;
  $('list-error').hidden = true;
  render();
  for (const fn of listeners) fn(list.sandboxes);
}

/** The listed record of `id`, if it is in the list. */
export function summary(id) {
  return list.sandboxes.find((s) => s.id === id) || null;
}

/** Replaces one record in the list (a fresher copy from its details). */
export function update(sb) {
  const i = list.sandboxes.findIndex((s) => s.id === sb.id);
  const belongs = list.filter === 'terminated' ? sb.status === 'TERMINATED' : sb.status !== 'TERMINATED';
  if (i >= 0 && belongs) list.sandboxes[i] = { ...list.sandboxes[i], ...sb };
  else if (i >= 0) list.sandboxes.splice(i, 1);
  else if (belongs) list.sandboxes.unshift(sb);
  list.sandboxes = ordered(list.sandboxes);
  render();
}

export function remove(id) {
  list.sandboxes = list.sandboxes.filter((s) => s.id !== id);
  render();
}

let drawn = null;

/** When the sandbox got to where it is: "created 5m ago", "paused 2m ago". */
function stampOf(sb) {
  if (sb.status === 'TERMINATED') return `terminated ${ago(sb.terminatedAt)}`;
  if (sb.status === 'PAUSED') return pausedAgo(sb);
  return `created ${ago(sb.createdAt)}`;
}

/**
 * Draws the list; the shown sandbox is marked current. Nothing is redrawn
 * when nothing changed, and a focused entry keeps the focus when it is.
 */
export function render() {
  const route = here();
  const selected = route.page === 'sandbox' ? route.id : null;
  // Switching sandboxes keeps the view (a file path belongs to one sandbox).
  const tab = route.page === 'sandbox' ? route.tab : null;
  const ul = $('sandbox-list');
  const picture = JSON.stringify([list.loaded, list.filter, selected, tab, route.params,
    list.sandboxes.map((s) => [s.id, s.name, s.status, stampOf(s)])]);
  if (picture === drawn) return;
  drawn = picture;
  const focused = ul.contains(document.activeElement) ? document.activeElement.closest('li[data-id]') : null;
  const focusId = focused ? focused.getAttribute('data-id') : null;
  ul.textContent = '';
  const empty = list.loaded && list.sandboxes.length === 0;
  $('empty').hidden = !empty;
  $('empty-text').textContent = list.filter === 'terminated' ? 'No terminated sandboxes.' : 'No sandboxes yet.';
  $('empty-create').hidden = list.filter === 'terminated';
  for (const sb of list.sandboxes) {
    const current = sb.id === selected;
    const href = format({ page: 'sandbox', id: sb.id, tab, params: route.params });
    const stamp = stampOf(sb);
    ul.append(el('li', { 'data-id': sb.id },
      el('a', { class: 'sb', href, 'aria-current': current ? 'true' : 'false' },
        el('span', { class: 'sb-name' }, sb.name),
        el('span', { class: `chip ${sb.status}` }, sb.status),
        el('span', { class: 'sb-meta' }, `${sb.id} · ${stamp}`))));
  }
  if (focusId) {
    const again = ul.querySelector(`li[data-id="${CSS.escape(focusId)}"] a`);
    if (again) again.focus();
  }
}

/** Follows the `show` parameter of the URL. */
export function applyFilter(route) {
  const want = route.params && route.params.show === 'terminated' ? 'terminated' : 'active';
  $('list-filter').value = want;
  if (want !== list.filter) {
    list.filter = want;
    list.loaded = false;
    list.sandboxes = [];
    render();
    refresh();
  }
}

$('list-filter').addEventListener('change', (e) => {
  const route = here();
  go({ ...route, params: { ...route.params, show: e.target.value === 'terminated' ? 'terminated' : '' } });
});
