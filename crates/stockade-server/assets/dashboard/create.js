// The create form: image or runtime, resources, environment,
// labels, tags, ports, timeout, persistence, the lifecycle (what the end
// of a session does, an idle timeout, auto-resume), the egress policy
// (all, none, only these destinations, all except these), team and the
// source of /workspace (git, tarball, an uploaded local archive, a snapshot
// or a copy of another sandbox). A loading indicator while it works, the
// API's message in a banner and the status line (with the fields marked)
// when it fails — a bad egress entry, a quota or a full host
// — and the new sandbox opened in its console when it succeeds.

import { api } from './api.js';
import { $, el, parsePairs, parseList, parseNumber, FieldError, markFields, egressControl, showError, clearNotice } from './ui.js';
import { go } from './router.js';
import * as sidebar from './list.js';
import { readySnapshots } from './snapshots.js';

const form = $('create-form');
const status = $('create-status');
/** API field → form input name. */
const FIELDS = {
  name: 'name', dockerImage: 'image', runtime: 'runtime', startCommand: 'startCommand',
  cpuCores: 'cpu', memoryGB: 'memory', diskSizeGB: 'disk', timeoutMinutes: 'timeout',
  environmentVars: 'env', labels: 'labels', tags: 'tags', ports: 'ports', teamId: 'team',
  persistent: 'persistent', archive: 'archive', snapshot: 'snapshot', forkOf: 'forkOf',
  lifecycle: 'onTimeout', 'lifecycle.onTimeout': 'onTimeout', 'lifecycle.autoResume': 'autoResume',
  'lifecycle.idleTimeoutMinutes': 'idleTimeout',
};
const egress = egressControl(form);

/** The field mapping, with the URL of the chosen source. */
function fields() {
  const url = sourceKind() === 'tarball' ? 'tarballUrl' : 'gitUrl';
  return { ...FIELDS, ...egress.fields(), 'source.url': url, source: url };
}

function sourceKind() {
  return form.elements.source.value || 'none';
}

function showSource() {
  const kind = sourceKind();
  for (const box of form.querySelectorAll('[data-source]')) box.hidden = box.getAttribute('data-source') !== kind;
}
for (const radio of form.querySelectorAll('input[name=source]')) radio.addEventListener('change', showSource);

function setStatus(text, kind = '') {
  status.className = `status-line ${kind}`.trim();
  status.textContent = text;
}

function fillSelect(select, options, chosen, empty) {
  select.textContent = '';
  if (!options.length) select.append(el('option', { value: '' }, empty));
  for (const o of options) select.append(el('option', { value: o.value, selected: o.value === chosen }, o.label));
}

/** Shows the form, with a source chosen by the URL (`?snapshot=` or `?sandbox=`). */
export async function showCreate(route) {
  const params = route.params || {};
  const want = params.snapshot ? 'snapshot' : params.sandbox ? 'sandbox' : null;
  if (want) form.elements.source.value = want;
  showSource();
  if (!status.classList.contains('loading')) setStatus('');
  form.elements.name.focus();
  const [teams, snaps] = await Promise.all([
    api('GET', '/api/v1/teams').then((r) => r.teams).catch(() => []),
    readySnapshots().catch(() => []),
  ]);
  fillSelect(form.elements.team, [{ value: '', label: 'none' }, ...teams.map((t) => ({ value: t.id, label: t.name }))], form.elements.team.value, 'none');
  fillSelect(form.elements.snapshot, snaps.map((s) => ({ value: s.id, label: `${s.name} (${s.id})` })), params.snapshot || form.elements.snapshot.value, 'no snapshots');
  const live = sidebar.list.filter === 'active' ? sidebar.list.sandboxes : [];
  const sandboxes = live.filter((s) => s.status === 'RUNNING' || s.status === 'STOPPED');
  fillSelect(form.elements.forkOf, sandboxes.map((s) => ({ value: s.id, label: `${s.name} (${s.id})` })), params.sandbox || form.elements.forkOf.value, 'no sandboxes to copy');
}

/** The request body from the form; throws FieldError naming a bad field. */
function requestBody() {
  const f = form.elements;
  const body = {};
  const text = (name) => f[name].value.trim();
  if (text('name')) body.name = text('name');
  if (text('image') && text('runtime')) throw new FieldError('image', 'give an image or a runtime preset, not both');
  if (text('image')) body.dockerImage = text('image');
  if (text('runtime')) body.runtime = text('runtime');
  if (text('startCommand')) body.startCommand = text('startCommand');
  const cpu = parseNumber(f.cpu.value, 'cpuCores', { min: 0.01 });
  if (cpu !== undefined) body.cpuCores = cpu;
  const mem = parseNumber(f.memory.value, 'memoryGB', { min: 0.01 });
  if (mem !== undefined) body.memoryGB = mem;
  const disk = parseNumber(f.disk.value, 'diskSizeGB', { min: 1 });
  if (disk !== undefined) body.diskSizeGB = disk;
  const timeout = parseNumber(f.timeout.value, 'timeoutMinutes', { min: 0 });
  if (timeout !== undefined) body.timeoutMinutes = timeout;
  if (f.team.value) body.teamId = f.team.value;
  if (!f.persistent.checked) body.persistent = false;
  // Sent only when something differs from the server's defaults.
  const lifecycle = {};
  if (f.onTimeout.value) lifecycle.onTimeout = f.onTimeout.value;
  if (f.autoResume.checked) lifecycle.autoResume = true;
  const idle = parseNumber(f.idleTimeout.value, 'lifecycle.idleTimeoutMinutes', { min: 0 });
  if (idle !== undefined) lifecycle.idleTimeoutMinutes = idle;
  if (Object.keys(lifecycle).length) body.lifecycle = lifecycle;
  body.networkPolicy = egress.read();
  const env = parsePairs(f.env.value, 'environmentVars', { keyPattern: /^[A-Za-z_][A-Za-z0-9_]*$/ });
  if (Object.keys(env).length) body.environmentVars = env;
  const labels = parseList(f.labels.value);
  if (labels.length) body.labels = labels;
  const tags = parsePairs(f.tags.value, 'tags', { max: 5 });
  if (Object.keys(tags).length) body.tags = tags;
  const ports = parseList(f.ports.value).map((p) => parseNumber(p, 'ports', { min: 1, max: 65535, integer: true }));
  if (ports.length > 4) throw new FieldError('ports', `at most 4 (got ${ports.length})`);
  if (ports.length) body.ports = ports;
  switch (sourceKind()) {
    case 'git':
      if (!text('gitUrl')) throw new FieldError('source.url', 'enter the repository URL');
      body.source = { type: 'git', url: text('gitUrl') };
      if (text('gitRef')) body.source.ref = text('gitRef');
      break;
    case 'tarball':
      if (!text('tarballUrl')) throw new FieldError('source.url', 'enter the archive URL');
      body.source = { type: 'tarball', url: text('tarballUrl') };
      break;
    case 'upload':
      if (!f.archive.files.length) throw new FieldError('archive', 'choose a tar or tar.gz archive to upload');
      body.source = { type: 'upload' };
      break;
    case 'snapshot':
      if (!f.snapshot.value) throw new FieldError('snapshot', 'choose a snapshot (take one from a sandbox first)');
      body.source = { type: 'snapshot', snapshotId: f.snapshot.value };
      break;
    case 'sandbox':
      if (!f.forkOf.value) throw new FieldError('forkOf', 'choose a sandbox to copy');
      body.source = { type: 'sandbox', sandboxId: f.forkOf.value };
      break;
    default:
      break;
  }
  return body;
}

form.addEventListener('submit', async (e) => {
  e.preventDefault();
  const submit = $('create-submit');
  if (submit.disabled) return;
  let body;
  try {
    body = requestBody();
  } catch (err) {
    if (!(err instanceof FieldError)) throw err;
    markFields(form, [err], fields());
    setStatus(`Could not create the sandbox: ${err.message}`, 'error');
    return;
  }
  markFields(form, [], fields());
  clearNotice();
  submit.disabled = true;
  try {
    if (body.source && body.source.type === 'upload') {
      const file = form.elements.archive.files[0];
      setStatus(`Uploading ${file.name}…`, 'loading');
      const type = /\.(tgz|gz)$/i.test(file.name) ? 'application/gzip' : 'application/x-tar';
      const up = await api('POST', '/api/v1/uploads', file, { raw: true, headers: { 'Content-Type': type } });
      body.source.uploadId = up.uploadId;
    }
    setStatus(body.source ? 'Creating sandbox and filling /workspace…' : 'Creating sandbox…', 'loading');
    const sb = await api('POST', '/api/v1/sandbox', body);
    setStatus(`Created ${sb.name}.`);
    form.reset();
    showSource();
    egress.show();
    await sidebar.refresh();
    go({ page: 'sandbox', id: sb.id, tab: null });
  } catch (err) {
    markFields(form, err.fields || [], fields());
    setStatus(`Could not create the sandbox: ${err.message}`, 'error');
    showError('Could not create the sandbox', err);
  } finally {
    submit.disabled = false;
  }
});
