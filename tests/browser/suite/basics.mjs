// Sign-in, the list, create, the console's command mode, stop/start/delete,
// details with proxy links, and the session's protection.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { env, token, api, createSandbox, putFile, signedInPage, done, shot, routeMissing } from '../lib/harness.mjs';

test('a wrong token is refused; the empty state offers to create', async () => {
  const context = await env.browser.newContext();
  const page = await context.newPage();
  await page.goto(env.base + '/');
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
  await done(ui);
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
  await page.waitForFunction(() => document.querySelector('#detail-name')?.textContent === 'ui-demo'
    && document.querySelector('#detail-status')?.textContent === 'RUNNING', null, { timeout: 60000 });
  assert.equal(await page.getAttribute('#tab-console', 'aria-selected'), 'true');
  assert.ok(await page.isVisible('#panel-console'));
  assert.equal(await page.textContent('#sandbox-list a[aria-current="true"] .sb-name'), 'ui-demo');
  const id = await page.getAttribute('#sandbox-list li:has(a[aria-current="true"])', 'data-id');
  // The console opens as a terminal, or runs commands one by one where the
  // server has no terminal.
  const terminal = !(await routeMissing('GET', `/api/v1/sandbox/${id}/terminal`));
  await page.waitForFunction((mode) => location.hash.endsWith(`/${mode}`), terminal ? 'terminal' : 'commands');
  await shot(page, '03-console');

  // Command mode: output streams back, stdout and stderr apart, exit code shown.
  await page.click('#mode-commands');
  await page.waitForSelector('#commands-pane:not([hidden])');
  assert.ok(page.url().endsWith(`#/sandbox/${id}/commands`));
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
  await page.waitForSelector('#logs .empty-log, #logs .stdout');
  await shot(page, '06-logs');
  await done(page);
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

  // A field the server refuses is named and marked.
  await page.fill('#create-form input[name=image]', '');
  await page.fill('#create-form input[name=cpu]', '500');
  await page.click('#create-submit');
  await page.waitForFunction(() => /cpuCores/.test(document.querySelector('#create-status').textContent));
  assert.equal(await page.getAttribute('#create-form input[name=cpu]', 'aria-invalid'), 'true');
  // And one the form itself refuses never reaches the server.
  await page.fill('#create-form input[name=cpu]', '');
  await page.fill('#create-form input[name=ports]', '80, 81, 82, 83, 84');
  await page.click('#create-submit');
  await page.waitForFunction(() => /ports: at most 4/.test(document.querySelector('#create-status').textContent));
  assert.equal(await page.getAttribute('#create-form input[name=ports]', 'aria-invalid'), 'true');
  assert.equal((await api('GET', '/api/v1/sandbox?name=ui-broken')).total, 0);
  await done(page);
});

test('a sandbox stopped or deleted behind the page is detected on selection', async () => {
  const stopped = await createSandbox({ name: 'ui-stopped' });
  const doomed = await createSandbox({ name: 'ui-doomed' });
  const page = await signedInPage();
  await page.waitForSelector(`li[data-id="${stopped.id}"]`);
  await page.waitForSelector(`li[data-id="${doomed.id}"]`);

  await api('POST', `/api/v1/sandbox/${stopped.id}/stop?timeout=1`);
  await page.click(`li[data-id="${stopped.id}"] a`);
  await page.waitForSelector('#stopped-banner:not([hidden])');
  assert.equal(await page.textContent('#detail-status'), 'STOPPED');
  // The console says why it cannot be used yet.
  await page.waitForFunction(() => /needs a running sandbox; this one is stopped/.test(document.querySelector('#terminal-status').textContent));
  assert.ok(await page.isDisabled('#btn-stop'));
  await shot(page, '08-stopped');
  await page.click('#banner-start');
  await page.waitForFunction(() => document.querySelector('#detail-status').textContent === 'RUNNING', null, { timeout: 30000 });
  assert.ok(await page.isEnabled('#btn-stop'));

  // Selected right after the delete, in one step of the page: the list
  // refreshes itself every few seconds and may drop the sandbox first
  // (then there is nothing left to select, which is as good).
  await api('DELETE', `/api/v1/sandbox/${doomed.id}`);
  const selected = await page.evaluate((id) => {
    const link = document.querySelector(`li[data-id="${id}"] a`);
    link?.click();
    return Boolean(link);
  }, doomed.id);
  if (selected) {
    await page.waitForSelector('#notice:not([hidden])');
    await page.waitForFunction(() => /no longer exists/.test(document.querySelector('#notice').textContent));
  }
  await page.waitForSelector(`li[data-id="${doomed.id}"]`, { state: 'detached' });
  await shot(page, '09-deleted-behind');
  await done(page);
});

test('delete asks for confirmation and removes the sandbox from the list', async () => {
  const sb = await createSandbox({ name: 'ui-delete-me' });
  const page = await signedInPage();
  await page.click(`li[data-id="${sb.id}"] a`);
  await page.waitForSelector('#page-sandbox:not([hidden])');
  await page.waitForSelector('#btn-delete:enabled');
  await page.click('#btn-delete');
  await page.waitForSelector('#delete-dialog[open]');
  await page.check('#preserve-volume');
  await shot(page, '10-delete-confirm');
  await page.click('#delete-confirm');
  await page.waitForSelector(`li[data-id="${sb.id}"]`, { state: 'detached', timeout: 30000 });
  await page.waitForFunction(() => /Deleted ui-delete-me/.test(document.querySelector('#notice').textContent));
  const after = await api('GET', `/api/v1/sandbox/${sb.id}`);
  assert.equal(after.status, 'TERMINATED');
  const vol = execFileSync('docker', ['volume', 'ls', '-q', '--filter', `name=agent-sandbox-${sb.id}`]).toString().trim();
  assert.equal(vol, `agent-sandbox-${sb.id}`, 'the preserve-volume choice was honoured');
  await done(page);
});

test('details show live usage and working proxy links; ports can be exposed and unexposed', async () => {
  const sb = await createSandbox({
    name: 'ui-web', ports: [8080], startCommand: 'busybox httpd -f -p 8080 -h /workspace',
  });
  await putFile(sb.id, 'index.html', '<h1>hello through the proxy</h1>');
  const page = await signedInPage({ hash: `#/sandbox/${sb.id}/details` });
  await page.waitForSelector('#ports li[data-port="8080"] a', { timeout: 30000 });
  const href = await page.getAttribute('#ports li[data-port="8080"] a', 'href');
  // The host form: the port has an origin of its own.
  assert.match(href, new RegExp(`^http://8080-${sb.id}\\.localhost:\\d+/`));
  // Live usage: the memory fact shows used of limit once stats arrive.
  await page.waitForFunction(() => / of /.test(document.querySelector('#facts').textContent), null, { timeout: 30000 });
  await shot(page, '12-details-ports');
  const [tab] = await Promise.all([page.context().waitForEvent('page'), page.click('#ports li[data-port="8080"] a')]);
  await tab.waitForLoadState();
  assert.match(await tab.textContent('h1'), /hello through the proxy/);
  await shot(tab, '13-proxied-page');
  await tab.close();

  // Expose one more, then unexpose it: the API agrees each time.
  await page.fill('#expose-port', '9090');
  await page.press('#expose-port', 'Enter');
  await page.waitForSelector('#ports li[data-port="9090"] a');
  assert.deepEqual((await api('GET', `/api/v1/sandbox/${sb.id}/ports`)).ports.map((p) => p.port).sort(), [8080, 9090]);
  await page.click('#ports li[data-port="9090"] button');
  await page.waitForSelector('#ports li[data-port="9090"]', { state: 'detached' });
  assert.deepEqual((await api('GET', `/api/v1/sandbox/${sb.id}/ports`)).ports.map((p) => p.port), [8080]);
  await done(page);
});

test('keyboard use and sign-out; the session survives a reload', async () => {
  const page = await signedInPage();
  // Tab reaches the create button, Enter opens the form.
  await page.focus('#create-toggle');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#page-new:not([hidden])');
  assert.ok(await page.evaluate(() => document.activeElement.name === 'name'));
  // A reload keeps the session (the cookie) and the place.
  await page.reload();
  await page.waitForSelector('#page-new:not([hidden])');
  assert.ok(await page.isHidden('#signin'));
  await page.click('#signout');
  await page.waitForSelector('#signin:not([hidden])');
  await page.reload();
  await page.waitForSelector('#signin:not([hidden])');
  assert.equal(await page.evaluate(() => sessionStorage.getItem('stockade.token')), null);
  await done(page);
});

test('a sandbox page cannot read or use the dashboard session', async () => {
  const page = await signedInPage();
  // The session is an HttpOnly cookie: no script of the dashboard sees it.
  const visible = await page.evaluate(() => [document.cookie, JSON.stringify(sessionStorage), JSON.stringify(localStorage)].join(' '));
  assert.ok(!visible.includes(token), 'the API token is readable by scripts of the origin');
  const cookies = await page.context().cookies(`${env.base}/api/v1/me`);
  const session = cookies.find((c) => c.name === 'stockade_session');
  assert.ok(session && session.httpOnly && session.sameSite === 'Strict', `session cookie: ${JSON.stringify(session)}`);
  // A hostile page inside a sandbox tries everything it can.
  const sb = await createSandbox({
    name: 'ui-hostile', ports: [8080], startCommand: 'busybox httpd -f -p 8080 -h /workspace',
  });
  const probe = `<h1 id="out">probing</h1><script>
(async () => {
  const r = {};
  try { r.cookie = document.cookie; } catch (e) { r.cookie = 'blocked'; }
  try { r.storage = JSON.stringify(sessionStorage); } catch (e) { r.storage = 'blocked'; }
  for (const [k, u] of [['rel', '/api/v1/me'], ['abs', '${env.base}/api/v1/me']]) {
    try { const resp = await fetch(u, { credentials: 'include' }); r[k] = resp.status + ' ' + (await resp.text()); } catch (e) { r[k] = 'blocked'; }
  }
  try {
    const resp = await fetch('${env.base}/api/v1/sandbox', { method: 'POST', credentials: 'include',
      headers: { 'Content-Type': 'text/plain' }, body: '{"name":"planted"}' });
    r.create = String(resp.status);
  } catch (e) { r.create = 'blocked'; }
  document.getElementById('out').textContent = JSON.stringify(r);
  document.title = 'probed';
})();
</script>`;
  await putFile(sb.id, 'index.html', probe);
  const { token: proxyToken } = await api('POST', `/api/v1/sandbox/${sb.id}/auth-token`, {});
  const port = new URL(env.base).port;
  for (const url of [
    `${env.base}/proxy/${sb.id}/8080/?stockade_token=${proxyToken}`,
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
  // The dashboard itself allows nothing but its own origin.
  const csp = (await page.context().request.get(`${env.base}/`)).headers()['content-security-policy'];
  assert.match(csp, /default-src 'self'/);
  assert.match(csp, /frame-ancestors 'none'/);
  await shot(page, '14-hostile-page-refused');
  await done(page);
});
