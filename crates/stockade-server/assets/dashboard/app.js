// Stockade's dashboard: sign-in, the page shown for the URL, and the list's
// refresh, the caller's own quota and use and its tokens and sessions on the
// home page, and for administrators the warnings of `/health` (disk limits
// or egress lists not enforced, isolation degraded). No build step and no CDN: every module is
// served from the binary.
//
// The API token is handed to the server once, at sign-in; the session then
// lives in an HttpOnly cookie that no script (this one included) can read,
// so a reload keeps the session and nothing holds the token.

import { api, CSRF, onUnauthorized } from './api.js';
import { $, el, notice, noticeFollows, quotaRows } from './ui.js';
import { onRoute, reapply, here } from './router.js';
import * as sidebar from './list.js';
import { showSandbox, hideSandbox, closeAll } from './sandbox.js';
import { showCreate } from './create.js';
import { snapshotsPage } from './snapshots.js';
import { templatesPage } from './templates.js';
import { volumesPage } from './volumes.js';
import { sharedVolumesPage } from './sharedvolumes.js';
import { adminPage, tokensCard, rememberSession, forgetSession } from './admin.js';
import { webhooksPage } from './webhooks.js';
import { auditPage } from './audit.js';

const PAGES = ['home', 'new', 'sandbox', 'snapshots', 'templates', 'volumes', 'shared-volumes', 'webhooks', 'audit', 'admin'];
const NAV = {
  home: 'nav-sandboxes', new: 'nav-sandboxes', sandbox: 'nav-sandboxes', snapshots: 'nav-snapshots', templates: 'nav-templates', volumes: 'nav-volumes',
  'shared-volumes': 'nav-shared-volumes', webhooks: 'nav-webhooks', audit: 'nav-audit', admin: 'nav-admin',
};
const state = { signedIn: false, me: null, listTimer: null, healthTimer: null, page: null };
/** How often an administrator's page asks `/health` for warnings. */
const HEALTH_MS = 30000;

/** The caller's quota and use, on the home page. */
async function showMyQuota() {
  const me = state.me;
  if (!me) return;
  let q;
  try {
    q = await api('GET', `/api/v1/accounts/${encodeURIComponent(me.account.id)}/quota`);
  } catch (_) {
    // A server without quotas: nothing to show.
    $('my-quota').hidden = true;
    return;
  }
  if (state.me !== me) return;
  const list = $('my-quota-list');
  list.textContent = '';
  for (const [label, text, key] of quotaRows(q)) list.append(el('dt', {}, label), el('dd', { 'data-quota': key }, text));
  $('my-quota').hidden = false;
}

/** The warnings of `/health`, for administrators: a banner while there are any. */
async function showHealthWarnings() {
  const box = $('health-warnings');
  if (!state.me || !state.me.account.isAdmin) { box.hidden = true; return; }
  let warnings;
  try {
    // Unhealthy is a 503 with the same body.
    const resp = await fetch('/api/v1/health', { credentials: 'same-origin' });
    warnings = (await resp.json()).warnings || [];
  } catch (_) {
    return;
  }
  if (!state.me || !state.me.account.isAdmin) return;
  const list = $('health-warning-list');
  list.textContent = '';
  for (const w of warnings) list.append(el('li', {}, w));
  // One line until opened: the warnings are long and stay until fixed.
  $('health-summary').textContent = `This server needs attention: ${warnings.length === 1 ? 'one warning' : `${warnings.length} warnings`} (${warnings.map((w) => w.split(':')[0]).join('; ')})`;
  box.hidden = !warnings.length;
}

function show(route) {
  if (!state.signedIn) return;
  // A message about one place does not follow the user to another.
  noticeFollows(route);
  sidebar.applyFilter(route);
  const page = route.page === 'admin' && !(state.me && state.me.account.isAdmin) ? 'home' : route.page;
  if (page !== state.page) {
    if (state.page === 'sandbox') hideSandbox();
    if (state.page === 'snapshots') snapshotsPage.hide();
    if (state.page === 'templates') templatesPage.hide();
    if (state.page === 'volumes') volumesPage.hide();
    if (state.page === 'shared-volumes') sharedVolumesPage.hide();
    if (state.page === 'webhooks') webhooksPage.hide();
    if (state.page === 'audit') auditPage.hide();
    if (state.page === 'admin') adminPage.hide();
    if (state.page === 'home') tokensCard.hide();
    for (const p of PAGES) $(`page-${p}`).hidden = p !== page;
    for (const id of new Set(Object.values(NAV))) $(id).removeAttribute('aria-current');
    $(NAV[page]).setAttribute('aria-current', 'page');
    state.page = page;
  }
  if (page === 'home') {
    showMyQuota();
    tokensCard.show(state.me);
  }
  if (page === 'sandbox') showSandbox(route);
  else if (page === 'new') showCreate(route);
  else if (page === 'snapshots') snapshotsPage.show();
  else if (page === 'templates') templatesPage.show();
  else if (page === 'volumes') volumesPage.show();
  else if (page === 'shared-volumes') sharedVolumesPage.show(route);
  else if (page === 'webhooks') webhooksPage.show();
  else if (page === 'audit') auditPage.show(route, state.me);
  else if (page === 'admin') adminPage.show(route, state.me);
  sidebar.render();
}

onRoute(show);

async function showApp() {
  let me;
  try {
    me = await api('GET', '/api/v1/me');
  } catch (e) {
    signOut(e.status === 401 ? 'That token was not accepted.' : e.message);
    return;
  }
  state.me = me;
  state.signedIn = true;
  $('signin').hidden = true;
  $('app').hidden = false;
  $('whoami').textContent = `${me.account.name}${me.account.isAdmin ? ' (admin)' : ''}`;
  $('nav-admin').hidden = !me.account.isAdmin;
  $('nav-audit').hidden = !me.account.isAdmin;
  state.page = null;
  reapply();
  await sidebar.refresh();
  clearInterval(state.listTimer);
  state.listTimer = setInterval(() => {
    if (document.visibilityState === 'hidden') return;
    sidebar.refresh();
    if (state.page === 'home') showMyQuota();
  }, 3000);
  clearInterval(state.healthTimer);
  showHealthWarnings();
  if (me.account.isAdmin) state.healthTimer = setInterval(() => { if (document.visibilityState !== 'hidden') showHealthWarnings(); }, HEALTH_MS);
}

/** Ends the session (unless `quiet`: it is gone already) and shows the sign-in form. */
async function signOut(message, { quiet } = {}) {
  state.signedIn = false;
  clearInterval(state.listTimer);
  clearInterval(state.healthTimer);
  // The cookie is gone before the form shows, so a reload stays signed out.
  if (!quiet) await fetch('/api/v1/session', { method: 'DELETE', headers: CSRF, credentials: 'same-origin' }).catch(() => {});
  state.me = null;
  forgetSession();
  tokensCard.hide();
  closeAll();
  state.page = null;
  notice('');
  $('health-warnings').hidden = true;
  $('my-quota').hidden = true;
  $('app').hidden = true;
  $('signin').hidden = false;
  $('token-input').value = '';
  const err = $('signin-error');
  err.textContent = message || '';
  err.hidden = !message;
  $('token-input').focus();
}

onUnauthorized(() => {
  if (state.signedIn) signOut('Your session has ended; sign in again.', { quiet: true });
});

$('signin-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const token = $('token-input').value.trim();
  $('token-input').value = '';
  let signedIn;
  try {
    signedIn = await api('POST', '/api/v1/session', { token }, { repeatable: true });
  } catch (err) {
    signOut(err.status === 401 ? 'That token was not accepted.' : err.message, { quiet: true });
    return;
  }
  await rememberSession(signedIn.account.id);
  await showApp();
});
$('signout').addEventListener('click', () => signOut());
$('notice-close').addEventListener('click', () => notice(''));

// A session cookie from an earlier visit (or a reload) signs in at once,
// and the URL says where to go.
api('GET', '/api/v1/me').then(() => showApp(), () => signOut(undefined, { quiet: true }));
if (here().page === 'home' && !location.hash) history.replaceState(null, '', '#/');
