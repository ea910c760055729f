// Actions always target the sandbox shown, and what is shown switches
// at once. The old dashboard kept the previous sandbox's header and buttons
// while the next one's details loaded, so Stop clicked 200 ms after
// selecting a slow sandbox stopped the one shown before.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { api, createSandbox, signedInPage, done, shot } from '../lib/harness.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Delays the details request of one sandbox by `ms`. */
async function slowDetails(page, id, ms) {
  await page.route((url) => url.pathname === `/api/v1/sandbox/${id}`, async (route) => {
    if (route.request().method() === 'GET') await sleep(ms);
    await route.continue().catch(() => {});
  });
}

/** The header names `name` within 300 ms of the click. */
function shownAtOnce(page, name) {
  return page.waitForFunction((n) => document.querySelector('#detail-name').textContent === n, name, { timeout: 300 });
}

test('Stop right after selecting a slow sandbox never stops the one shown before', async () => {
  const alpha = await createSandbox({ name: 'ui-alpha' });
  const beta = await createSandbox({ name: 'ui-beta' });
  const page = await signedInPage({ hash: `#/sandbox/${alpha.id}/logs` });
  await page.waitForSelector('#btn-stop:enabled');
  assert.equal(await page.textContent('#detail-name'), 'ui-alpha');

  await slowDetails(page, beta.id, 1500);
  await page.click(`li[data-id="${beta.id}"] a`);
  // The view switches at once (long before the details answer): the header
  // is beta's, its buttons wait for its state.
  await shownAtOnce(page, 'ui-beta');
  assert.ok(await page.isDisabled('#btn-stop'), 'Stop is enabled before beta\'s state has loaded');
  assert.ok(await page.isDisabled('#btn-delete'));
  assert.equal(await page.textContent('#detail-status'), 'LOADING');
  await shot(page, '20-switching');
  // The click 200 ms later (the old race) does nothing at all.
  await sleep(200);
  await page.click('#btn-stop', { force: true });
  await page.evaluate(() => document.getElementById('btn-stop').click());
  await page.waitForSelector('#btn-stop:enabled', { timeout: 10000 });
  assert.equal(await page.textContent('#detail-name'), 'ui-beta');
  assert.equal((await api('GET', `/api/v1/sandbox/${alpha.id}`)).status, 'RUNNING', 'the previously shown sandbox was stopped');
  assert.equal((await api('GET', `/api/v1/sandbox/${beta.id}`)).status, 'RUNNING');

  // Once beta is shown, Stop stops beta, and only beta.
  await page.click('#btn-stop');
  await page.waitForFunction(() => document.querySelector('#detail-status').textContent === 'STOPPED', null, { timeout: 30000 });
  assert.equal((await api('GET', `/api/v1/sandbox/${beta.id}`)).status, 'STOPPED');
  assert.equal((await api('GET', `/api/v1/sandbox/${alpha.id}`)).status, 'RUNNING');
  await done(page);
});

test('a late answer for a sandbox no longer selected is ignored', async () => {
  const list = (await api('GET', '/api/v1/sandbox?name=ui-alpha')).sandboxes;
  const alpha = list.length ? list[0] : await createSandbox({ name: 'ui-alpha' });
  const gamma = await createSandbox({ name: 'ui-gamma' });
  await api('POST', `/api/v1/sandbox/${gamma.id}/stop?timeout=1`);
  const page = await signedInPage({ hash: `#/sandbox/${gamma.id}/details` });
  await page.waitForFunction(() => document.querySelector('#detail-status').textContent === 'STOPPED');

  // Alpha answers slowly; gamma is selected again before it does.
  await slowDetails(page, alpha.id, 2000);
  await page.click(`li[data-id="${alpha.id}"] a`);
  await shownAtOnce(page, 'ui-alpha');
  await page.click(`li[data-id="${gamma.id}"] a`);
  await page.waitForFunction(() => document.querySelector('#detail-status').textContent === 'STOPPED');
  const alphaAnswered = page.waitForResponse((r) => new URL(r.url()).pathname === `/api/v1/sandbox/${alpha.id}`);
  await alphaAnswered;
  await sleep(300);
  assert.equal(await page.textContent('#detail-name'), 'ui-gamma');
  assert.equal(await page.textContent('#detail-status'), 'STOPPED', 'alpha\'s late answer replaced what is shown');
  assert.match(page.url(), new RegExp(`#/sandbox/${gamma.id}/details$`));
  assert.equal(await page.getAttribute(`li[data-id="${gamma.id}"] a`, 'aria-current'), 'true');
  assert.ok(await page.isEnabled('#btn-start'), 'gamma is stopped: Start is offered');
  assert.ok(await page.isDisabled('#btn-stop'));
  // The delete dialog names the sandbox shown, and deletes that one.
  await page.click('#btn-delete');
  assert.equal(await page.textContent('#delete-name'), 'ui-gamma');
  await page.click('#delete-dialog button[value=cancel]');
  assert.equal((await api('GET', `/api/v1/sandbox/${gamma.id}`)).status, 'STOPPED');
  await done(page);
});
