// What the two file browsers (a sandbox's files, a shared volume's files)
// have in common: path arithmetic, the table of a folder's entries with its
// row actions, the upload picker and drops, and the dialogs of new folder,
// rename and delete. Each browser brings its own requests.

import { el, notice, showError, bytes, when, ask } from './ui.js';

// ---------- paths ----------

export function parentOf(p) {
  if (p === '/') return '/';
  return p.slice(0, p.lastIndexOf('/')) || '/';
}
export function nameOf(p) { return p === '/' ? '/' : p.slice(p.lastIndexOf('/') + 1); }
export function join(dir, name) { return dir === '/' ? `/${name}` : `${dir}/${name}`; }
export function within(p, dir) { return dir === '/' || p === dir || p.startsWith(`${dir}/`); }

/** Absolute and tidy; empty is `base`, and relative paths are below it. */
export function normalise(input, base = '/') {
  let p = String(input || '').trim();
  if (!p) return base;
  if (!p.startsWith('/')) p = join(base, p);
  const parts = [];
  for (const part of p.split('/')) {
    if (!part || part === '.') continue;
    parts.push(part);
  }
  return `/${parts.join('/')}`;
}

// ---------- the table of a folder ----------

/**
 * The Download link and Rename and Delete buttons of one entry. `href`
 * and `download` make the link (left out without `href`); `guarded`
 * leaves out Rename and Delete.
 */
export function entryActions({ name, href, download, guarded, onRename, onDelete }) {
  return el('span', { class: 'row-actions' },
    href ? el('a', { class: 'button small', href, download, 'aria-label': `Download ${name}` }, 'Download') : null,
    guarded ? null : el('button', { class: 'small', type: 'button', 'aria-label': `Rename ${name}`, onclick: onRename }, 'Rename'),
    guarded ? null : el('button', { class: 'small danger', type: 'button', 'aria-label': `Delete ${name}`, onclick: onDelete }, 'Delete'));
}

/**
 * A folder's entries (`{name, path, type, size, modifiedAt, mode,
 * linkTarget}`) as a table: the name a link to `href(entry)` (plain text
 * where that answers null), folders ending in `/` and symlinks showing
 * where they point; size, time, mode, and `actions(entry, isDir)`.
 */
export function entriesTable(entries, { id, href, isDir, actions }) {
  const rows = entries.map((e) => {
    const dir = isDir(e);
    const target = href(e);
    const label = e.name + (dir ? '/' : '');
    return el('tr', { 'data-path': e.path, 'data-dir': dir ? e.path : null, 'data-type': e.type },
      el('td', {}, target ? el('a', { href: target, class: 'entry-link' }, label) : el('span', { class: 'entry-name' }, label),
        e.linkTarget ? el('span', { class: 'muted small' }, ` → ${e.linkTarget}`) : null),
      el('td', { class: 'num' }, dir ? '' : bytes(e.size)),
      el('td', { class: 'muted small' }, e.modifiedAt ? when(e.modifiedAt) : ''),
      el('td', { class: 'muted small mono' }, e.mode),
      el('td', {}, actions(e, dir)));
  });
  return el('div', { class: 'table-wrap' }, el('table', { class: 'entries', id },
    el('thead', {}, el('tr', {}, ['Name', 'Size', 'Modified', 'Mode', ''].map((h) => el('th', { scope: 'col' }, h)))),
    el('tbody', {}, rows)));
}

// ---------- upload ----------

/**
 * The "Upload files" button: a label for a hidden file input with id
 * `id`, opened by Enter and Space too; `onFiles` gets `{file, rel}` items.
 */
export function uploadPicker(id, onFiles) {
  const picker = el('input', { type: 'file', multiple: true, id, class: 'sr-only', onchange: (e) => {
    const chosen = [...e.target.files].map((file) => ({ file, rel: file.name }));
    e.target.value = '';
    onFiles(chosen);
  } });
  const button = el('label', { class: 'button', for: id, tabindex: '0', id: `${id}-button`,
    onkeydown: (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); picker.click(); } } }, 'Upload files');
  return [button, picker];
}

/**
 * Uploads `{file, rel}` items below `dir` one after the other with
 * `write(path, file)`, saying how far it got. Answers the folders written
 * to, also when one upload failed (its reason is shown, the rest skipped).
 */
export async function uploadAll(dir, items, write) {
  let done = 0;
  const touched = new Set([dir]);
  for (const { file, rel } of items) {
    const path = normalise(join(dir, rel));
    notice(`Uploading ${done + 1} of ${items.length}: ${path}…`);
    try {
      await write(path, file);
    } catch (e) {
      showError(`Could not upload ${path}`, e);
      return touched;
    }
    done++;
    touched.add(parentOf(path));
  }
  notice(`Uploaded ${done} ${done === 1 ? 'file' : 'files'} to ${dir}.`);
  return touched;
}

/** The files of a drop, folders walked (where the browser allows it). */
export async function dropped(dt) {
  const entries = [...(dt.items || [])].map((i) => (i.webkitGetAsEntry ? i.webkitGetAsEntry() : null));
  if (!entries.length || entries.some((e) => !e)) return [...dt.files].map((file) => ({ file, rel: file.name }));
  const out = [];
  const walk = async (entry, prefix) => {
    if (entry.isFile) {
      const file = await new Promise((res, rej) => entry.file(res, rej));
      out.push({ file, rel: prefix + entry.name });
    } else if (entry.isDirectory) {
      const reader = entry.createReader();
      for (;;) {
        const batch = await new Promise((res, rej) => reader.readEntries(res, rej));
        if (!batch.length) break;
        for (const child of batch) await walk(child, `${prefix}${entry.name}/`);
      }
    }
  };
  for (const e of entries) await walk(e, '');
  return out;
}

/**
 * Makes `box` take files dropped on it: while `active()` holds, a drop is
 * handed to `onDrop(dir, items)` with the folder it landed on (the nearest
 * `[data-dir]`), or `fallbackDir()`.
 */
export function dropTarget(box, { active, fallbackDir, onDrop }) {
  box.addEventListener('dragover', (e) => {
    if (!active() || ![...(e.dataTransfer.types || [])].includes('Files')) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = 'copy';
    box.classList.add('dragover');
  });
  box.addEventListener('dragleave', (e) => { if (!box.contains(e.relatedTarget)) box.classList.remove('dragover'); });
  box.addEventListener('drop', async (e) => {
    box.classList.remove('dragover');
    if (!active()) return;
    e.preventDefault();
    const target = e.target.closest && e.target.closest('[data-dir]');
    const dir = target ? target.getAttribute('data-dir') : fallbackDir();
    onDrop(dir, await dropped(e.dataTransfer));
  });
}

// ---------- dialogs ----------

/** Asks for a new folder in `dir`; answers its path (relative names below `base`), or null. */
export async function askFolder(dir, base) {
  const name = await ask({ title: `New folder in ${dir}`, label: 'Folder name', confirm: 'Create folder' });
  if (!name) return null;
  return name.startsWith('/') ? normalise(name, base) : normalise(join(dir, name), base);
}

/**
 * Asks where `path` goes: a new name in its folder, or a path (absolute,
 * or below `base` when it has a slash). Answers it, or null when cancelled
 * or unchanged.
 */
export async function askRename(path, base) {
  const answer = await ask({ title: `Rename ${path}`, text: `A new name, or a new path (absolute, or relative to ${base} when it has a slash).`, label: 'New name', value: nameOf(path), confirm: 'Rename' });
  if (!answer) return null;
  const to = answer.includes('/') ? normalise(answer, base) : join(parentOf(path), answer);
  return to === path ? null : to;
}

/** Asks to confirm deleting `path` (a folder with what is in it when `dir`) from `where`. */
export async function askDelete(path, dir, where) {
  const ok = await ask({
    title: `Delete ${path}?`,
    text: dir ? `The folder and everything in it are deleted from ${where}.` : `The file is deleted from ${where}.`,
    label: null, confirm: 'Delete', danger: true,
  });
  return ok !== null;
}

/** Runs a change; its failure is shown as `failure: <reason>`. Answers whether it worked. */
export async function attempt(failure, fn) {
  try {
    await fn();
    return true;
  } catch (e) {
    showError(failure, e);
    return false;
  }
}
