// The console's terminal (xterm.js, vendored) over the terminal
// WebSocket: typing and output, `cd` that sticks, Ctrl-C, a full-screen
// program, resizing with the window, and the end of a session.
//
// The same checks run twice: against the server's terminal route (skipped
// while the server answers 404 for it), and against a real pseudo-terminal
// in the sandbox (`docker exec -it` under lib/pty-bridge.py) that plays the
// route's protocol, so that the client's side is proven either way.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createSandbox, signedInPage, done, shot, screenText, routeMissing, eventually } from '../lib/harness.mjs';

const bridge = path.join(path.dirname(fileURLToPath(import.meta.url)), '../lib/pty-bridge.py');

async function run(page, line) {
  await page.keyboard.type(line);
  await page.keyboard.press('Enter');
}

async function onScreen(page, pattern, what, timeout = 15000) {
  return eventually(async () => pattern.test(await screenText(page)), { timeout, what: `${what} on the terminal` });
}

async function size(page) {
  const text = await page.textContent('#terminal-size');
  const m = text.match(/^(\d+)×(\d+)$/);
  assert.ok(m, `terminal size shown as ${text}`);
  return { cols: Number(m[1]), rows: Number(m[2]) };
}

/** Everything a user does with the terminal; `sent` lists the client's text frames when known. */
async function exercise(page, { sent, prefix }) {
  await page.waitForFunction(() => /^Connected/.test(document.querySelector('#terminal-status').textContent), null, { timeout: 30000 });
  await page.click('#terminal-host .term:not([hidden])');
  await onScreen(page, /[#$]\s*$/m, 'a shell prompt');

  // Typing and output; `cd` sticks between commands.
  await run(page, 'cd /tmp');
  await run(page, 'echo "cwd=$(pwd) sum=$((20+22))"');
  await onScreen(page, /^cwd=\/tmp sum=42\s*$/m, 'the output of echo in /tmp');
  await shot(page, `${prefix}-terminal`);

  // Ctrl-C ends a running command at once.
  await run(page, 'sleep 60');
  await page.waitForTimeout(500);
  await page.keyboard.press('Control+c');
  await run(page, 'echo "after-$((6*7))"');
  await onScreen(page, /^after-42\s*$/m, 'a prompt again after Ctrl-C', 8000);

  // A full-screen program draws the whole screen and hands it back.
  await run(page, 'clear; top');
  await onScreen(page, /^Mem: .*used/m, 'top\'s header');
  await onScreen(page, /PID\s+PPID\s+USER/, 'top\'s process table');
  await shot(page, `${prefix}-top`);
  await page.keyboard.press('q');
  await run(page, 'clear; echo top-done');
  await onScreen(page, /^top-done\s*$/m, 'the shell after top');

  // The terminal follows the window; the program inside sees the new size.
  const before = await size(page);
  await run(page, 'clear; stty size');
  await onScreen(page, new RegExp(`^${before.rows} ${before.cols}\\s*$`, 'm'), `stty size ${before.rows} ${before.cols}`);
  await page.setViewportSize({ width: 900, height: 640 });
  const after = await eventually(async () => {
    const s = await size(page);
    return s.cols !== before.cols && s.rows !== before.rows ? s : null;
  }, { what: 'the terminal to fit the smaller window' });
  assert.ok(after.cols < before.cols && after.rows < before.rows, `${JSON.stringify(before)} → ${JSON.stringify(after)}`);
  if (sent) {
    await eventually(() => sent.some((m) => m.type === 'resize' && m.cols === after.cols && m.rows === after.rows),
      { what: `a resize frame for ${after.cols}×${after.rows}` });
  }
  await run(page, 'clear; stty size');
  await onScreen(page, new RegExp(`^${after.rows} ${after.cols}\\s*$`, 'm'), `stty size ${after.rows} ${after.cols}`);
  await shot(page, `${prefix}-resized`);

  // The end of the session, and a new one.
  await run(page, 'exit 7');
  await page.waitForFunction(() => /Session ended with exit code 7/.test(document.querySelector('#terminal-status').textContent), null, { timeout: 15000 });
  assert.ok(await page.isVisible('#terminal-reconnect'));
  await page.click('#terminal-reconnect');
  await page.waitForFunction(() => /^Connected/.test(document.querySelector('#terminal-status').textContent), null, { timeout: 30000 });
  await run(page, 'echo "new-$((1+1))"');
  await onScreen(page, /^new-2\s*$/m, 'output in the new session');
}

test('the terminal against the server\'s terminal route', async (t) => {
  // An unknown sandbox is "Sandbox not found"; only a missing route is "No route".
  if (await routeMissing('GET', '/api/v1/sandbox/000000000000/terminal')) {
    t.skip('the server answers 404 for GET /api/v1/sandbox/{id}/terminal: its terminal route is not there yet');
    return;
  }
  const sb = await createSandbox({ name: 'ui-term' });
  const page = await signedInPage({ hash: `#/sandbox/${sb.id}/terminal` });
  await exercise(page, { prefix: '30-server' });
  await done(page);
});

test('the terminal client speaks the terminal protocol (a real PTY in the sandbox plays the server)', async () => {
  const sb = await createSandbox({ name: 'ui-term-pty' });
  const sent = [];
  let opened = null;
  const setup = (page) => page.routeWebSocket((url) => url.pathname === `/api/v1/sandbox/${sb.id}/terminal`, (ws) => {
    const url = new URL(ws.url());
    opened = Object.fromEntries(url.searchParams);
    const child = spawn('python3', [bridge, url.searchParams.get('cols'), url.searchParams.get('rows'),
      'docker', 'exec', '-it', '-e', 'TERM=xterm-256color', '-w', url.searchParams.get('cwd') || '/workspace',
      `stockade-${sb.id}`, '/bin/sh'], { stdio: ['pipe', 'pipe', 'inherit'] });
    const frame = (kind, payload) => {
      const head = Buffer.alloc(5);
      head[0] = kind;
      head.writeUInt32BE(payload.length, 1);
      child.stdin.write(Buffer.concat([head, payload]));
    };
    child.stdout.on('data', (chunk) => ws.send(chunk));
    child.on('exit', (code) => {
      ws.send(JSON.stringify({ type: 'exit', exitCode: code }));
      ws.close();
    });
    ws.onMessage((message) => {
      if (typeof message === 'string') {
        const m = JSON.parse(message);
        sent.push(m);
        if (m.type === 'resize') frame(1, Buffer.from(`${m.cols} ${m.rows}`));
      } else {
        frame(0, message);
      }
    });
    ws.onClose(() => child.kill());
  });
  const page = await signedInPage({ hash: `#/sandbox/${sb.id}/terminal`, setup });
  await exercise(page, { sent, prefix: '31-pty' });
  // The connection asked for the terminal's size and the workspace.
  assert.ok(opened && Number(opened.cols) > 20 && Number(opened.rows) > 5, JSON.stringify(opened));
  assert.equal(opened.cwd, '/workspace');
  // Keystrokes travel as binary frames: nothing but resizes went as text.
  assert.ok(sent.length && sent.every((m) => m.type === 'resize'), JSON.stringify(sent));
  await done(page);
});
