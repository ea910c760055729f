// The create form: image, runtime preset or one of the account's
// templates, resources, environment, labels, tags, ports, timeout,
// persistence, the lifecycle (what the end of a session does, an idle
// timeout, auto-resume), the egress policy (all, none, only these
// destinations, all except these), team, the
// account's shared volumes to mount (each at a path, optionally read-only)
// and the source of /workspace (git, tarball, an uploaded local archive, a snapshot
// or a copy of another sandbox). A loading indicator while it works, the
// API's message in a banner and the status line (with the fields marked)
// when it fails — a bad egress entry, a quota or a full host
// — and the new sandbox opened in its console when it succeeds.

import { api } from './api.js';
import { $, el, parsePairs, parseList, parseNumber, FieldError, markFields, egressControl, showError, clearNotice } from './ui.js';
import { go } from './router.js';
import * as sidebar from './list.js';
import { readySnapshots } from './snapshots.js';
import { readyTemplates } from './templates.js';
import { sharedVolumes } from './sharedvolumes.js';

const form = $('create-form');
const status = $('create-status');
/** API field → form input name. */
const FIELDS = {
  name: 'name', dockerImage: 'image', runtime: 'runtime', template: 'template', startCommand: 'startCommand',
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

// ---------- shared volumes to mount ----------

const mountRows = $('mount-rows');
/** The account's shared volumes as last loaded; null where the server has none to offer. */
let volumeChoices = [];
/** A mount row's inputs by the part of `volumeMounts[i]` they fill. */
const MOUNT_INPUTS = { volume: 'mountVolume', path: 'mountPath', readOnly: 'mountReadOnly' };

function fillVolumes(select, chosen) {
  fillSelect(select, (volumeChoices || []).map((v) => ({ value: v.name, label: v.sizeGB ? `${v.name} (${v.sizeGB} GB)` : v.name })),
    chosen, 'no shared volumes');
}

function showMountHint() {
  $('create-mounts').hidden = volumeChoices === null;
  const none = !volumeChoices || !volumeChoices.length;
  $('mount-add').disabled = none;
  $('mount-hint').textContent = none ? 'This account has no shared volumes yet: create one on the Shared volumes page.' : '';
}

/** Adds a row for one mount: which volume, where, read-only or not. */
function addMount(volume) {
  const select = el('select', { name: 'mountVolume' });
  const row = el('div', { class: 'row wrap', 'data-mount': '' },
    el('label', {}, 'Volume ', select),
    el('label', { class: 'grow' }, 'Mount path ', el('input', { name: 'mountPath', placeholder: '/data', autocomplete: 'off', spellcheck: 'false' })),
    el('label', { class: 'check' }, el('input', { type: 'checkbox', name: 'mountReadOnly' }), ' read-only'),
    el('button', { type: 'button', class: 'small', 'aria-label': 'Remove this mount', onclick: () => row.remove() }, 'Remove'));
  mountRows.append(row);
  fillVolumes(select, volume);
  return row;
}

$('mount-add').addEventListener('click', () => addMount().querySelector('select').focus());

/** The mounts of the form, as `volumeMounts` takes them; throws FieldError. */
function mountsOf() {
  return [...mountRows.querySelectorAll('[data-mount]')].map((row, i) => {
    const input = (part) => row.querySelector(`[name=${MOUNT_INPUTS[part]}]`);
    const volume = input('volume').value;
    const path = input('path').value.trim();
    if (!volume) throw new FieldError(`volumeMounts[${i}].volume`, 'choose a shared volume');
    if (!path) throw new FieldError(`volumeMounts[${i}].path`, 'enter the absolute path to mount it at, e.g. /data');
    return input('readOnly').checked ? { volume, path, readOnly: true } : { volume, path };
  });
}

/** Marks the inputs named by field errors, those of `volumeMounts[i]` in its row. */
function mark(errors) {
  markFields(form, errors, fields());
  const rows = mountRows.querySelectorAll('[data-mount]');
  for (const f of errors) {
    const m = /^volumeMounts\[(\d+)\]\.(volume|path|readOnly)/.exec(String(f.field || f));
    const input = m && rows[Number(m[1])] && rows[Number(m[1])].querySelector(`[name=${MOUNT_INPUTS[m[2]]}]`);
    if (input) input.setAttribute('aria-invalid', 'true');
  }
}

function setStatus(text, kind = '') {
  status.className = `status-line ${kind}`.trim();
  status.textContent = text;
}

function fillSelect(select, options, chosen, empty) {
  select.textContent = '';
  if (!options.length) select.append(el('option', { value: '' }, empty));
  for (const o of options) select.append(el('option', { value: o.value, selected: o.value === chosen }, o.label));
}

/**
 * Shows the form, with a source chosen by the URL (`?snapshot=` or
 * `?sandbox=`), a mount of the shared volume `?volume=` names (by
 * name or id), and the template `?template=` names.
 */
export async function showCreate(route) {
  const params = route.params || {};
  const want = params.snapshot ? 'snapshot' : params.sandbox ? 'sandbox' : null;
  if (want) form.elements.source.value = want;
  showSource();
  if (!status.classList.contains('loading')) setStatus('');
  form.elements.name.focus();
  const [teams, snaps, vols, templates] = await Promise.all([
    api('GET', '/api/v1/teams').then((r) => r.teams).catch(() => []),
    readySnapshots().catch(() => []),
    sharedVolumes().catch(() => null),
    readyTemplates().catch(() => []),
  ]);
  volumeChoices = vols;
  const volumeSelects = [...mountRows.querySelectorAll('[name=mountVolume]')];
  for (const select of volumeSelects) fillVolumes(select, select.value);
  const wanted = params.volume && vols && vols.find((v) => v.name === params.volume || v.id === params.volume);
  if (wanted && !volumeSelects.some((s) => s.value === wanted.name)) addMount(wanted.name);
  showMountHint();
  fillSelect(form.elements.team, [{ value: '', label: 'none' }, ...teams.map((t) => ({ value: t.id, label: t.name }))], form.elements.team.value, 'none');
  fillSelect(form.elements.template, [{ value: '', label: 'none' }, ...templates.map((t) => ({ value: t, label: t }))], params.template || form.elements.template.value, 'none');
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
  if (f.template.value) {
    // A template brings its own image and files.
    if (text('image') || text('runtime')) throw new FieldError('template', 'give an image, a runtime preset or a template, not more than one');
    if (sourceKind() !== 'none') throw new FieldError('template', 'a template brings its own files: leave /workspace empty');
    body.template = f.template.value;
  }
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
  const mounts = mountsOf();
  if (mounts.length) body.volumeMounts = mounts;
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
    mark([err]);
    setStatus(`Could not create the sandbox: ${err.message}`, 'error');
    return;
  }
  mark([]);
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
    mountRows.textContent = '';
    showSource();
    egress.show();
    await sidebar.refresh();
    go({ page: 'sandbox', id: sb.id, tab: null });
  } catch (err) {
    mark(err.fields || []);
    setStatus(`Could not create the sandbox: ${err.message}`, 'error');
    showError('Could not create the sandbox', err);
  } finally {
    submit.disabled = false;
  }
});
