// Dashboard tests (UI-1..UI-4) in real headless Chromium, against a real
// Stockade server binary and the real Docker engine.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const bin = process.env.STOCKADE_BIN
  || path.join(process.env.CARGO_TARGET_DIR || path.join(root, 'target'), 'debug', 'stockade');
const image = process.env.STOCKADE_TEST_IMAGE || 'stockade-test-base:latest';
const artifacts = path.join(root, 'test-artifacts', 'dashboard');
const token = `stk_browser_${Math.random().toString(36).slice(2)}`;

let server; let base; let browser; let dataDir;

function startServer() {
  dataDir = mkdtempSync(path.join(tmpdir(), 'stockade-ui-'));
  server = spawn(bin, ['server'], {
    env: {
      ...process.env,
      STOCKADE_LISTEN: '127.0.0.1:0',
      STOCKADE_DATA_DIR: dataDir,
      STOCKADE_ADMIN_TOKEN: token,
      STOCKADE_DEFAULT_IMAGE: image,
      STOCKADE_LOG: 'warn',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the server did not start in 60 s')), 60000);
    let out = '';
    server.stdout.on('data', (chunk) => {
      out += chunk;
      const m = out.match(/listening on (http:\/\/[0-9.:]+)/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    server.on('exit', (code) => reject(new Error(`the server exited (${code}): ${out}`)));
  });
}

async function api(method, p, body) {
  const resp = await fetch(base + p, {
    method,
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await resp.json().catch(() => null);
  if (!resp.ok) throw new Error(`${method} ${p}: ${resp.status} ${JSON.stringify(json)}`);
  return json;
}

async function signedInPage(width = 1280) {
  const context = await browser.newContext({ viewport: { width, height: 860 } });
  const page = await context.newPage();
  page.on('pageerror', (e) => { throw e; });
  await page.goto(base + '/');
  await page.fill('#token-input', token);
  await page.press('#token-input', 'Enter');
  await page.waitForSelector('#app:not([hidden])');
  return page;
}

const shot = (page, name) => page.screenshot({ path: path.join(artifacts, `${name}.png`), fullPage: true });

before(async () => {
  mkdirSync(artifacts, { recursive: true });
  base = await startServer();
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  try {
    const page = await api('GET', '/api/v1/sandbox?per_page=1000');
    for (const sb of page.sandboxes) await api('DELETE', `/api/v1/sandbox/${sb.id}`).catch(() => {});
  } catch (_) { /* server gone */ }
  if (browser) await browser.close();
  if (server) server.kill('SIGTERM');
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

test('a wrong token is refused; the empty state offers to create', async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(base + '/');
  await page.fill('#token-input', 'stk_wrong');
  await page.press('#token-input', 'Enter');
  await page.waitForSelector('#signin-error:not([hidden])');
  assert.match(await page.textContent('#signin-error'), /not accepted/);
  await context.close();

  const ui = await signedInPage();
  await ui.waitForSelector('#empty:not([hidden])');
  assert.match(await ui.textContent('#empty'), /No sandboxes yet/);
  assert.ok(await ui.isVisible('#empty-create'));
  await shot(ui, '01-empty');
  await ui.context().close();
});

test('create shows a loading indicator, then selects the sandbox and opens its console', async () => {
  const page = await signedInPage();
  await page.click('#create-toggle');
  await page.fill('#create-form input[name=name]', 'ui-demo');
  await page.fill('#create-form input[name=memory]', '0.5');
  await page.click('#create-submit');
  await page.waitForSelector('#create-status.loading');
  assert.match(await page.textContent('#create-status'), /Creating/);
  await shot(page, '02-creating');
  await page.waitForFunction(() => document.querySelector('#detail-name')?.textContent === 'ui-demo', null, { timeout: 60000 });
  assert.equal(await page.textContent('#detail-status'), 'RUNNING');
  assert.equal(await page.getAttribute('#tab-console', 'aria-selected'), 'true');
  assert.ok(await page.isVisible('#panel-console'));
  const current = await page.getAttribute('#sandbox-list button[aria-current="true"] .sb-name', 'class');
  assert.ok(current, 'the new sandbox is selected in the list');
  assert.equal(await page.textContent('#sandbox-list button[aria-current="true"] .sb-name'), 'ui-demo');
  assert.ok(await page.evaluate(() => document.activeElement.id === 'console-input'));
  await shot(page, '03-console');

  // A command typed in the console: output streams back, stdout and stderr apart, exit code shown.
  await page.fill('#console-input', 'echo hello from $(hostname); echo oops >&2; exit 3');
  await page.press('#console-input', 'Enter');
  await page.waitForSelector('.msg .exit.fail', { timeout: 30000 });
  assert.match(await page.textContent('.msg .stdout'), /hello from/);
  assert.match(await page.textContent('.msg .stderr'), /oops/);
  assert.match(await page.textContent('.msg .exit'), /exit code 3/);
  await page.fill('#console-input', 'echo persisted > note.txt && cat /workspace/note.txt');
  await page.press('#console-input', 'Enter');
  await page.waitForFunction(() => document.querySelectorAll('.msg .exit').length === 2
    && /exit code 0/.test(document.querySelectorAll('.msg .exit')[1].textContent), null, { timeout: 30000 });
  assert.match(await page.textContent('.msg:nth-child(2) .stdout'), /persisted/);
  await shot(page, '04-console-output');

  // Details: status, uptime, volume, live chart; logs follow.
  await page.click('#tab-details');
  await page.waitForSelector('#facts dt');
  const facts = await page.textContent('#facts');
  assert.match(facts, /agent-sandbox-/);
  assert.match(facts, /Uptime/);
  await page.waitForTimeout(2500);
  await shot(page, '05-details');
  await page.click('#tab-logs');
  await page.waitForTimeout(500);
  await shot(page, '06-logs');
  await page.context().close();
});

test('a create failure shows the reason', async () => {
  const page = await signedInPage();
  await page.click('#create-toggle');
  await page.fill('#create-form input[name=name]', 'ui-broken');
  await page.fill('#create-form input[name=image]', 'stockade-test/does-not-exist:missing');
  await page.click('#create-submit');
  await page.waitForSelector('#create-status.error', { timeout: 60000 });
  const msg = await page.textContent('#create-status');
  assert.match(msg, /does-not-exist/);
  assert.match(msg, /could not be pulled/);
  await shot(page, '07-create-error');
  await page.context().close();
});

test('a sandbox stopped or deleted behind the page is detected on selection', async () => {
  const stopped = await api('POST', '/api/v1/sandbox', { name: 'ui-stopped' });
  const doomed = await api('POST', '/api/v1/sandbox', { name: 'ui-doomed' });
  const page = await signedInPage();
  await page.waitForSelector(`li[data-id="${stopped.id}"]`);
  await page.waitForSelector(`li[data-id="${doomed.id}"]`);

  await api('POST', `/api/v1/sandbox/${stopped.id}/stop?timeout=1`);
  await page.click(`li[data-id="${stopped.id}"] button`);
  await page.waitForSelector('#stopped-banner:not([hidden])');
  assert.equal(await page.textContent('#detail-status'), 'STOPPED');
  assert.ok(await page.isDisabled('#console-input'));
  await shot(page, '08-stopped');
  await page.click('#banner-start');
  await page.waitForFunction(() => document.querySelector('#detail-status').textContent === 'RUNNING', null, { timeout: 30000 });
  assert.ok(await page.isEnabled('#console-input'));

  await api('DELETE', `/api/v1/sandbox/${doomed.id}`);
  await page.click(`li[data-id="${doomed.id}"] button`);
  await page.waitForSelector('#notice:not([hidden])');
  assert.match(await page.textContent('#notice'), /no longer exists/);
  assert.equal(await page.$(`li[data-id="${doomed.id}"]`), null);
  await shot(page, '09-deleted-behind');
  await page.context().close();
});

test('delete asks for confirmation and removes the sandbox from the list', async () => {
  const sb = await api('POST', '/api/v1/sandbox', { name: 'ui-delete-me' });
  const page = await signedInPage();
  await page.click(`li[data-id="${sb.id}"] button`);
  await page.waitForSelector('#detail:not([hidden])');
  await page.click('#btn-delete');
  await page.waitForSelector('#delete-dialog[open]');
  await page.check('#preserve-volume');
  await shot(page, '10-delete-confirm');
  await page.click('#delete-confirm');
  await page.waitForSelector(`li[data-id="${sb.id}"]`, { state: 'detached', timeout: 30000 });
  assert.match(await page.textContent('#notice'), /Deleted ui-delete-me/);
  const after = await api('GET', `/api/v1/sandbox/${sb.id}`);
  assert.equal(after.status, 'TERMINATED');
  const vol = execFileSync('docker', ['volume', 'ls', '-q', '--filter', `name=agent-sandbox-${sb.id}`]).toString().trim();
  assert.equal(vol, `agent-sandbox-${sb.id}`, 'the preserve-volume choice was honoured');
  execFileSync('docker', ['volume', 'rm', '-f', vol]);
  await page.context().close();
});

test('details show live usage and working proxy links to exposed ports', async () => {
  const sb = await api('POST', '/api/v1/sandbox', {
    name: 'ui-web', ports: [8080], startCommand: 'busybox httpd -f -p 8080 -h /workspace',
  });
  const put = await fetch(`${base}/api/v1/sandbox/${sb.id}/files?path=index.html`, {
    method: 'PUT', headers: { Authorization: `Bearer ${token}` }, body: '<h1>hello through the proxy</h1>',
  });
  assert.ok(put.ok, `writing index.html: ${put.status}`);
  const page = await signedInPage();
  await page.click(`li[data-id="${sb.id}"] button`);
  await page.click('#tab-details');
  await page.waitForSelector('#ports a', { timeout: 30000 });
  const href = await page.getAttribute('#ports a', 'href');
  // The host form: the port has an origin of its own (SEC-7).
  assert.match(href, new RegExp(`^http://8080-${sb.id}\\.localhost:\\d+/`));
  // Live usage: the memory fact shows used of limit once stats arrive.
  await page.waitForFunction(() => /of/.test(document.querySelector('#facts').textContent), null, { timeout: 30000 });
  await shot(page, '12-details-ports');
  const [tab] = await Promise.all([page.context().waitForEvent('page'), page.click('#ports a')]);
  await tab.waitForLoadState();
  assert.match(await tab.textContent('h1'), /hello through the proxy/);
  await shot(tab, '13-proxied-page');
  await page.context().close();
});

test('keyboard use, small screens, and sign-out', async () => {
  const page = await signedInPage(380);
  await shot(page, '11-narrow');
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 400, `no horizontal scrolling at 380 px (got ${width})`);
  // Tab reaches the create button, Enter opens the form.
  await page.focus('#create-toggle');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#create-form:not([hidden])');
  await page.click('#signout');
  await page.waitForSelector('#signin:not([hidden])');
  await page.reload();
  await page.waitForSelector('#signin:not([hidden])');
  assert.equal(await page.evaluate(() => sessionStorage.getItem('stockade.token')), null);
  await page.context().close();
});

test('a sandbox page cannot read or use the dashboard session (SEC-7)', async () => {
  const page = await signedInPage();
  // The session is an HttpOnly cookie: no script of the dashboard sees it.
  const visible = await page.evaluate(() => [document.cookie, JSON.stringify(sessionStorage), JSON.stringify(localStorage)].join(' '));
  assert.ok(!visible.includes(token), 'the API token is readable by scripts of the origin');
  const cookies = await page.context().cookies(`${base}/api/v1/me`);
  const session = cookies.find((c) => c.name === 'stockade_session');
  assert.ok(session && session.httpOnly && session.sameSite === 'Strict', `session cookie: ${JSON.stringify(session)}`);
  // A hostile page inside a sandbox tries everything it can.
  const sb = await api('POST', '/api/v1/sandbox', {
    name: 'ui-hostile', ports: [8080], startCommand: 'busybox httpd -f -p 8080 -h /workspace',
  });
  const probe = `<h1 id="out">probing</h1><script>
(async () => {
  const r = {};
  try { r.cookie = document.cookie; } catch (e) { r.cookie = 'blocked'; }
  try { r.storage = JSON.stringify(sessionStorage); } catch (e) { r.storage = 'blocked'; }
  for (const [k, u] of [['rel', '/api/v1/me'], ['abs', '${base}/api/v1/me']]) {
    try { const resp = await fetch(u, { credentials: 'include' }); r[k] = resp.status + ' ' + (await resp.text()); } catch (e) { r[k] = 'blocked'; }
  }
  try {
    const resp = await fetch('${base}/api/v1/sandbox', { method: 'POST', credentials: 'include',
      headers: { 'Content-Type': 'text/plain' }, body: '{"name":"planted"}' });
    r.create = String(resp.status);
  } catch (e) { r.create = 'blocked'; }
  document.getElementById('out').textContent = JSON.stringify(r);
  document.title = 'probed';
})();
</script>`;
  const put = await fetch(`${base}/api/v1/sandbox/${sb.id}/files?path=index.html`, {
    method: 'PUT', headers: { Authorization: `Bearer ${token}` }, body: probe,
  });
  assert.ok(put.ok, `writing the probe: ${put.status}`);
  const { token: proxyToken } = await api('POST', `/api/v1/sandbox/${sb.id}/auth-token`, {});
  const port = new URL(base).port;
  for (const url of [
    `${base}/proxy/${sb.id}/8080/?stockade_token=${proxyToken}`,
    `http://8080-${sb.id}.localhost:${port}/?stockade_token=${proxyToken}`,
  ]) {
    const tab = await page.context().newPage();
    const resp = await tab.goto(url);
    if (url.includes('/proxy/')) {
      assert.match(resp.headers()['content-security-policy'] || '', /sandbox/, 'path form without CSP sandbox');
      assert.doesNotMatch(resp.headers()['content-security-policy'], /allow-same-origin/);
    }
    await tab.waitForFunction(() => document.title === 'probed', null, { timeout: 30000 });
    const r = JSON.parse(await tab.textContent('#out'));
    assert.ok(!JSON.stringify(r).includes(token), `${url}: the token leaked: ${JSON.stringify(r)}`);
    assert.ok(!JSON.stringify(r).includes('"account"'), `${url}: the API answered the page as the admin: ${JSON.stringify(r)}`);
    assert.ok(r.create === 'blocked' || !r.create.startsWith('2'), `${url}: the page created a sandbox: ${r.create}`);
    await tab.close();
  }
  const list = await api('GET', '/api/v1/sandbox?name=planted');
  assert.equal(list.total, 0, 'a sandbox page made the admin create a sandbox');
  await shot(page, '14-hostile-page-refused');
  await page.context().close();
});
