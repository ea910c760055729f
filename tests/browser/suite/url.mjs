// The place is in the URL, so a reload, back and forward, and a new
// tab keep it; the session survives the reload without the token in reach
// of scripts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { env, createSandbox, putFile, signedInPage, done, shot, routeMissing } from '../lib/harness.mjs';

async function at(page, hash) {
  await page.waitForFunction((h) => location.hash === h, hash, { timeout: 15000 });
}

async function filesAt(page, dir) {
  await page.waitForFunction((d) => document.querySelector('#file-title')?.textContent === d
    && !document.querySelector('#panel-files').hidden, dir, { timeout: 15000 });
}

test('reload, back/forward and a new tab keep the place', async () => {
  const sb = await createSandbox({ name: 'ui-url' });
  await putFile(sb.id, 'src/app/main.txt', 'x');
  const page = await signedInPage();
  await page.click(`li[data-id="${sb.id}"] a`);
  await page.waitForSelector('#btn-stop:enabled');
  await page.click('#tab-details');
  await at(page, `#/sandbox/${sb.id}/details`);
  await page.click('#tab-files');
  await at(page, `#/sandbox/${sb.id}/files`);
  await filesAt(page, '/workspace');
  await page.click('#file-entries a:text("src/")');
  await filesAt(page, '/workspace/src');
  await page.click('#file-entries a:text("app/")');
  const deep = `#/sandbox/${sb.id}/files/workspace/src/app`;
  await at(page, deep);
  await filesAt(page, '/workspace/src/app');

  // Reload: same sandbox, same tab, same folder, still signed in.
  await page.reload();
  await filesAt(page, '/workspace/src/app');
  assert.ok(await page.isHidden('#signin'));
  assert.equal(await page.getAttribute('#tab-files', 'aria-selected'), 'true');
  assert.equal(await page.textContent('#detail-name'), 'ui-url');
  assert.ok(await page.$('#file-tree li[data-path="/workspace/src/app/main.txt"]'));
  await shot(page, '60-reloaded');

  // Back and forward walk the same places.
  await page.goBack();
  await filesAt(page, '/workspace/src');
  await page.goBack();
  await filesAt(page, '/workspace');
  await page.goBack();
  await at(page, `#/sandbox/${sb.id}/details`);
  await page.waitForSelector('#panel-details:not([hidden])');
  assert.equal(await page.getAttribute('#tab-details', 'aria-selected'), 'true');
  await page.goForward();
  await filesAt(page, '/workspace');

  // A new tab of the same browser opens at the same place, signed in.
  const tab = await page.context().newPage();
  await tab.goto(`${env.base}/${deep}`);
  await filesAt(tab, '/workspace/src/app');
  assert.equal(await tab.textContent('#detail-name'), 'ui-url');
  await tab.close();

  // The console's mode, the admin section and the list filter too.
  const terminal = !(await routeMissing('GET', `/api/v1/sandbox/${sb.id}/terminal`));
  await page.goto(`${env.base}/#/sandbox/${sb.id}/commands`);
  await page.reload();
  await page.waitForSelector('#commands-pane:not([hidden])');
  assert.equal(await page.getAttribute('#mode-commands', 'aria-pressed'), 'true');
  await page.goto(`${env.base}/#/sandbox/${sb.id}/terminal`);
  await page.reload();
  await at(page, `#/sandbox/${sb.id}/${terminal ? 'terminal' : 'commands'}`);
  await page.goto(`${env.base}/#/admin/teams?show=terminated`);
  await page.reload();
  await page.waitForSelector('#admin-teams:not([hidden])');
  assert.equal(await page.inputValue('#list-filter'), 'terminated');
  await done(page);
});

test('keyboard: the tabs move with the arrow keys and the URL follows', async () => {
  const list = await createSandbox({ name: 'ui-keys' });
  const page = await signedInPage({ hash: `#/sandbox/${list.id}/details` });
  await page.waitForSelector('#panel-details:not([hidden])');
  await page.focus('#tab-details');
  await page.keyboard.press('ArrowRight');
  await at(page, `#/sandbox/${list.id}/logs`);
  assert.ok(await page.evaluate(() => document.activeElement.id === 'tab-logs'));
  await page.keyboard.press('ArrowLeft');
  await page.keyboard.press('ArrowLeft');
  await at(page, `#/sandbox/${list.id}/files`);
  await page.keyboard.press('Home');
  await page.waitForSelector('#panel-console:not([hidden])');
  // The console does not take the focus from the tab list.
  await page.waitForTimeout(300);
  assert.ok(await page.evaluate(() => document.activeElement.id === 'tab-console'));
  await page.keyboard.press('End');
  await at(page, `#/sandbox/${list.id}/snapshots`);
  await done(page);
});
