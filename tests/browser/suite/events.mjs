// Lifecycle events, webhooks and the audit log in the dashboard: a
// sandbox's history on its details tab (newest first, a stop made while
// the page is open shown as it happens, a long history shown a page at a
// time), the Webhooks page (a loopback URL refused with the server's
// message, one made with its secret shown once, disabled and enabled, its
// deliveries sent again, deleted after a confirmation), and the Audit page
// (the create's entry for an administrator; no nav entry and a refusal for
// another account).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { api, createSandbox, signedInPage, done, shot, eventually, assertNoOverflow } from '../lib/harness.mjs';

const unique = (prefix) => `${prefix}-${Math.random().toString(36).slice(2, 8)}`;

/** The event types of the history's rows, top to bottom. */
const historyTypes = (page) => page.$$eval('#history-list tr[data-type]', (rows) => rows.map((r) => r.dataset.type));

/** A loopback HTTP server that records what is POSTed to it. */
async function receiver() {
  const got = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => { got.push({ headers: req.headers, body }); res.writeHead(204).end(); });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${server.address().port}/hook`, got, close: () => new Promise((r) => server.close(r)) };
}

test('A sandbox\'s history lists its events newest first and shows a stop as it happens', async () => {
  const sb = await createSandbox({ name: unique('ui-history') });
  try {
    const page = await signedInPage({ hash: `#/sandbox/${sb.id}/details` });
    await page.waitForSelector('#history-list tr[data-type="created"]', { timeout: 20000 });
    const created = page.locator('#history-list tr[data-type="created"]');
    // The type without its `sandbox.lifecycle.` prefix, and when it happened.
    assert.equal((await created.locator('td').nth(1).textContent()).trim(), 'created');
    assert.match(await created.locator('td').first().textContent(), /\d+s ago|\dm ago/);
    const feed = await api('GET', `/api/v1/events?sandboxId=${sb.id}`);
    const ev = feed.events.find((e) => e.type === 'sandbox.lifecycle.created');
    assert.ok(ev, `the feed has no created event: ${JSON.stringify(feed)}`);
    assert.equal(await created.getAttribute('data-event'), ev.id);
    assert.equal(await created.locator('td').first().getAttribute('title'), ev.timestamp);
    // Following the live events before anything else happens.
    await page.waitForFunction(() => /^Live/.test(document.querySelector('#history-status').textContent), null, { timeout: 15000 });

    // Stopped behind the page's back: the row arrives without a reload,
    // on top of the created one.
    await api('POST', `/api/v1/sandbox/${sb.id}/stop`);
    await page.waitForSelector('#history-list tr[data-type="stopped"]', { timeout: 20000 });
    const types = await historyTypes(page);
    assert.equal(types[0], 'stopped', `newest first: ${types}`);
    assert.ok(types.indexOf('created') > 0, `created below stopped: ${types}`);
    const stopped = (await api('GET', `/api/v1/events?sandboxId=${sb.id}&type=sandbox.lifecycle.stopped`)).events;
    assert.equal(stopped.length, 1);
    assert.equal(await page.getAttribute('#history-list tr[data-type="stopped"]', 'data-event'), stopped[0].id);
    // Its facts (why it stopped, when the server says) are shown in words.
    if (stopped[0].eventData && stopped[0].eventData.reason) {
      assert.match(await page.textContent('#history-list tr[data-type="stopped"]'), new RegExp(`reason: ${stopped[0].eventData.reason.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
    }
    await shot(page, 'events-01-history');

    // A long history: 60 changes made while the page is open, each an
    // `updated` event with the field it changed; 50 rows at first, the rest
    // a click away, and no row twice.
    for (let i = 0; i < 60; i++) await api('PATCH', `/api/v1/sandbox/${sb.id}`, { labels: [`round-${i}`] });
    const total = (await api('GET', `/api/v1/events?sandboxId=${sb.id}`)).events.length;
    assert.ok(total >= 62 && total < 100, `events of the sandbox: ${total}`);
    const more = `Show ${total - 50} more (${total - 50} older)`;
    await page.waitForFunction((want) => document.querySelector('#history-more')?.textContent === want, more, { timeout: 20000 });
    assert.equal((await historyTypes(page)).length, 50);
    const top = page.locator('#history-list tr[data-type="updated"]').first();
    assert.match(await top.textContent(), /changed: labels/);
    await page.click('#history-more');
    await page.waitForSelector('#history-more', { state: 'detached' });
    const all = await historyTypes(page);
    assert.equal(all.length, total, `every event once: ${all}`);
    assert.equal(all[all.length - 1], 'created');
    const ids = await page.$$eval('#history-list tr[data-event]', (rows) => rows.map((r) => r.dataset.event));
    assert.equal(new Set(ids).size, ids.length);
    await assertNoOverflow(page, 'the history');
    await done(page);
  } finally {
    await api('DELETE', `/api/v1/sandbox/${sb.id}`).catch(() => {});
  }
});

test('The Webhooks page refuses a loopback URL, makes one with a secret shown once, lists its deliveries and deletes it', async () => {
  const local = await receiver();
  let sb = null;
  const page = await signedInPage({ hash: '#/' });
  try {
    await page.click('#nav-webhooks');
    await page.waitForSelector('#page-webhooks:not([hidden])');
    assert.equal(await page.getAttribute('#nav-webhooks', 'aria-current'), 'page');
    await page.waitForSelector('#webhooks-list p, #webhooks-list table');

    // A URL on this host is refused by the server (it is started without
    // --allow-internal-addresses); its message names the field.
    await page.fill('#webhook-form input[name="url"]', local.url);
    await page.click('#webhook-create');
    await page.waitForFunction(() => /^Not created: /.test(document.querySelector('#webhook-status').textContent));
    assert.match(await page.textContent('#webhook-status'), /url/i);
    assert.equal(await page.getAttribute('#webhook-form input[name="url"]', 'aria-invalid'), 'true');
    assert.ok(!(await api('GET', '/api/v1/webhooks')).some((h) => h.url === local.url));

    // Not a URL at all: refused before it is sent.
    await page.fill('#webhook-form input[name="url"]', 'ftp://example.com/x');
    await page.click('#webhook-create');
    await page.waitForFunction(() => /is not an http or https URL/.test(document.querySelector('#webhook-status').textContent));

    // A public name that does not resolve (kept: each delivery resolves it
    // again, so its deliveries fail without reaching anyone), two event
    // types, no secret: the server makes one and it is shown this once.
    const name = unique('ui-hook');
    await page.fill('#webhook-form input[name="url"]', 'https://hooks.stockade.invalid/stockade');
    await page.fill('#webhook-form input[name="name"]', name);
    await page.check('#webhook-types input[value="sandbox.lifecycle.created"]');
    await page.check('#webhook-types input[value="sandbox.lifecycle.stopped"]');
    await page.click('#webhook-create');
    await page.waitForSelector('#webhook-secret:not([hidden]) #new-webhook-secret');
    const secret = (await page.textContent('#new-webhook-secret')).trim();
    assert.ok(secret.length >= 16, `secret: ${secret}`);
    const hooks = await api('GET', '/api/v1/webhooks');
    const hook = hooks.find((h) => h.name === name);
    assert.ok(hook, `not listed by the API: ${JSON.stringify(hooks)}`);
    assert.equal(hook.url, 'https://hooks.stockade.invalid/stockade');
    assert.deepEqual([...hook.events].sort(), ['sandbox.lifecycle.created', 'sandbox.lifecycle.stopped']);
    assert.equal(hook.enabled, true);
    assert.equal(hook.signatureSecret, undefined);
    const row = `#webhooks-list tr[data-webhook="${hook.id}"]`;
    await page.waitForSelector(row);
    assert.match(await page.textContent(row), /created, stopped/);
    assert.match(await page.textContent(row), /enabled/);
    assert.ok(!(await page.textContent('#webhooks-list')).includes(secret), 'the list shows the secret');
    // The form is empty again for the next one.
    assert.equal(await page.inputValue('#webhook-form input[name="url"]'), '');
    assert.equal(await page.isChecked('#webhook-types input[value="sandbox.lifecycle.created"]'), false);
    await shot(page, 'events-02-webhook-created');
    await page.click('#webhook-secret button:has-text("Done, hide it")');
    await page.waitForSelector('#webhook-secret', { state: 'hidden' });

    // Disabled and enabled again.
    await page.click(`${row} button:has-text("Disable")`);
    await page.waitForSelector(`${row}[data-enabled="false"]`);
    assert.equal((await api('GET', `/api/v1/webhooks/${hook.id}`)).enabled, false);
    await page.click(`${row} button:has-text("Enable")`);
    await page.waitForSelector(`${row}[data-enabled="true"]`);
    assert.equal((await api('GET', `/api/v1/webhooks/${hook.id}`)).enabled, true);

    // An event it wants makes a delivery; the page lists it with its
    // attempts, and Re-send queues it again.
    sb = await createSandbox({ name: unique('ui-hooked') });
    await page.click(`${row} button:has-text("Deliveries")`);
    await page.waitForSelector('#deliveries:not([hidden])');
    assert.match(await page.textContent('#deliveries-title'), new RegExp(name));
    const delivery = await eventually(async () => {
      const list = (await api('GET', `/api/v1/webhooks/${hook.id}/deliveries`)).deliveries;
      return list.find((d) => d.sandboxId === sb.id && d.eventType === 'sandbox.lifecycle.created' && d.attempts >= 1);
    }, { timeout: 30000, what: 'an attempted delivery of the created event' });
    const drow = `#deliveries-list tr[data-delivery="${delivery.id}"]`;
    await page.waitForSelector(drow, { timeout: 15000 });
    const text = await page.textContent(drow);
    assert.match(text, /sandbox\.lifecycle\.created/);
    assert.match(text, /pending|delivered|failed/);
    await page.waitForFunction((sel) => !/not tried yet/.test(document.querySelector(sel)?.textContent || 'not tried yet'), drow, { timeout: 15000 });
    const last = delivery.attemptLog[0];
    if (last && last.statusCode != null) assert.match(await page.textContent(drow), new RegExp(`answered ${last.statusCode}`));
    else if (last && last.error) assert.match(await page.textContent(drow), /no answer/);
    await page.click(`${drow} button:has-text("Re-send")`);
    await page.waitForFunction(() => /Queued sandbox\.lifecycle\.created to be sent again/.test(document.querySelector('#notice-text').textContent));
    const again = (await api('GET', `/api/v1/webhooks/${hook.id}/deliveries`)).deliveries.find((d) => d.id === delivery.id);
    assert.ok(again, 'the delivery is still listed after Re-send');
    assert.ok(again.status === 'pending' || again.attempts > delivery.attempts, `queued again: ${JSON.stringify(again)}`);
    await shot(page, 'events-03-deliveries');
    await assertNoOverflow(page, 'the webhooks page');

    // Deleted after a confirmation: Cancel keeps it, Delete removes it.
    await page.click(`${row} button:has-text("Delete")`);
    await page.waitForSelector('#prompt-dialog[open]');
    assert.match(await page.textContent('#prompt-title'), new RegExp(`Delete the webhook ${name}`));
    await page.click('#prompt-dialog button[value="cancel"]');
    assert.ok((await api('GET', '/api/v1/webhooks')).some((h) => h.id === hook.id));
    await page.click(`${row} button:has-text("Delete")`);
    await page.click('#prompt-confirm');
    await page.waitForSelector(row, { state: 'detached' });
    await page.waitForSelector('#deliveries', { state: 'hidden' });
    assert.ok(!(await api('GET', '/api/v1/webhooks')).some((h) => h.id === hook.id));
    await done(page);
  } finally {
    await local.close();
    if (sb) await api('DELETE', `/api/v1/sandbox/${sb.id}`).catch(() => {});
    for (const h of await api('GET', '/api/v1/webhooks').catch(() => [])) {
      if (/^ui-hook-/.test(h.name)) await api('DELETE', `/api/v1/webhooks/${h.id}`).catch(() => {});
    }
  }
});

test('An administrator reads the audit log with a webhook\'s creation in it; another account is refused', async () => {
  const me = await api('GET', '/api/v1/me');
  const name = unique('ui-hook');
  const hook = await api('POST', '/api/v1/webhooks', { name, url: 'https://hooks.stockade.invalid/audited' });
  await api('DELETE', `/api/v1/webhooks/${hook.id}`);

  const page = await signedInPage({ hash: '#/' });
  assert.ok(await page.isVisible('#nav-audit'));
  await page.click('#nav-audit');
  await page.waitForSelector('#page-audit:not([hidden]) #audit-list table');
  assert.ok(await page.isHidden('#audit-refused'));
  // Narrowed to this account, newest first: the create is among its
  // latest entries (on the first page, or a "Load older" or a few away).
  await page.fill('#audit-filter input[name="accountId"]', me.account.id);
  await page.click('#audit-apply');
  await page.waitForFunction((id) => location.hash.includes(`accountId=${id}`), me.account.id);
  await page.waitForFunction(() => /matching the filter/.test(document.querySelector('#audit-status').textContent));
  // The create's entry, as the API answers it: the latest create of a
  // webhook by this account.
  let since = ''; let entry = null;
  for (;;) {
    const page = await api('GET', `/api/v1/audit?accountId=${me.account.id}&limit=100${since ? `&since=${since}` : ''}`);
    for (const a of page.entries) if (a.action === 'POST /api/v1/webhooks' && a.status === 201) entry = a;
    if (page.entries.length < 100) break;
    since = page.nextCursor;
  }
  assert.ok(entry, 'the API has no audit entry of the create');
  const created = `#audit-list tr[data-audit="${entry.id}"]`;
  await eventually(async () => {
    if (await page.$(created)) return true;
    await page.click('#audit-more');
    await page.waitForFunction(() => !document.querySelector('#audit-more').disabled);
    return false;
  }, { timeout: 60000, interval: 50, what: 'the webhook create in the audit log' });
  const times = await page.$$eval('#audit-list tr[data-audit] td:first-child', (tds) => tds.map((td) => td.title));
  assert.ok(times.length > 1 && times.every((t, i) => i === 0 || times[i - 1] >= t), `newest first: ${times}`);
  const cells = await page.$$eval(`${created} td`, (tds) => tds.map((td) => td.textContent));
  assert.equal(await page.getAttribute(`${created} td`, 'title'), entry.timestamp);
  assert.ok(cells[1].includes(me.account.id), `account: ${cells}`);
  // Made with a bearer token, not from a dashboard session.
  assert.equal(entry.frontEnd, 'api');
  assert.equal(cells[2], 'api');
  assert.equal(cells[3], 'POST /api/v1/webhooks');
  assert.equal(cells[4], entry.resourceId || '—');
  assert.equal(cells[5], '201');
  assert.equal(cells[6], entry.clientIp || '—');
  // Every row is this account's.
  const accounts = await page.$$eval('#audit-list tbody tr td:nth-child(2)', (tds) => tds.map((td) => td.textContent));
  assert.ok(accounts.every((a) => a.includes(me.account.id)), `another account's entry shown: ${accounts}`);
  await shot(page, 'events-04-audit');
  await assertNoOverflow(page, 'the audit page');
  await done(page);

  // Another account: no nav entry, and the page's URL is refused without
  // asking the server.
  const user = await api('POST', '/api/v1/accounts', { name: unique('ui-audit-user') });
  const asked = [];
  const other = await signedInPage({
    hash: '#/audit', as: user.token,
    setup: (p) => { p.on('request', (r) => { if (r.url().includes('/api/v1/audit')) asked.push(r.url()); }); },
  });
  await other.waitForSelector('#page-audit:not([hidden])');
  assert.ok(await other.isHidden('#nav-audit'));
  assert.ok(await other.isVisible('#nav-webhooks'));
  await other.waitForSelector('#audit-refused:not([hidden])');
  assert.match(await other.textContent('#audit-refused'), /for administrators/);
  assert.ok(await other.isHidden('#audit-body'));
  assert.deepEqual(asked, []);
  await done(other);
});
