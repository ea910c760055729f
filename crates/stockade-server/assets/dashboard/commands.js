// The console's second mode: each message runs as one command in the
// sandbox (a configurable agent command, default a shell) and its output
// streams back into a chat-style transcript. Each sandbox keeps its own
// transcript while the page lives.

import { sse, eventText, sandboxPath } from './api.js';
import { $, el, mayTakeFocus, usable } from './ui.js';

const AGENT_KEY = 'stockade.agentCommand';
/** sandbox id → its transcript element */
const transcripts = new Map();
let current = null;

function transcriptOf(id) {
  let t = transcripts.get(id);
  if (!t) {
    t = el('div', { class: 'transcript', 'aria-live': 'polite', 'data-sandbox': id });
    transcripts.set(id, t);
  }
  return t;
}

function shellQuote(s) {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

function commandFor(message) {
  const tpl = (localStorage.getItem(AGENT_KEY) || '').trim();
  if (!tpl || tpl === '{message}') return message;
  return tpl.includes('{message}') ? tpl.split('{message}').join(shellQuote(message)) : `${tpl} ${shellQuote(message)}`;
}

const PROMPT = $('console-input').placeholder;

/**
 * Commands go to a running sandbox, or to a paused one that resumes on
 * use; a paused one that does not says so where the command would go.
 */
function setEnabled() {
  const sb = current && current.sb;
  const live = usable(sb);
  $('console-input').disabled = !live;
  $('console-send').disabled = !live;
  $('console-input').placeholder = sb && sb.status === 'PAUSED' && !live
    ? 'This sandbox is paused: resume it to run commands'
    : PROMPT;
}

/** The closed settings line says what a message runs as. */
function showAgentCommand() {
  const tpl = (localStorage.getItem(AGENT_KEY) || '').trim();
  $('agent-summary').textContent = !tpl || tpl === '{message}'
    ? 'each message runs as a shell command'
    : `each message runs as ${tpl.includes('{message}') ? tpl : `${tpl} {message}`}`;
}

$('agent-command').value = localStorage.getItem(AGENT_KEY) || '';
showAgentCommand();
$('agent-command').addEventListener('change', (e) => {
  localStorage.setItem(AGENT_KEY, e.target.value);
  showAgentCommand();
});

$('console-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const input = $('console-input');
  const message = input.value;
  if (!message.trim() || !current || !current.sb) return;
  input.value = '';
  // The sandbox shown now; the answer goes to its transcript even if
  // another sandbox is shown by the time it arrives.
  const v = current;
  const id = v.id;
  const transcript = transcriptOf(id);
  const out = el('div', { class: 'out' });
  const exit = el('div', { class: 'exit' }, 'running…');
  transcript.append(el('div', { class: 'msg' }, el('div', { class: 'you' }, message), out, exit));
  transcript.scrollTop = transcript.scrollHeight;
  const fail = (text) => { exit.textContent = text; exit.classList.add('fail'); };
  let finished = false;
  try {
    await sse(sandboxPath(id, '/exec'), {
      method: 'POST',
      body: { shell: commandFor(message), cwd: '/workspace' },
      onEvent: ({ event, data }) => {
        if (event === 'stdout' || event === 'stderr') {
          out.append(el('span', { class: event }, eventText(data)));
        } else if (event === 'exit') {
          finished = true;
          let info = {};
          try { info = JSON.parse(data); } catch (_) { info = {}; }
          exit.textContent = info.timedOut ? 'timed out' : `exit code ${info.exitCode}`;
          if (info.timedOut || info.exitCode !== 0) exit.classList.add('fail');
        } else if (event === 'error') {
          finished = true;
          fail(`error: ${eventText(data)}`);
        }
        transcript.scrollTop = transcript.scrollHeight;
      },
    });
    if (!finished) fail('the stream ended without an exit code');
  } catch (err) {
    fail(`error: ${err.message}`);
    if ((err.status === 409 || err.status === 404) && v.alive()) v.refresh();
  } finally {
    if (current === v) input.focus();
  }
});

export const commands = {
  enter(v) {
    current = v;
    const host = $('transcript-host');
    host.textContent = '';
    host.append(transcriptOf(v.id));
    setEnabled();
    if (usable(v.sb) && mayTakeFocus()) $('console-input').focus();
  },
  record(v) {
    if (v !== current) return;
    const wasDisabled = $('console-input').disabled;
    setEnabled();
    if (wasDisabled && !$('console-input').disabled && mayTakeFocus()) $('console-input').focus();
  },
  leave() {
    current = null;
    $('transcript-host').textContent = '';
  },
  forget(id) {
    transcripts.delete(id);
  },
};
