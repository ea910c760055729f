// Templates: the account's sandbox images, built from a Dockerfile. The
// list (each template's newest build, a new sandbox from it, its build log,
// delete), a form that builds one (a name, the Dockerfile and an optional
// build context, uploaded under its SHA-256 unless stored already), and the
// log of one build, followed while it runs.

import { api } from './api.js';
import { $, el, notice, showError, explain, ago, when, ask, table, busy, markFields, FieldError, statusLine } from './ui.js';
import { format } from './router.js';

/** How often the log of a running build is read again. */
const LOG_MS = 700;
/** Log lines asked for at once; after a full page the next is asked for at once. */
const LOG_PAGE = 500;
/** The chip of each build status, coloured as the sandbox state it resembles. */
const CHIP = { waiting: 'PENDING', building: 'CREATING', ready: 'READY', error: 'ERROR' };

const form = $('template-form');
/** API field → the form's input. */
const FIELDS = { name: 'name', names: 'name', tags: 'name', dockerfile: 'dockerfile', contextHash: 'context', hash: 'context' };
const formStatus = statusLine('template-status');

let shown = false;
let listSeq = 0;
/** The build whose log is shown: `{ templateId, buildId, offset, timer }`, or null. */
let following = null;
/**
 * The build a refused start left waiting, `{ name, template, buildId }`:
 * the next submit of that name starts it rather than making another.
 */
let waiting = null;

const templatePath = (id, rest = '') => `/api/v1/templates/${encodeURIComponent(id)}${rest}`;

function chip(status) {
  return el('span', { class: `chip ${CHIP[status] || ''}`, 'data-status': status }, status);
}

/** The account's own templates, each with its builds (newest first). */
async function ownTemplates() {
  const list = (await api('GET', '/api/v1/templates')).templates.filter((t) => !t.shared);
  // One deleted meanwhile is left out.
  const detailed = await Promise.all(list.map((t) => api('GET', templatePath(t.templateId)).catch(() => null)));
  return detailed.filter(Boolean);
}

/** The names of the account's templates that have a ready build, for the create form. */
export async function readyTemplates() {
  return (await ownTemplates()).filter((t) => t.builds.some((b) => b.status === 'ready')).map((t) => t.names[0]);
}

// ---------- the list ----------

async function loadList() {
  const mine = ++listSeq;
  const host = $('templates-list');
  let templates;
  try {
    templates = await ownTemplates();
  } catch (e) {
    if (!shown || mine !== listSeq) return;
    host.textContent = '';
    host.append(el('p', { class: 'error' }, `Could not load the templates: ${explain(e)}`));
    return;
  }
  if (!shown || mine !== listSeq) return;
  host.textContent = '';
  if (!templates.length) {
    host.append(el('p', { class: 'muted', id: 'templates-empty' }, 'No templates yet: build one below.'));
    return;
  }
  const rows = templates.map((t) => {
    const name = t.names[0];
    const newest = t.builds[0];
    const at = newest ? newest.finishedAt || newest.createdAt : t.createdAt;
    return el('tr', { 'data-template': name },
      el('td', {}, el('strong', {}, name),
        t.names.length > 1 ? el('div', { class: 'small' }, `also ${t.names.slice(1).join(', ')}`) : null,
        el('div', { class: 'muted small' }, t.templateId)),
      el('td', {}, newest ? chip(newest.status) : '—'),
      el('td', { title: when(at) }, ago(at)),
      el('td', {}, el('span', { class: 'row-actions' },
        t.builds.some((b) => b.status === 'ready')
          ? el('a', { class: 'button small primary', href: format({ page: 'new', params: { template: name } }) }, 'New sandbox from it') : null,
        newest ? el('button', { type: 'button', class: 'small', 'aria-label': `Build log of ${name}`, onclick: () => follow(t, newest.buildId) }, 'Build log') : null,
        el('button', { type: 'button', class: 'small danger', 'aria-label': `Delete template ${name}`, onclick: (e) => busy(e.target, () => remove(t)) }, 'Delete'))));
  });
  host.append(table(['Template', 'Newest build', 'When', ''], rows, { class: 'templates', id: 'templates-table' }));
}

async function remove(t) {
  const name = t.names[0];
  const ok = await ask({ title: `Delete template ${name}?`, text: 'Its names are free at once; sandboxes made from it keep running.', label: null, confirm: 'Delete', danger: true });
  if (ok === null) return;
  try {
    await api('DELETE', templatePath(t.templateId));
    notice(`Deleted template ${name}.`);
  } catch (e) {
    showError(`Could not delete template ${name}`, e);
  }
  if (following && following.templateId === t.templateId) closeLog();
  if (waiting && waiting.template.templateId === t.templateId) waiting = null;
  loadList();
}

// ---------- one build's log ----------

/** Shows the log of a build from its first line and follows it until the build ends. */
function follow(t, buildId) {
  closeLog();
  const f = { templateId: t.templateId, buildId, offset: 0, timer: null };
  following = f;
  $('template-log-title').textContent = `Build log of ${t.names[0]}`;
  $('template-log').textContent = '';
  $('template-build-status').textContent = '';
  $('template-build-reason').hidden = true;
  $('template-log-box').hidden = false;
  $('template-log-box').scrollIntoView({ block: 'nearest' });
  readLog(f);
}

async function readLog(f) {
  let answer;
  try {
    answer = await api('GET', `${templatePath(f.templateId, `/builds/${encodeURIComponent(f.buildId)}`)}?logsOffset=${f.offset}&limit=${LOG_PAGE}`);
  } catch (e) {
    if (following !== f) return;
    $('template-build-reason').textContent = `Could not read the build log: ${explain(e)}`;
    $('template-build-reason').hidden = false;
    return;
  }
  if (following !== f) return;
  const { build, logEntries } = answer;
  const log = $('template-log');
  // The log scrolls along unless the user scrolled up to read.
  const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
  log.append(...logEntries.map((l) => el('span', { class: l.level === 'warn' || l.level === 'error' ? 'stderr' : null }, `${l.message}\n`)));
  if (atEnd) log.scrollTop = log.scrollHeight;
  f.offset += logEntries.length;
  $('template-build-status').replaceChildren(chip(build.status));
  $('template-build-reason').textContent = build.status === 'error' ? build.reason || 'The build failed.' : '';
  $('template-build-reason').hidden = build.status !== 'error';
  if ((build.status === 'ready' || build.status === 'error') && !logEntries.length) {
    // Its end shows in the list: the chip, and a sandbox from it once ready.
    if (shown) loadList();
    return;
  }
  f.timer = setTimeout(() => readLog(f), logEntries.length === LOG_PAGE ? 0 : LOG_MS);
}

function closeLog() {
  if (following) clearTimeout(following.timer);
  following = null;
  $('template-log-box').hidden = true;
  $('template-log').textContent = '';
}

$('template-log-close').addEventListener('click', () => closeLog());

// ---------- the form ----------

/** The SHA-256 of a file's bytes in lowercase hex: the name its files are stored under. */
async function sha256(file) {
  if (!crypto.subtle) throw new FieldError('contextHash', 'the browser hashes the build context only on a page served over HTTPS or from localhost');
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', await file.arrayBuffer()));
  return [...digest].map((b) => b.toString(16).padStart(2, '0')).join('');
}

/**
 * Builds `name` from a Dockerfile: a waiting build of it (or the one a
 * refused start left), the build context stored unless it is already, then
 * the build started. Answers the template and the build.
 */
async function build(name, dockerfile, file) {
  const body = { dockerfile };
  if (file) {
    formStatus(`Hashing ${file.name}…`, 'loading');
    body.contextHash = await sha256(file);
  }
  if (!waiting || waiting.name !== name) {
    formStatus(`Making ${name}…`, 'loading');
    const t = await api('POST', '/api/v1/templates', { name });
    waiting = { name, template: t, buildId: t.builds[0].buildId };
  }
  const w = waiting;
  try {
    if (file) {
      const files = templatePath(w.template.templateId, `/files/${body.contextHash}`);
      if (!(await api('GET', files)).present) {
        formStatus(`Uploading ${file.name}…`, 'loading');
        await api('PUT', files, file, { raw: true, headers: { 'Content-Type': 'application/octet-stream' } });
      }
    }
    formStatus('Starting the build…', 'loading');
    await api('POST', templatePath(w.template.templateId, `/builds/${encodeURIComponent(w.buildId)}`), body);
  } catch (err) {
    // The template is gone, or the build no longer waits: the next submit makes a new one.
    if (err.status === 404 || err.status === 409) waiting = null;
    throw err;
  }
  waiting = null;
  return w;
}

form.addEventListener('submit', (e) => {
  e.preventDefault();
  const f = form.elements;
  const name = f.name.value.trim();
  const dockerfile = f.dockerfile.value;
  let missing = null;
  if (!name) missing = new FieldError('name', 'enter the template\'s name');
  else if (!dockerfile.trim()) missing = new FieldError('dockerfile', 'enter the Dockerfile to build');
  if (missing) {
    markFields(form, [missing], FIELDS);
    formStatus(`Not built: ${missing.message}`, 'error');
    return;
  }
  busy($('template-build'), async () => {
    let started;
    try {
      started = await build(name, dockerfile, f.context.files[0]);
    } catch (err) {
      markFields(form, err instanceof FieldError ? [err] : err.fields || [], FIELDS);
      formStatus(`Not built: ${explain(err)}`, 'error');
    }
    // A refused start may still have made the template, its build waiting.
    if (shown) loadList();
    if (!started) return;
    markFields(form, [], FIELDS);
    formStatus(`Building ${name}: its log follows.`);
    if (shown) follow(started.template, started.buildId);
  });
});

export const templatesPage = {
  show() {
    shown = true;
    loadList();
  },
  hide() {
    shown = false;
    closeLog();
    formStatus('');
  },
};
