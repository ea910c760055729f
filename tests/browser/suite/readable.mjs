// Errors as visible banners with the API's message, a chart with axes
// and a few minutes of history, an empty log that says so, resources shown
// as entered, and no sideways scrolling at 380 px.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { api, createSandbox, putFile, signedInPage, done, shot, assertNoOverflow } from '../lib/harness.mjs';

/** How many pixels of the chart's canvas, in a box of CSS pixels, are not blank (or of a colour). */
async function inked(page, box, rgb) {
  // A tab shown a moment ago may not be laid out yet (no width to measure by).
  await page.waitForFunction(() => document.getElementById('chart').clientWidth > 0);
  return page.evaluate(([b, colour]) => {
    const c = document.getElementById('chart');
    const scale = c.width / c.clientWidth;
    const x = Math.round((b.x < 0 ? c.clientWidth + b.x : b.x) * scale);
    const y = Math.round((b.y < 0 ? c.clientHeight + b.y : b.y) * scale);
    const data = c.getContext('2d').getImageData(x, y, Math.round(b.w * scale), Math.round(b.h * scale)).data;
    let n = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (data[i + 3] < 128) continue;
      if (!colour) { n++; continue; }
      if (Math.abs(data[i] - colour[0]) < 40 && Math.abs(data[i + 1] - colour[1]) < 40 && Math.abs(data[i + 2] - colour[2]) < 40) n++;
    }
    return n;
  }, [box, rgb || null]);
}

test('an action the API refuses shows its message in a banner', async () => {
  const taken = await createSandbox({ name: 'ui-taken-name' });
  const sb = await createSandbox({ name: 'ui-banner' });
  const page = await signedInPage({ hash: `#/sandbox/${sb.id}/details` });
  await page.waitForSelector('#btn-fork:enabled');
  await page.click('#btn-fork');
  await page.fill('#prompt-input', taken.name);
  await page.click('#prompt-confirm');
  await page.waitForSelector('#notice.error:not([hidden])');
  const text = await page.textContent('#notice');
  assert.match(text, /Could not fork ui-banner: /);
  assert.match(text, /ui-taken-name/, 'the API\'s own message is shown');
  await shot(page, '70-error-banner');
  await page.click('#notice-close');
  assert.ok(await page.isHidden('#notice'));
  // A settings change the API refuses names the field.
  await page.fill('#settings-form [name=cpu]', '1000');
  await page.click('#settings-save');
  await page.waitForFunction(() => /Not saved: .*cpuCores/.test(document.querySelector('#settings-status').textContent));
  assert.equal(await page.getAttribute('#settings-form [name=cpu]', 'aria-invalid'), 'true');
  // One it accepts says when it applies.
  await page.fill('#settings-form [name=cpu]', '1');
  await page.fill('#settings-form [name=labels]', 'readable');
  await page.click('#settings-save');
  await page.waitForFunction(() => /^Saved \(in effect now: labels\)/.test(document.querySelector('#settings-status').textContent));
  // The message stays while the details keep refreshing.
  await page.waitForTimeout(2500);
  assert.match(await page.textContent('#settings-status'), /^Saved/);
  assert.deepEqual((await api('GET', `/api/v1/sandbox/${sb.id}`)).labels, ['readable']);
  await done(page);
});

test('the chart has axes, units and history; resources read as entered; an empty log says so', async () => {
  // A quarter of a core kept busy: the CPU line runs near the top, memory near the bottom.
  const sb = await createSandbox({ name: 'ui-chart', cpuCores: 0.25, memoryGB: 1, startCommand: 'while true; do :; done' });
  const quiet = await createSandbox({ name: 'ui-quiet', cpuCores: 1, memoryGB: 1 });
  const page = await signedInPage({ hash: `#/sandbox/${quiet.id}/details` });
  // Read in one go: the facts are redrawn every two seconds.
  const facts = () => page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#facts dt')]
    .map((dt) => [dt.textContent, dt.nextElementSibling.textContent])));
  const memoryShown = () => page.waitForFunction(() => {
    const dt = [...document.querySelectorAll('#facts dt')].find((d) => d.textContent === 'Memory');
    return dt && / of 1 GB$/.test(dt.nextElementSibling.textContent);
  }, null, { timeout: 20000 });
  await memoryShown();
  let f = await facts();
  assert.match(f.CPU, /^\d+\.\d % of 1 core$/);
  assert.match(f.Memory, /^[\d.]+ (B|KB|MB) of 1 GB$/);
  assert.match(await page.textContent('#detail-sub'), /· 1 core · 1 GB$/);
  assert.doesNotMatch(await page.textContent('#page-sandbox'), /1\.1 GB|1\.07/);

  await page.click(`li[data-id="${sb.id}"] a`);
  await page.waitForFunction(() => /0\.25 cores/.test(document.querySelector('#facts')?.textContent || ''));
  await memoryShown();
  f = await facts();
  assert.match(f.CPU, /^\d+\.\d % of 0\.25 cores$/);
  assert.match(await page.textContent('#chart-legend'), /CPU, % of 0\.25 cores: [\d.]+ %.*Memory, % of 1 GB: [\d.]+ %.*last 5 minutes/);

  // Axes: labels along the left (0-100 %) and the bottom (minutes), lines for both series.
  await page.waitForFunction(() => (document.querySelector('#chart-legend').textContent.match(/%/g) || []).length >= 4);
  await page.waitForTimeout(4500);
  assert.ok(await inked(page, { x: 0, y: 0, w: 40, h: 170 }) > 100, 'no y-axis labels');
  assert.ok(await inked(page, { x: 44, y: -22, w: 300, h: 20 }) > 100, 'no x-axis labels');
  assert.ok(await inked(page, { x: 44, y: 0, w: 2000, h: 175 }, [43, 89, 195]) > 20, 'no CPU line');
  assert.ok(await inked(page, { x: 44, y: 0, w: 2000, h: 175 }, [47, 133, 90]) > 20, 'no memory line');
  await shot(page, '71-chart');
  // History stays while the page lives: back on the tab, the lines are there at once.
  await page.click('#tab-logs');
  await page.waitForSelector('#panel-logs:not([hidden])');
  await page.click('#tab-details');
  assert.ok(await inked(page, { x: 44, y: 0, w: 2000, h: 175 }, [43, 89, 195]) > 20, 'the CPU history was lost');

  // A sandbox whose main process printed nothing: the log view says so.
  await page.click(`li[data-id="${quiet.id}"] a`);
  await page.click('#tab-logs');
  await page.waitForFunction(() => /No output from the main process yet/.test(document.querySelector('#logs').textContent));
  await shot(page, '72-empty-log');
  await done(page);
});

test('no sideways scrolling at 380 px, on every page', async () => {
  const sb = await createSandbox({ name: 'ui-narrow-with-a-rather-long-name-that-must-wrap', ports: [8080], labels: ['a-long-label-that-goes-on-and-on'] });
  await putFile(sb.id, 'a/rather/deep/path/with-a-long-file-name-for-the-narrow-screen.txt', 'narrow\n');
  const page = await signedInPage({ width: 380, height: 800 });
  await page.waitForSelector(`li[data-id="${sb.id}"]`);
  await assertNoOverflow(page, 'the list');
  await shot(page, '11-narrow');
  const views = [
    ['#/new', '#page-new:not([hidden])'],
    [`#/sandbox/${sb.id}/commands`, '#commands-pane:not([hidden])'],
    [`#/sandbox/${sb.id}/terminal`, '#panel-console:not([hidden])'],
    [`#/sandbox/${sb.id}/files/workspace/a/rather/deep/path`, '#file-entries'],
    [`#/sandbox/${sb.id}/files/workspace/a/rather/deep/path/with-a-long-file-name-for-the-narrow-screen.txt`, '#file-editor'],
    [`#/sandbox/${sb.id}/details`, '#ports li[data-port]'],
    [`#/sandbox/${sb.id}/logs`, '#logs span'],
    [`#/sandbox/${sb.id}/snapshots`, '#sandbox-snapshots p'],
    ['#/snapshots', '#snapshots-list *'],
    ['#/volumes', '#volumes-list table'],
    ['#/admin/accounts', '#accounts-list table'],
    ['#/admin/teams', '#teams-list *'],
  ];
  for (const [hash, ready] of views) {
    await page.goto(`${new URL(page.url()).origin}/${hash}`);
    await page.waitForSelector(ready, { timeout: 20000 });
    await page.waitForTimeout(150);
    await assertNoOverflow(page, hash);
    if (/\/(files|details)/.test(hash)) await shot(page, `73-narrow-${hash.includes('details') ? 'details' : hash.endsWith('.txt') ? 'file' : 'files'}`);
  }
  await shot(page, '74-narrow-admin');
  await done(page);
});
