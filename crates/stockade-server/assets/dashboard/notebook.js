// The console's third mode: a notebook. Cells of Python, JavaScript or
// Bash run in code contexts (Jupyter kernels in the sandbox) that the
// notebook makes itself, one per language, on the first run of a cell in
// that language (`POST …/code/contexts`). Their ids are in the URL
// (`#/sandbox/ID/notebook?python=…&bash=…`), so a reload or a new tab runs
// the next cell in the same kernels, with their variables.
//
// A cell runs with `POST …/code` and `Accept: text/event-stream`; its
// outputs are shown as they arrive: stdout and stderr as text, results in
// their richest safe form (HTML and SVG sanitised by DOMPurify, Markdown
// rendered by marked and sanitised, PNG and JPEG as data URLs, JSON
// pretty-printed), an error with its traceback; ANSI colours (tracebacks,
// Deno's values) become styles. Stop aborts the request,
// which interrupts the cell in the kernel. Cells run one at a time, in the
// order they were asked for. Each sandbox keeps its notebook while the page
// lives; the cells' code also survives a reload of the tab.

import DOMPurify from './purify.mjs';
import { marked } from './marked.mjs';
import { api, sse, sandboxPath, routeMissing } from './api.js';
import { $, el, showError, explain, ask, mayTakeFocus, usable } from './ui.js';
import { go, here } from './router.js';

export const LANGUAGES = [['python', 'Python'], ['javascript', 'JavaScript'], ['bash', 'Bash']];
const LANGUAGE_IDS = LANGUAGES.map(([id]) => id);
/** What a context id from the URL may look like (the server makes UUIDs). */
const CONTEXT_ID = /^[A-Za-z0-9-]{1,64}$/;
const STORE_PREFIX = 'stockade.notebook.';

/** sandbox id → notebook */
const notebooks = new Map();
/** The view the notebook pane shows; null while another mode is shown. */
let current = null;

// ---------- sanitising rich output ----------

/** URLs an output may link to; anything else (javascript:, this server's API…) is dropped. */
const LINK = /^(?:https?:|mailto:|#)/i;
/** The only images an output may show: inline data, never a request anywhere. */
const DATA_IMAGE = /^data:image\/(?:png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]*$/i;

DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  for (const name of ['href', 'xlink:href']) {
    const v = node.getAttribute(name);
    if (v !== null && !(node.tagName.toLowerCase() === 'a' ? LINK : /^#/).test(v.trim())) node.removeAttribute(name);
  }
  const src = node.getAttribute('src');
  if (src !== null && !DATA_IMAGE.test(src.trim())) node.removeAttribute('src');
  if (node.tagName.toLowerCase() === 'a' && node.hasAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

/**
 * Markup from a kernel, made safe to show: no scripts, no event handlers,
 * no `<style>` that would restyle the dashboard, no requests. The output box
 * contains the result's paint, so inline styles cannot cover the page.
 */
function sanitised(markup) {
  const box = el('div', { class: 'rich' });
  box.append(DOMPurify.sanitize(String(markup), {
    RETURN_DOM_FRAGMENT: true,
    FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'object', 'embed', 'link', 'meta', 'base'],
    FORBID_ATTR: ['srcset', 'poster', 'action', 'formaction'],
  }));
  return box;
}

function dataImage(mime, b64) {
  const clean = String(b64).replace(/\s+/g, '');
  const url = `data:${mime};base64,${clean}`;
  if (!DATA_IMAGE.test(url)) return el('pre', { class: 'stream stderr' }, `[an ${mime} result that is not base64 was not shown]`);
  return el('img', { class: 'out-image', src: url, alt: `${mime.split('/')[1].toUpperCase()} result` });
}

/** The element for one result, in the richest form it has that is safe to show. */
function renderResult(r) {
  let body;
  let kind;
  if (typeof r.html === 'string') { kind = 'html'; body = sanitised(r.html); }
  else if (typeof r.svg === 'string') { kind = 'svg'; body = sanitised(r.svg); }
  else if (typeof r.png === 'string') { kind = 'png'; body = dataImage('image/png', r.png); }
  else if (typeof r.jpeg === 'string') { kind = 'jpeg'; body = dataImage('image/jpeg', r.jpeg); }
  else if (typeof r.markdown === 'string') { kind = 'markdown'; body = sanitised(marked.parse(r.markdown, { async: false })); }
  else if (r.json !== undefined && r.json !== null) { kind = 'json'; body = el('pre', { class: 'text' }, JSON.stringify(r.json, null, 2)); }
  else if (typeof r.latex === 'string') { kind = 'latex'; body = el('pre', { class: 'text' }, r.latex); }
  else if (typeof r.text === 'string') { kind = 'text'; body = el('pre', { class: 'text' }, ansiNodes(r.text)); }
  else {
    const kinds = Object.keys(r).filter((k) => k !== 'isMainResult');
    kind = 'other';
    body = el('pre', { class: 'text muted' }, `[a result with no form to show${kinds.length ? `: ${kinds.join(', ')}` : ''}]`);
  }
  return el('div', { class: `result${r.isMainResult ? ' main' : ''}`, 'data-kind': kind }, body);
}

// ---------- ANSI colours of tracebacks ----------

const ANSI_COLOURS = ['black', 'red', 'green', 'yellow', 'blue', 'magenta', 'cyan', 'white'];

/**
 * Text with ANSI escape sequences as nodes: SGR colours and bold become
 * classes of spans, every other sequence is dropped. Only text nodes are
 * made, so nothing in the text is ever markup.
 */
export function ansiNodes(text) {
  const out = [];
  let style = { fg: null, bold: false };
  // CSI sequences (colours, cursor moves) and OSC titles.
  const re = /\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b./g;
  let last = 0;
  const push = (s) => {
    if (!s) return;
    const cls = [style.fg ? `ansi-${style.fg}` : '', style.bold ? 'ansi-bold' : ''].filter(Boolean).join(' ');
    out.push(cls ? el('span', { class: cls }, s) : document.createTextNode(s));
  };
  for (let m = re.exec(text); m; m = re.exec(text)) {
    push(text.slice(last, m.index));
    last = re.lastIndex;
    if (m[2] !== 'm') continue;
    const codes = (m[1] || '0').split(';').map((c) => Number(c || 0));
    for (let i = 0; i < codes.length; i++) {
      const c = codes[i];
      if (c === 0) style = { fg: null, bold: false };
      else if (c === 1) style = { ...style, bold: true };
      else if (c === 22) style = { ...style, bold: false };
      else if (c >= 30 && c <= 37) style = { ...style, fg: ANSI_COLOURS[c - 30] };
      else if (c >= 90 && c <= 97) style = { ...style, fg: `bright-${ANSI_COLOURS[c - 90]}` };
      else if (c === 39) style = { ...style, fg: null };
      else if (c === 38 || c === 48) i += codes[i + 1] === 5 ? 2 : 4; // 256-colour and RGB: skipped
    }
  }
  push(text.slice(last));
  return out;
}

// ---------- a notebook and its cells ----------

function storeKey(id) { return `${STORE_PREFIX}${id}`; }

function newNotebook(id) {
  const nb = { id, cells: [], contexts: {}, queue: Promise.resolve(), list: el('div', { class: 'cells', 'data-sandbox': id }), seq: 0 };
  let saved = [];
  try { saved = JSON.parse(sessionStorage.getItem(storeKey(id)) || '[]'); } catch (_) { saved = []; }
  if (!Array.isArray(saved) || !saved.length) saved = [{ language: 'python', code: '' }];
  for (const c of saved) addCell(nb, { language: c && c.language, code: c && c.code });
  notebooks.set(id, nb);
  return nb;
}

function notebookOf(id) {
  return notebooks.get(id) || newNotebook(id);
}

/** Keeps the cells' code and languages for a reload of this tab. */
function save(nb) {
  try {
    sessionStorage.setItem(storeKey(nb.id), JSON.stringify(nb.cells.map((c) => ({ language: c.lang.value, code: c.code.value }))));
  } catch (_) { /* storage full or off: the notebook lives while the page does */ }
}

/** Cells reach the sandbox: it runs, or it is paused and resumes on use. */
function running() {
  return Boolean(current && usable(current.sb));
}

function fitHeight(textarea) {
  textarea.rows = Math.min(30, Math.max(2, textarea.value.split('\n').length));
}

function setCount(cell, text) {
  cell.count.textContent = `[${text}]`;
}

function setState(cell, state) {
  cell.state = state;
  cell.el.dataset.state = state;
  const active = state === 'running' || state === 'queued';
  cell.run.hidden = active;
  cell.stop.hidden = !active;
  cell.status.textContent = { running: 'running…', queued: 'waiting for the cell before it…' }[state] || '';
  if (active) setCount(cell, '*');
  enableButtons();
}

/** A new cell after `after` (or at the end); answers it. */
function addCell(nb, { language, code = '', after = null } = {}) {
  const n = ++nb.seq;
  const lang = el('select', { class: 'cell-lang', 'aria-label': `Language of cell ${n}` },
    LANGUAGES.map(([id, name]) => el('option', { value: id }, name)));
  lang.value = LANGUAGE_IDS.includes(language) ? language : 'python';
  const textarea = el('textarea', {
    class: 'cell-code', spellcheck: 'false', autocomplete: 'off', autocapitalize: 'off', rows: '2',
    'aria-label': `Code of cell ${n}`, placeholder: 'Code; Shift+Enter runs it',
  });
  textarea.value = String(code || '');
  fitHeight(textarea);
  const cell = {
    nb, n, lang, code: textarea, state: 'idle', abort: null, cancelled: false,
    count: el('span', { class: 'cell-count', 'aria-label': 'Execution count' }, '[ ]'),
    run: el('button', { type: 'button', class: 'cell-run small primary' }, 'Run'),
    stop: el('button', { type: 'button', class: 'cell-stop small danger', hidden: true }, 'Stop'),
    remove: el('button', { type: 'button', class: 'cell-delete small', 'aria-label': `Delete cell ${n}` }, 'Delete'),
    status: el('span', { class: 'cell-status muted small', role: 'status' }),
    out: el('div', { class: 'cell-out', 'aria-live': 'polite' }),
  };
  cell.el = el('section', { class: 'cell', 'data-cell': String(n), 'data-state': 'idle', 'aria-label': `Cell ${n}` },
    el('div', { class: 'cell-head' }, cell.count, lang, cell.run, cell.stop, cell.status, el('span', { class: 'spacer' }), cell.remove),
    textarea, cell.out);
  cell.run.addEventListener('click', () => enqueue(cell));
  cell.stop.addEventListener('click', () => stopCell(cell));
  cell.remove.addEventListener('click', () => removeCell(cell));
  lang.addEventListener('change', () => save(nb));
  textarea.addEventListener('input', () => { fitHeight(textarea); save(nb); });
  textarea.addEventListener('keydown', (e) => {
    if (e.key !== 'Enter' || !(e.shiftKey || e.ctrlKey || e.metaKey)) return;
    e.preventDefault();
    if (!running()) return;
    enqueue(cell);
    // Shift+Enter moves on to the next cell, as in Jupyter; Ctrl+Enter stays.
    if (e.shiftKey) {
      const i = nb.cells.indexOf(cell);
      const next = nb.cells[i + 1] || addCell(nb, { language: cell.lang.value, after: cell });
      next.code.focus();
    }
  });
  const at = after ? nb.cells.indexOf(after) + 1 : nb.cells.length;
  nb.cells.splice(at, 0, cell);
  if (after) after.el.after(cell.el); else nb.list.append(cell.el);
  save(nb);
  enableButtons();
  return cell;
}

function removeCell(cell) {
  const { nb } = cell;
  stopCell(cell);
  nb.cells.splice(nb.cells.indexOf(cell), 1);
  cell.el.remove();
  if (!nb.cells.length) addCell(nb);
  save(nb);
}

function stopCell(cell) {
  if (cell.state === 'queued') {
    cell.cancelled = true;
    setState(cell, 'idle');
    setCount(cell, ' ');
  } else if (cell.state === 'running' && cell.abort) {
    cell.abort.abort();
  }
}

/** Runs `cell` after every cell asked for before it; answers whether it ran without an error. */
function enqueue(cell) {
  if (cell.state === 'running' || cell.state === 'queued') return Promise.resolve(false);
  const { nb } = cell;
  cell.cancelled = false;
  setState(cell, 'queued');
  const done = nb.queue.then(() => (cell.cancelled ? false : runCell(cell)));
  nb.queue = done.catch(() => false);
  return done;
}

// ---------- running a cell ----------

/** The notebook's context for `language`, made in the sandbox on first use. */
async function contextFor(nb, language) {
  if (nb.contexts[language]) return nb.contexts[language];
  const made = await api('POST', sandboxPath(nb.id, '/code/contexts'), { language });
  if (!made || typeof made.id !== 'string') throw new Error('the server made a context but did not say its id');
  nb.contexts[language] = made.id;
  syncUrl(nb);
  return made.id;
}

/** True for the API's answer to a context the sandbox no longer has (its kernels went with a restart). */
function contextGone(e) {
  if (!e || e.status !== 404 || routeMissing(e)) return false;
  return (e.fields || []).some((f) => String(f.field || f) === 'contextId') || /context/i.test(e.message);
}

function appendStream(cell, name, text) {
  const last = cell.out.lastElementChild;
  if (last && last.classList.contains('stream') && last.classList.contains(name)) last.append(...ansiNodes(text));
  else cell.out.append(el('pre', { class: `stream ${name}` }, ansiNodes(text)));
}

function renderError(cell, err) {
  const name = String(err.name || 'Error');
  const value = String(err.value || '');
  const box = el('div', { class: 'cell-error', 'data-error': name },
    el('div', { class: 'error-head' }, el('strong', {}, name), value ? `: ${value}` : ''));
  if (err.traceback) box.append(el('pre', { class: 'traceback' }, ansiNodes(String(err.traceback))));
  cell.out.append(box);
}

function parse(data) {
  try { return JSON.parse(data); } catch (_) { return {}; }
}

async function runCell(cell) {
  const { nb } = cell;
  const v = current && current.id === nb.id ? current : null;
  const language = cell.lang.value;
  cell.out.textContent = '';
  const ctl = new AbortController();
  cell.abort = ctl;
  setState(cell, 'running');
  let ok = false;
  let ended = false;
  try {
    for (let attempt = 0; ; attempt++) {
      const contextId = await contextFor(nb, language);
      try {
        await sse(sandboxPath(nb.id, '/code'), {
          method: 'POST',
          signal: ctl.signal,
          body: { code: cell.code.value, contextId },
          onEvent: ({ event, data }) => {
            const d = parse(data);
            if (event === 'executionCount' && Number.isInteger(d.executionCount)) setCount(cell, d.executionCount);
            else if (event === 'stdout' || event === 'stderr') appendStream(cell, event, typeof d.text === 'string' ? d.text : data);
            else if (event === 'result') cell.out.append(renderResult(d));
            else if (event === 'error') renderError(cell, d);
            else if (event === 'end') {
              ended = true;
              if (d.unexpected) cell.status.textContent = 'the kernel stopped in the middle of this cell';
            }
          },
        });
        break;
      } catch (e) {
        // The kernel this notebook made is gone (the sandbox restarted, or
        // someone deleted it): make a new one and run the cell there.
        if (attempt === 0 && contextGone(e)) {
          delete nb.contexts[language];
          syncUrl(nb);
          appendStream(cell, 'stderr', 'The notebook\'s earlier kernel is gone; this cell runs in a new one.\n');
          continue;
        }
        throw e;
      }
    }
    ok = ended && !cell.out.querySelector('.cell-error');
    if (!ended) appendStream(cell, 'stderr', '[the stream ended before the cell did]\n');
  } catch (e) {
    if (e.name === 'AbortError') {
      appendStream(cell, 'stderr', '[stopped: the cell was interrupted]\n');
    } else {
      cell.out.append(el('div', { class: 'cell-error api-error', role: 'alert' }, `Could not run the cell: ${explain(e)}`));
      showError('Could not run the cell', e);
      if ((e.status === 409 || e.status === 404) && v && v.alive()) v.refresh();
    }
  } finally {
    cell.abort = null;
    const shown = cell.count.textContent;
    setState(cell, 'idle');
    cell.count.textContent = shown === '[*]' ? '[ ]' : shown;
  }
  return ok;
}

// ---------- the toolbar ----------

async function runAll() {
  const nb = current && notebooks.get(current.id);
  if (!nb || !running()) return;
  for (const cell of [...nb.cells]) {
    if (!nb.cells.includes(cell)) continue;
    // Stops at the first cell that fails or is stopped, as Jupyter does.
    if (!(await enqueue(cell))) break;
  }
}

async function restart() {
  const nb = current && notebooks.get(current.id);
  if (!nb) return;
  const langs = Object.keys(nb.contexts);
  if (!langs.length) {
    $('notebook-status').textContent = 'No kernel to restart yet: the first cell run starts one.';
    return;
  }
  const sure = await ask({
    title: 'Restart the kernels?',
    text: 'Every variable and import of this notebook is lost; the cells stay.',
    label: null, confirm: 'Restart', danger: true,
  });
  if (sure === null || notebooks.get(nb.id) !== nb) return;
  for (const cell of nb.cells) stopCell(cell);
  const button = $('notebook-restart');
  button.disabled = true;
  $('notebook-status').textContent = 'Restarting…';
  try {
    for (const lang of langs) {
      const id = nb.contexts[lang];
      try {
        await api('POST', sandboxPath(nb.id, `/code/contexts/${encodeURIComponent(id)}/restart`), undefined);
      } catch (e) {
        if (!contextGone(e)) throw e;
        // Nothing left to restart: the next run makes a new kernel.
        delete nb.contexts[lang];
        syncUrl(nb);
      }
    }
    for (const cell of nb.cells) setCount(cell, ' ');
    $('notebook-status').textContent = 'Restarted: the kernels start afresh.';
  } catch (e) {
    $('notebook-status').textContent = '';
    showError('Could not restart the kernel', e);
  } finally {
    enableButtons();
  }
}

function clearOutputs() {
  const nb = current && notebooks.get(current.id);
  if (!nb) return;
  for (const cell of nb.cells) {
    if (cell.state !== 'idle') continue;
    cell.out.textContent = '';
    cell.status.textContent = '';
    setCount(cell, ' ');
  }
}

function enableButtons() {
  const live = running();
  for (const cell of current ? (notebooks.get(current.id) || { cells: [] }).cells : []) cell.run.disabled = !live;
  $('notebook-run-all').disabled = !live;
  $('notebook-restart').disabled = !live;
  $('notebook-hint').hidden = live || !current || !current.sb;
  if (current && current.sb) {
    $('notebook-hint').textContent = current.sb.status === 'PAUSED'
      ? 'This sandbox is paused: resume it to run cells. Its kernels keep their variables.'
      : `The notebook needs a running sandbox; this one is ${current.sb.status.toLowerCase()}.`;
  }
}

$('notebook-add').addEventListener('click', () => {
  if (!current) return;
  const nb = notebookOf(current.id);
  const last = nb.cells[nb.cells.length - 1];
  addCell(nb, { language: last ? last.lang.value : 'python' }).code.focus();
});
$('notebook-run-all').addEventListener('click', runAll);
$('notebook-restart').addEventListener('click', restart);
$('notebook-clear').addEventListener('click', clearOutputs);

// ---------- the URL ----------

/** The context ids a route names, by language (ids of a wrong shape ignored). */
function contextsOf(route) {
  const out = {};
  for (const lang of LANGUAGE_IDS) {
    const id = route.params && route.params[lang];
    if (typeof id === 'string' && CONTEXT_ID.test(id)) out[lang] = id;
  }
  return out;
}

/** Writes the notebook's context ids into the URL, rewriting the current entry. */
function syncUrl(nb) {
  const route = here();
  if (route.page !== 'sandbox' || route.id !== nb.id || route.tab !== 'notebook') return;
  const params = { ...route.params };
  for (const lang of LANGUAGE_IDS) params[lang] = nb.contexts[lang];
  const same = LANGUAGE_IDS.every((l) => (route.params[l] || undefined) === nb.contexts[l]);
  if (!same) go({ ...route, params }, { replace: true });
}

export const notebook = {
  enter(v, route) {
    current = v;
    const nb = notebookOf(v.id);
    const host = $('notebook-host');
    host.textContent = '';
    host.append(nb.list);
    $('notebook-status').textContent = '';
    this.route(v, route);
    enableButtons();
    if (running() && mayTakeFocus() && nb.cells[0] && !nb.cells[0].code.value) nb.cells[0].code.focus();
  },
  /** The URL names the contexts to run in (a reload, a link), or learns the ones the page has. */
  route(v, route) {
    if (v !== current || !route) return;
    const nb = notebookOf(v.id);
    const named = contextsOf(route);
    if (Object.keys(named).length) Object.assign(nb.contexts, named);
    syncUrl(nb);
  },
  record(v) {
    if (v !== current) return;
    enableButtons();
  },
  leave() {
    current = null;
    $('notebook-host').textContent = '';
  },
  forget(id) {
    const nb = notebooks.get(id);
    if (nb) for (const cell of nb.cells) stopCell(cell);
    notebooks.delete(id);
    try { sessionStorage.removeItem(storeKey(id)); } catch (_) { /* storage off */ }
  },
  /** Sign-out: every notebook and its kept code go. */
  closeAll() {
    for (const id of [...notebooks.keys()]) this.forget(id);
    try {
      for (const key of Object.keys(sessionStorage)) if (key.startsWith(STORE_PREFIX)) sessionStorage.removeItem(key);
    } catch (_) { /* storage off */ }
  },
};
