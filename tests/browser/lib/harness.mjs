// The dashboard tests' shared harness: one real Stockade server (fresh data
// directory, real Docker, the local test image), one headless Chromium, and
// helpers to sign in, call the API, take screenshots and check that a page
// made no request outside Stockade and broke no rule of its CSP. Everything
// the run made in Docker is removed at the end, by the server and then by
// the instance's labels.
import { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, '../../..');
const bin = process.env.STOCKADE_BIN
  || path.join(process.env.CARGO_TARGET_DIR || path.join(root, 'target'), 'debug', 'stockade');
export const image = process.env.STOCKADE_TEST_IMAGE || 'stockade-test-base:latest';
export const artifacts = path.join(root, 'test-artifacts', 'dashboard');
export const token = `stk_browser_${Math.random().toString(36).slice(2)}`;

/** Filled in by `before`: the server's base URL and the browser. */
export const env = { base: null, browser: null };
let server; let dataDir;
let instanceId = null;

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
      // The tests make a few hundred requests from one address in a minute.
      STOCKADE_RATE_LIMIT: 'off',
      // The suites keep two dozen default sandboxes (1 CPU, 2 GB) until the
      // end, more than a test host could reserve (admission control is tested elsewhere).
      STOCKADE_CPU_OVERCOMMIT: 'off',
      STOCKADE_MEMORY_OVERCOMMIT: 'off',
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

/** A request to the API as the admin; answers the JSON, throws on an error status. */
export async function api(method, p, body, { as = token } = {}) {
  const resp = await fetch(env.base + p, {
    method,
    headers: { Authorization: `Bearer ${as}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await resp.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = text; }
  if (!resp.ok) throw new Error(`${method} ${p}: ${resp.status} ${text}`);
  return json;
}

/** The raw answer of an API request (for routes that may not exist yet). */
export function raw(method, p, { body, headers = {} } = {}) {
  return fetch(env.base + p, { method, headers: { Authorization: `Bearer ${token}`, ...headers }, body });
}

/** Creates a sandbox through the API and remembers the instance that made it. */
export async function createSandbox(body) {
  const sb = await api('POST', '/api/v1/sandbox', body);
  if (!instanceId) {
    try {
      instanceId = execFileSync('docker', ['inspect', '--format', '{{index .Config.Labels "io.stockade.instance-id"}}', `stockade-${sb.id}`]).toString().trim() || null;
    } catch (_) { /* looked up again next time */ }
  }
  return sb;
}

/** Writes a file into a sandbox through the API. */
export async function putFile(id, p, content) {
  const resp = await raw('PUT', `/api/v1/sandbox/${id}/files?path=${encodeURIComponent(p)}`, { body: content });
  assert.ok(resp.ok, `writing ${p}: ${resp.status} ${await resp.text()}`);
}

/** True when the server answers "no route" for `p` (a feature being added). */
export async function routeMissing(method, p, opts) {
  const resp = await raw(method, p, opts);
  if (resp.status !== 404) {
    await resp.body?.cancel();
    return false;
  }
  const body = await resp.json().catch(() => null);
  return Boolean(body && body.error && /^No route for /.test(body.error.message));
}

const pages = new WeakMap();

/**
 * A new browser context, signed in with the admin token (or the token
 * `as`), at `hash` (`setup(page)` runs first, e.g. to route requests). Every
 * request it makes and every CSP violation and script error is recorded
 * for `done`.
 */
export async function signedInPage({ width = 1280, height = 860, hash = '', setup, as = token } = {}) {
  const context = await env.browser.newContext({ viewport: { width, height }, acceptDownloads: true });
  const page = await context.newPage();
  const seen = { external: [], errors: [] };
  pages.set(page, seen);
  const port = new URL(env.base).port;
  context.on('request', (r) => {
    const u = new URL(r.url());
    const ours = (u.hostname === '127.0.0.1' || u.hostname.endsWith('.localhost')) && u.port === port;
    if (!ours && !['data:', 'blob:', 'about:'].includes(u.protocol)) seen.external.push(u.href);
  });
  page.on('pageerror', (e) => seen.errors.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy/i.test(m.text())) seen.errors.push(`CSP: ${m.text()}`);
  });
  const log = [];
  page.on('console', (m) => log.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => log.push(`pageerror: ${e.message}`));
  page.on('requestfailed', (r) => log.push(`failed: ${r.url()} ${r.failure() && r.failure().errorText}`));
  if (setup) await setup(page);
  await page.goto(`${env.base}/${hash}`);
  await page.waitForSelector('#token-input', { state: 'visible', timeout: 15000 }).catch((e) => {
    throw new Error(`the sign-in form did not show: ${e.message}\n${log.join('\n')}`);
  });
  await page.fill('#token-input', as);
  await page.press('#token-input', 'Enter');
  await page.waitForSelector('#app:not([hidden])');
  return page;
}

/** Closes the page's context; fails if it reached outside Stockade or broke a rule. */
export async function done(page) {
  const seen = pages.get(page) || { external: [], errors: [] };
  await page.context().close();
  assert.deepEqual(seen.external, [], 'the dashboard made requests outside Stockade');
  assert.deepEqual(seen.errors, [], 'the dashboard had script errors or CSP violations');
}

export const shot = (page, name) => page.screenshot({ path: path.join(artifacts, `${name}.png`), fullPage: true });

/** The text on the terminal's screen, one line a row. */
export function screenText(page) {
  return page.evaluate(() => [...document.querySelectorAll('#terminal-host .term:not([hidden]) .xterm-rows > div')]
    .map((row) => row.textContent.replace(/\u00a0/g, ' ')).join('\n'));
}

/** No horizontal scrolling: the document is no wider than the window. */
export async function assertNoOverflow(page, where) {
  const { doc, win, culprit } = await page.evaluate(() => {
    const w = document.documentElement.clientWidth;
    let worst = null;
    for (const n of document.querySelectorAll('body *')) {
      const r = n.getBoundingClientRect();
      if (r.width && r.right > w + 1 && getComputedStyle(n).position !== 'fixed' && !n.closest('.table-wrap, .xterm, .terminal-host, dialog')) {
        if (!worst || r.right > worst.right) worst = { right: Math.round(r.right), what: `${n.tagName.toLowerCase()}${n.id ? `#${n.id}` : ''}.${n.className}` };
      }
    }
    return { doc: document.documentElement.scrollWidth, win: w, culprit: worst };
  });
  assert.ok(doc <= win, `${where}: the page scrolls sideways (${doc} px wide in ${win} px; widest: ${JSON.stringify(culprit)})`);
}

/** Polls `fn` until it answers something truthy. */
export async function eventually(fn, { timeout = 15000, interval = 200, what = 'condition' } = {}) {
  const end = Date.now() + timeout;
  let last;
  for (;;) {
    try { last = await fn(); if (last) return last; } catch (e) { last = e; }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what} (last: ${last && last.message ? last.message : JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, interval));
  }
}

function dockerQuiet(args) {
  try { return execFileSync('docker', args, { stdio: ['ignore', 'pipe', 'ignore'] }).toString().split('\n').filter(Boolean); } catch (_) { return []; }
}

before(async () => {
  mkdirSync(artifacts, { recursive: true });
  env.base = await startServer();
  env.browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  try {
    // Snapshots first: their images go once no sandbox made from them is left.
    const snaps = await api('GET', '/api/v1/snapshots');
    for (const s of snaps.snapshots) await api('DELETE', `/api/v1/snapshots/${s.id}`).catch(() => {});
    const list = await api('GET', '/api/v1/sandbox?per_page=1000');
    const ids = list.sandboxes.map((sb) => sb.id);
    if (ids.length) await api('DELETE', '/api/v1/sandbox/bulk', { ids }).catch(() => {});
    await api('DELETE', '/api/v1/volumes/orphaned?confirm=true').catch(() => {});
  } catch (_) { /* the server is gone; the labels below catch what is left */ }
  if (env.browser) await env.browser.close();
  if (server) {
    const exited = new Promise((r) => server.once('exit', r));
    server.kill('SIGTERM');
    await Promise.race([exited, new Promise((r) => setTimeout(r, 15000))]);
  }
  if (instanceId) {
    const label = `label=io.stockade.instance-id=${instanceId}`;
    const containers = dockerQuiet(['ps', '-aq', '--filter', label]);
    if (containers.length) dockerQuiet(['rm', '-f', ...containers]);
    const volumes = dockerQuiet(['volume', 'ls', '-q', '--filter', label]);
    if (volumes.length) dockerQuiet(['volume', 'rm', '-f', ...volumes]);
    const images = dockerQuiet(['images', '-q', '--filter', label]);
    if (images.length) dockerQuiet(['rmi', '-f', ...new Set(images)]);
  }
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});
