// Administration: accounts (list, create; the new token is shown once)
// with each one's quota and use, editable, disabled and
// enabled again, and teams (list, create, add and remove members). Also the
// signed-in account's own credentials on the home page: its API tokens and
// dashboard sessions, made (the secret shown once) and revoked.

import { api } from './api.js';
import { $, el, notice, showError, ago, until, when, table, busy, ask, quotaRows, parseNumber, FieldError, markFields, num } from './ui.js';

let section = null;
let accounts = [];
/** The account whose quota the editor shows, or null. */
let editing = null;
/** The signed-in account (`GET /me`): its own row has no Disable button. */
let self = null;

/**
 * Shows a secret in `box` this once, with Copy and a button that removes it
 * from the page; `intro` says what it is and that it will not be shown again.
 */
function showSecret(box, id, intro, secret) {
  box.textContent = '';
  const code = el('code', { id, class: 'token' }, secret);
  box.append(
    el('p', {}, intro),
    code,
    el('div', { class: 'row' },
      el('button', { type: 'button', onclick: async (ev) => {
        try { await navigator.clipboard.writeText(secret); ev.target.textContent = 'Copied'; } catch (_) {
          const range = document.createRange(); range.selectNodeContents(code);
          getSelection().removeAllRanges(); getSelection().addRange(range);
          ev.target.textContent = 'Selected: press Ctrl+C';
        }
      } }, 'Copy token'),
      el('button', { type: 'button', onclick: () => { box.hidden = true; box.textContent = ''; } }, 'Done, hide it')));
  box.hidden = false;
}

const quotaPath = (id) => `/api/v1/accounts/${encodeURIComponent(id)}/quota`;

async function loadAccounts() {
  accounts = (await api('GET', '/api/v1/accounts')).accounts;
  return accounts;
}

async function showAccounts() {
  const host = $('accounts-list');
  try { await loadAccounts(); } catch (e) {
    host.textContent = '';
    host.append(el('p', { class: 'error' }, `Could not load accounts: ${e.message}`));
    return;
  }
  if (section !== 'accounts') return;
  // Each account's quota and use; one that fails to load says why in its row.
  const quotas = await Promise.all(accounts.map((a) => api('GET', quotaPath(a.id)).catch((e) => e)));
  if (section !== 'accounts') return;
  host.textContent = '';
  host.append(table(['Name', 'ID', 'Role', 'Status', 'Sandboxes', 'CPU', 'Memory', 'Disk', 'Snapshots', 'Uploads', 'Created', ''], accounts.map((a, i) => {
    const q = quotas[i];
    const cells = q instanceof Error
      ? [el('td', { colspan: 6, class: 'error' }, `Quota unavailable: ${q.message}`)]
      : quotaRows(q).map(([, text, key]) => el('td', { 'data-quota': key }, text));
    const own = self && self.account.id === a.id;
    const toggle = a.disabledAt
      ? el('button', { type: 'button', class: 'small', 'aria-label': `Enable ${a.name}`, onclick: (ev) => busy(ev.target, () => setDisabled(a, false)) }, 'Enable')
      : own ? null : el('button', { type: 'button', class: 'small danger', 'aria-label': `Disable ${a.name}`, onclick: (ev) => busy(ev.target, () => setDisabled(a, true)) }, 'Disable');
    return el('tr', { 'data-account': a.id, 'data-disabled': a.disabledAt ? 'true' : null },
      el('td', {}, a.name), el('td', { class: 'mono small' }, a.id), el('td', {}, a.isAdmin ? 'administrator' : 'user'),
      el('td', { 'data-status': a.disabledAt ? 'disabled' : 'active' }, a.disabledAt
        ? el('span', { class: 'chip disabled', title: `Disabled ${when(a.disabledAt)}` }, 'disabled')
        : 'active'),
      cells, el('td', {}, ago(a.createdAt)),
      el('td', {}, el('div', { class: 'row-actions' },
        q instanceof Error ? null : el('button', { type: 'button', class: 'small', 'aria-label': `Edit the quota of ${a.name}`, onclick: () => editQuota(a, q) }, 'Edit quota'),
        toggle)));
  }), { class: 'accounts' }));
}

/** Disables account `a` (after asking) or enables it again. */
async function setDisabled(a, disable) {
  if (disable) {
    const ok = await ask({
      title: `Disable ${a.name}?`,
      text: 'Its API tokens, dashboard sessions and sandbox tokens are refused until it is enabled again. Its sandboxes are left as they are.',
      label: null, confirm: 'Disable', danger: true,
    });
    if (ok === null) return;
  }
  try {
    await api('POST', `/api/v1/accounts/${encodeURIComponent(a.id)}/${disable ? 'disable' : 'enable'}`, {});
    notice(disable
      ? `Disabled ${a.name}: its tokens and sessions are refused until it is enabled again.`
      : `Enabled ${a.name}: its tokens and sessions work again.`);
  } catch (e) {
    showError(`Could not ${disable ? 'disable' : 'enable'} ${a.name}`, e);
  }
  showAccounts();
}

// ---------- quotas ----------

const quotaForm = $('quota-form');
const QUOTA_FIELDS = {
  sandboxes: 'sandboxes', cpuCores: 'cpuCores', memoryGB: 'memoryGB', diskGB: 'diskGB',
  snapshots: 'snapshots', snapshotGB: 'snapshotGB', uploads: 'uploads', uploadGB: 'uploadGB',
};

function quotaStatus(text, kind = '') {
  const s = $('quota-status');
  s.className = `status-line ${kind}`.trim();
  s.textContent = text;
}

/** Opens the quota editor on account `a` with its quota `q` (empty: unlimited). */
function editQuota(a, q) {
  editing = a;
  const f = quotaForm.elements;
  for (const key of Object.keys(QUOTA_FIELDS)) f[key].value = q.quota[key] == null ? '' : num(q.quota[key]);
  $('quota-title').textContent = `Quota of ${a.name}`;
  markFields(quotaForm, [], QUOTA_FIELDS);
  quotaStatus(`Uses now: ${quotaRows(q).map(([label, text]) => `${label.toLowerCase()} ${text}`).join(', ')}.`);
  quotaForm.hidden = false;
  quotaForm.scrollIntoView({ block: 'nearest' });
  f.sandboxes.focus();
}

/** The quota the editor holds; throws FieldError naming a bad field. */
function quotaBody() {
  const f = quotaForm.elements;
  const value = (n) => (n === undefined ? null : n);
  return {
    sandboxes: value(parseNumber(f.sandboxes.value, 'sandboxes', { min: 0, integer: true })),
    cpuCores: value(parseNumber(f.cpuCores.value, 'cpuCores', { min: 0 })),
    memoryGB: value(parseNumber(f.memoryGB.value, 'memoryGB', { min: 0 })),
    diskGB: value(parseNumber(f.diskGB.value, 'diskGB', { min: 0, integer: true })),
    snapshots: value(parseNumber(f.snapshots.value, 'snapshots', { min: 0, integer: true })),
    snapshotGB: value(parseNumber(f.snapshotGB.value, 'snapshotGB', { min: 0 })),
    uploads: value(parseNumber(f.uploads.value, 'uploads', { min: 0, integer: true })),
    uploadGB: value(parseNumber(f.uploadGB.value, 'uploadGB', { min: 0 })),
  };
}

quotaForm.addEventListener('submit', (e) => {
  e.preventDefault();
  const a = editing;
  if (!a) return;
  let body;
  try {
    body = quotaBody();
  } catch (err) {
    if (!(err instanceof FieldError)) throw err;
    markFields(quotaForm, [err], QUOTA_FIELDS);
    quotaStatus(`Not saved: ${err.message}`, 'error');
    return;
  }
  busy($('quota-save'), async () => {
    let saved;
    try {
      saved = await api('PUT', quotaPath(a.id), body);
    } catch (err) {
      markFields(quotaForm, err.fields || [], QUOTA_FIELDS);
      quotaStatus(`Not saved: ${err.message}`, 'error');
      return;
    }
    markFields(quotaForm, [], QUOTA_FIELDS);
    quotaStatus(`Saved the quota of ${a.name}: ${quotaRows(saved).map(([label, text]) => `${label.toLowerCase()} ${text}`).join(', ')}.`);
    showAccounts();
  });
});

$('quota-cancel').addEventListener('click', () => {
  editing = null;
  quotaForm.hidden = true;
});

$('account-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const f = e.target.elements;
  const name = f.name.value.trim();
  if (!name) {
    f.name.setAttribute('aria-invalid', 'true');
    showError('Could not create the account', new Error('name: enter a name'));
    return;
  }
  f.name.removeAttribute('aria-invalid');
  busy(e.submitter || e.target.querySelector('button'), async () => {
    let made;
    try {
      made = await api('POST', '/api/v1/accounts', { name, isAdmin: f.isAdmin.checked });
    } catch (err) {
      showError(`Could not create the account ${name}`, err);
      return;
    }
    e.target.reset();
    showSecret($('account-token'), 'new-token',
      [el('strong', {}, `Account ${made.account.name} created.`), ' Its API token is shown this once; copy it now:'],
      made.token);
    showAccounts();
  });
});

// ---------- teams ----------

async function showTeams() {
  const host = $('teams-list');
  let teams;
  try {
    [teams] = await Promise.all([api('GET', '/api/v1/teams').then((r) => r.teams), loadAccounts()]);
  } catch (e) {
    host.textContent = '';
    host.append(el('p', { class: 'error' }, `Could not load teams: ${e.message}`));
    return;
  }
  if (section !== 'teams') return;
  host.textContent = '';
  if (!teams.length) {
    host.append(el('p', { class: 'muted' }, 'No teams yet.'));
    return;
  }
  for (const t of teams) {
    const memberIds = new Set(t.members.map((m) => m.id));
    const candidates = accounts.filter((a) => !memberIds.has(a.id));
    const select = el('select', { 'aria-label': `Account to add to ${t.name}` },
      candidates.map((a) => el('option', { value: a.id }, `${a.name} (${a.id})`)));
    host.append(el('section', { class: 'team card', 'data-team': t.id },
      el('h3', {}, t.name, el('span', { class: 'muted small' }, ` ${t.id} · created ${when(t.createdAt)}`)),
      t.members.length
        ? el('ul', { class: 'members' }, t.members.map((m) => el('li', { 'data-member': m.id }, `${m.name} `,
          el('span', { class: 'muted small' }, m.id), ' ',
          el('button', { class: 'small', type: 'button', 'aria-label': `Remove ${m.name} from ${t.name}`, onclick: (ev) => busy(ev.target, () => removeMember(t, m)) }, 'Remove'))))
        : el('p', { class: 'muted' }, 'No members yet.'),
      candidates.length
        ? el('form', { class: 'row wrap', onsubmit: (ev) => { ev.preventDefault(); busy(ev.submitter || ev.target.querySelector('button'), () => addMember(t, select.value)); } },
          select, el('button', { type: 'submit' }, 'Add member'))
        : null));
  }
}

async function addMember(team, accountId) {
  try {
    await api('POST', `/api/v1/teams/${encodeURIComponent(team.id)}/members`, { accountId });
    notice(`Added ${(accounts.find((a) => a.id === accountId) || {}).name || accountId} to ${team.name}.`);
  } catch (e) {
    showError(`Could not add the member to ${team.name}`, e);
  }
  showTeams();
}

async function removeMember(team, member) {
  const ok = await ask({ title: `Remove ${member.name} from ${team.name}?`, text: 'They no longer see the team\'s sandboxes.', label: null, confirm: 'Remove', danger: true });
  if (ok === null) return;
  try {
    await api('DELETE', `/api/v1/teams/${encodeURIComponent(team.id)}/members/${encodeURIComponent(member.id)}`);
    notice(`Removed ${member.name} from ${team.name}.`);
  } catch (e) {
    showError(`Could not remove ${member.name} from ${team.name}`, e);
  }
  showTeams();
}

$('team-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const name = e.target.elements.name.value.trim();
  if (!name) {
    showError('Could not create the team', new Error('name: enter a name'));
    return;
  }
  busy(e.submitter || e.target.querySelector('button'), async () => {
    try {
      await api('POST', '/api/v1/teams', { name });
      notice(`Created the team ${name}.`);
      e.target.reset();
    } catch (err) {
      showError(`Could not create the team ${name}`, err);
    }
    showTeams();
  });
});

export const adminPage = {
  show(route, me) {
    self = me;
    section = route.section === 'teams' ? 'teams' : 'accounts';
    $('admin-accounts').hidden = section !== 'accounts';
    if (section !== 'accounts') { editing = null; $('quota-form').hidden = true; }
    $('admin-teams').hidden = section !== 'teams';
    $('admin-tab-accounts').setAttribute('aria-selected', String(section === 'accounts'));
    $('admin-tab-teams').setAttribute('aria-selected', String(section === 'teams'));
    if (section === 'accounts') showAccounts(); else showTeams();
  },
  hide() {
    section = null;
    editing = null;
    $('quota-form').hidden = true;
    $('account-token').hidden = true;
    $('account-token').textContent = '';
  },
};

// ---------- the signed-in account's tokens and sessions ----------

/** Where the id of this browser's dashboard session is kept (an id, never a secret). */
const SESSION_KEY = 'stockade.session';
let tokenOwner = null;

const tokensPath = (id) => `/api/v1/accounts/${encodeURIComponent(id)}/tokens`;

/**
 * Notes which listed session is this browser's, right after signing in:
 * the account's newest session, which the sign-in just opened. The server
 * does not say which session a request came with; this lets the list mark
 * it and warn before it is ended.
 */
export async function rememberSession(accountId) {
  try {
    const { tokens } = await api('GET', tokensPath(accountId));
    const newest = tokens.filter((t) => t.kind === 'session')
      .sort((a, b) => new Date(b.createdAt) - new Date(a.createdAt))[0];
    if (newest) sessionStorage.setItem(SESSION_KEY, newest.id);
  } catch (_) { /* the list shows no marker then */ }
}

export function forgetSession() {
  sessionStorage.removeItem(SESSION_KEY);
}

async function showTokens() {
  const me = tokenOwner;
  if (!me) return;
  const host = $('tokens-list');
  let tokens;
  try {
    ({ tokens } = await api('GET', tokensPath(me.account.id)));
  } catch (e) {
    if (tokenOwner !== me) return;
    host.textContent = '';
    host.append(el('p', { class: 'error' }, `Could not load the tokens: ${e.message}`));
    $('my-tokens').hidden = false;
    return;
  }
  if (tokenOwner !== me) return;
  const current = sessionStorage.getItem(SESSION_KEY);
  const currentParent = (tokens.find((t) => t.id === current) || {}).parentId;
  const byId = new Map(tokens.map((t) => [t.id, t]));
  host.textContent = '';
  host.append(table(['Name', 'Kind', 'Created', 'Expires', 'Last used', ''], tokens.map((t) => {
    const session = t.kind === 'session';
    const parent = session && t.parentId ? byId.get(t.parentId) : null;
    const here = t.id === current;
    return el('tr', { 'data-token': t.id, 'data-kind': t.kind, 'data-current': here ? 'true' : null },
      el('td', {}, t.name,
        parent ? el('span', { class: 'muted small' }, ` (signed in with ${parent.name})`) : null,
        here ? [' ', el('span', { class: 'chip current' }, 'this browser')] : null),
      el('td', { 'data-kind': t.kind }, session ? 'dashboard session' : 'API token'),
      el('td', { title: when(t.createdAt) }, ago(t.createdAt)),
      el('td', { title: t.expiresAt ? when(t.expiresAt) : 'until it is revoked' }, until(t.expiresAt)),
      el('td', { title: t.lastUsedAt ? when(t.lastUsedAt) : '' }, t.lastUsedAt ? ago(t.lastUsedAt) : 'never'),
      el('td', {}, el('button', {
        type: 'button', class: 'small danger', 'aria-label': `Revoke ${session ? 'the session' : 'the token'} ${t.name} (${t.id})`,
        onclick: (ev) => busy(ev.target, () => revoke(t, here || t.id === currentParent)),
      }, 'Revoke')));
  }), { class: 'tokens' }));
  $('my-tokens').hidden = false;
}

/** Revokes token `t` after asking; `signsOut`: it is (or opened) this browser's session. */
async function revoke(t, signsOut) {
  const session = t.kind === 'session';
  const ok = await ask({
    title: session ? `End the dashboard session ${t.name}?` : `Revoke the token ${t.name}?`,
    text: `${session ? 'The browser that holds it is signed out' : 'Whatever uses it is refused from the next request on, and the dashboard sessions opened with it end'}.${signsOut ? ' That signs you out here too.' : ''}`,
    label: null, confirm: 'Revoke', danger: true,
  });
  if (ok === null) return;
  try {
    await api('DELETE', `/api/v1/tokens/${encodeURIComponent(t.id)}`);
    notice(session ? `Ended the session ${t.name}.` : `Revoked the token ${t.name}.`);
  } catch (e) {
    showError(`Could not revoke ${t.name}`, e);
  }
  // When this browser's own session ended, this request is refused and signs out.
  showTokens();
}

$('token-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const me = tokenOwner;
  if (!me) return;
  const f = e.target.elements;
  const name = f.name.value.trim();
  if (!name) {
    f.name.setAttribute('aria-invalid', 'true');
    showError('Could not create the token', new Error('name: enter what the token is for'));
    return;
  }
  f.name.removeAttribute('aria-invalid');
  const body = { name };
  if (f.expires.value) body.expiresInSeconds = Number(f.expires.value);
  busy($('token-create'), async () => {
    let made;
    try {
      made = await api('POST', tokensPath(me.account.id), body);
    } catch (err) {
      if ((err.fields || []).some((x) => x.field === 'name')) f.name.setAttribute('aria-invalid', 'true');
      showError(`Could not create the token ${name}`, err);
      return;
    }
    e.target.reset();
    notice('');
    showSecret($('token-secret'), 'new-api-token',
      [el('strong', {}, `Token ${made.name} created${made.expiresAt ? `, expires ${when(made.expiresAt)}` : ''}.`),
        ' Copy it now: it won\'t be shown again.'],
      made.token);
    showTokens();
  });
});

/** The signed-in account's tokens and sessions, on the home page. */
export const tokensCard = {
  show(me) {
    if (tokenOwner !== me) this.hide();
    tokenOwner = me;
    showTokens();
  },
  hide() {
    tokenOwner = null;
    $('my-tokens').hidden = true;
    $('token-secret').hidden = true;
    $('token-secret').textContent = '';
  },
};
