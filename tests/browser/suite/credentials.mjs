// Credentials from the dashboard: the signed-in account's API tokens and
// dashboard sessions on the home page (a token made with its secret shown
// once, listed, revoked; this browser's session marked and endable), a
// sign-out that ends the session on the server, and administrators
// disabling and enabling accounts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { api, signedInPage, done, shot, assertNoOverflow, env, token } from '../lib/harness.mjs';

const unique = (prefix) => `${prefix}-${Date.now().toString(36)}`;

/** The status of `GET /api/v1/me` with a bearer token, or with a session cookie. */
async function meStatus({ bearer, cookie }) {
  const headers = bearer ? { Authorization: `Bearer ${bearer}` } : { Cookie: `stockade_session=${cookie}` };
  const resp = await fetch(`${env.base}/api/v1/me`, { headers });
  return { status: resp.status, text: await resp.text() };
}

test('tokens and sessions: a token made on the home page, its secret shown once, listed and revoked', async () => {
  const made = await api('POST', '/api/v1/accounts', { name: unique('ui-tokens') });
  const page = await signedInPage({ hash: '#/', as: made.token });
  // This browser's session is listed and marked, next to the account's first token.
  await page.waitForSelector('#my-tokens:not([hidden]) tr[data-kind=session][data-current=true]');
  assert.match(await page.textContent('#tokens-list tr[data-current=true]'), /this browser/);
  assert.equal(await page.textContent('#tokens-list tr[data-current=true] td[data-kind]'), 'dashboard session');
  assert.equal(await page.locator('#tokens-list tr[data-kind=api]').count(), 1);

  // No name: refused in the form.
  await page.click('#token-create');
  assert.equal(await page.getAttribute('#token-form [name=name]', 'aria-invalid'), 'true');
  assert.match(await page.textContent('#notice'), /Could not create the token: name/);

  // A token with an expiry: the secret once, in a box that says so.
  await page.fill('#token-form [name=name]', 'ui-ci');
  await page.selectOption('#token-form [name=expires]', '2592000');
  await page.click('#token-create');
  await page.waitForSelector('#token-secret:not([hidden]) #new-api-token');
  const secret = (await page.textContent('#new-api-token')).trim();
  assert.match(secret, /^stk_/);
  assert.match(await page.textContent('#token-secret'), /won't be shown again/);
  assert.equal(await page.getAttribute('#token-form [name=name]', 'aria-invalid'), null);
  const me = await api('GET', '/api/v1/me', undefined, { as: secret });
  assert.equal(me.account.id, made.account.id);

  // Listed, without the secret.
  const listed = (await api('GET', `/api/v1/accounts/${made.account.id}/tokens`, undefined, { as: made.token })).tokens;
  const ci = listed.find((t) => t.name === 'ui-ci');
  assert.ok(ci, JSON.stringify(listed));
  const row = `#tokens-list tr[data-token="${ci.id}"]`;
  await page.waitForSelector(row);
  const cells = await page.$$eval(`${row} td`, (tds) => tds.map((td) => td.textContent));
  assert.equal(cells[0], 'ui-ci');
  assert.equal(cells[1], 'API token');
  assert.match(cells[2], /s ago$/);
  assert.equal(cells[3], 'in 30d');
  await shot(page, '90-tokens-secret');
  await page.click('#token-secret button:text("Done, hide it")');
  assert.ok(await page.isHidden('#token-secret'));
  assert.ok(!(await page.content()).includes(secret), 'the secret is still in the page');
  // Read again (here after a reload), the list says when it was last used.
  await page.reload();
  await page.waitForSelector(row);
  assert.match(await page.textContent(`${row} td:nth-child(5)`), /ago$/, 'used a moment ago');
  assert.ok(!(await page.content()).includes(secret), 'the secret came back');
  assert.ok(await page.isHidden('#token-secret'));

  // Revoked after a confirmation: gone from the list, refused by the API.
  await page.click(`${row} button:text("Revoke")`);
  await page.waitForSelector('#prompt-dialog[open]');
  assert.match(await page.textContent('#prompt-title'), /Revoke the token ui-ci\?/);
  await page.click('#prompt-confirm');
  await page.waitForSelector(row, { state: 'detached' });
  assert.match(await page.textContent('#notice'), /Revoked the token ui-ci/);
  assert.equal((await meStatus({ bearer: secret })).status, 401);
  await done(page);

  // The card fits a narrow screen.
  const narrow = await signedInPage({ width: 380, height: 800, as: made.token });
  await narrow.waitForSelector('#my-tokens:not([hidden]) table');
  await assertNoOverflow(narrow, 'the tokens card');
  await shot(narrow, '91-narrow-tokens');
  await done(narrow);
});

test('sign-out ends the session on the server; ending this browser\'s session from the list signs it out', async () => {
  const page = await signedInPage();
  const cookieOf = async (p) => (await p.context().cookies(`${env.base}/api/v1/me`)).find((c) => c.name === 'stockade_session').value;
  const cookie = await cookieOf(page);
  assert.match(cookie, /^stks_/, 'the cookie holds a session secret, not the API token');
  assert.notEqual(cookie, token);
  assert.equal((await meStatus({ cookie })).status, 200);
  await page.click('#signout');
  await page.waitForSelector('#signin:not([hidden])');
  const after = await meStatus({ cookie });
  assert.equal(after.status, 401, 'the old cookie still works after signing out');
  assert.match(after.text, /session has ended/);
  await done(page);

  // Ending its own session from the list: the confirmation says so, then the
  // sign-in form.
  const made = await api('POST', '/api/v1/accounts', { name: unique('ui-session') });
  const own = await signedInPage({ hash: '#/', as: made.token });
  const current = '#tokens-list tr[data-current=true]';
  await own.waitForSelector(current);
  const ownCookie = await cookieOf(own);
  await own.click(`${current} button:text("Revoke")`);
  await own.waitForSelector('#prompt-dialog[open]');
  assert.match(await own.textContent('#prompt-text'), /signs you out here/);
  await own.click('#prompt-confirm');
  await own.waitForSelector('#signin:not([hidden])');
  assert.match(await own.textContent('#signin-error'), /session has ended/);
  assert.equal((await meStatus({ cookie: ownCookie })).status, 401);
  // The API token it was opened with still works.
  assert.equal((await meStatus({ bearer: made.token })).status, 200);
  await done(own);
});

test('admin: a disabled account shows as disabled and cannot sign in; enabled again', async () => {
  const made = await api('POST', '/api/v1/accounts', { name: unique('ui-disable') });
  const user = made.account;
  const admin = await signedInPage({ hash: '#/admin/accounts' });
  const row = `#accounts-list tr[data-account="${user.id}"]`;
  await admin.waitForSelector(`${row} td[data-status]`);
  assert.equal(await admin.textContent(`${row} td[data-status]`), 'active');
  // The administrator's own row cannot be disabled from here.
  const self = await api('GET', '/api/v1/me');
  assert.equal(await admin.locator(`#accounts-list tr[data-account="${self.account.id}"] button:text("Disable")`).count(), 0);

  await admin.click(`${row} button:text("Disable")`);
  await admin.waitForSelector('#prompt-dialog[open]');
  assert.match(await admin.textContent('#prompt-title'), new RegExp(`Disable ${user.name}\\?`));
  await admin.click('#prompt-confirm');
  await admin.waitForSelector(`${row}[data-disabled=true]`);
  assert.equal(await admin.textContent(`${row} td[data-status]`), 'disabled');
  assert.match(await admin.textContent('#notice'), new RegExp(`Disabled ${user.name}`));
  assert.ok((await api('GET', '/api/v1/accounts')).accounts.find((a) => a.id === user.id).disabledAt);
  const refused = await meStatus({ bearer: made.token });
  assert.equal(refused.status, 403);
  assert.match(refused.text, /disabled/);
  await shot(admin, '92-account-disabled');

  // Its sign-in is refused, saying why.
  const context = await env.browser.newContext();
  const tab = await context.newPage();
  await tab.goto(`${env.base}/`);
  await tab.waitForSelector('#token-input', { state: 'visible' });
  await tab.fill('#token-input', made.token);
  await tab.press('#token-input', 'Enter');
  await tab.waitForSelector('#signin-error:not([hidden])');
  assert.match(await tab.textContent('#signin-error'), /disabled/);
  await context.close();

  await admin.click(`${row} button:text("Enable")`);
  await admin.waitForSelector(`${row}:not([data-disabled])`);
  assert.equal(await admin.textContent(`${row} td[data-status]`), 'active');
  assert.equal((await meStatus({ bearer: made.token })).status, 200);
  await done(admin);
});
