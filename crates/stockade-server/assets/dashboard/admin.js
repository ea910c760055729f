// Administration (UI-8): accounts (list, create; the new token is shown
// once) with each one's quota and use, editable (SEC-16), and teams (list,
// create, add and remove members).

import { api } from './api.js';
import { $, el, notice, showError, ago, when, table, busy, ask, quotaRows, parseNumber, FieldError, markFields, num } from './ui.js';

let section = null;
let accounts = [];
/** The account whose quota the editor shows, or null. */
let editing = null;

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
  host.append(table(['Name', 'ID', 'Role', 'Sandboxes', 'CPU', 'Memory', 'Disk', 'Created', ''], accounts.map((a, i) => {
    const q = quotas[i];
    const cells = q instanceof Error
      ? [el('td', { colspan: 4, class: 'error' }, `Quota unavailable: ${q.message}`)]
      : quotaRows(q).map(([, text, key]) => el('td', { 'data-quota': key }, text));
    return el('tr', { 'data-account': a.id },
      el('td', {}, a.name), el('td', { class: 'mono small' }, a.id), el('td', {}, a.isAdmin ? 'administrator' : 'user'),
      cells, el('td', {}, ago(a.createdAt)),
      el('td', {}, q instanceof Error ? null : el('button', { type: 'button', class: 'small', 'aria-label': `Edit the quota of ${a.name}`, onclick: () => editQuota(a, q) }, 'Edit quota')));
  }), { class: 'accounts' }));
}

// ---------- quotas ----------

const quotaForm = $('quota-form');
const QUOTA_FIELDS = { sandboxes: 'sandboxes', cpuCores: 'cpuCores', memoryGB: 'memoryGB', diskGB: 'diskGB' };

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
    const box = $('account-token');
    box.textContent = '';
    const token = el('code', { id: 'new-token', class: 'token' }, made.token);
    box.append(
      el('p', {}, el('strong', {}, `Account ${made.account.name} created.`), ' Its API token is shown this once; copy it now:'),
      token,
      el('div', { class: 'row' },
        el('button', { type: 'button', onclick: async (ev) => {
          try { await navigator.clipboard.writeText(made.token); ev.target.textContent = 'Copied'; } catch (_) {
            const range = document.createRange(); range.selectNodeContents(token);
            getSelection().removeAllRanges(); getSelection().addRange(range);
            ev.target.textContent = 'Selected: press Ctrl+C';
          }
        } }, 'Copy token'),
        el('button', { type: 'button', onclick: () => { box.hidden = true; box.textContent = ''; } }, 'Done, hide it')));
    box.hidden = false;
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
  show(route) {
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
