// A new user's first hour with the dashboard, each step one that used to
// trip them up: a refused network change whose banner outlived a later
// success, a "Forked …" message that followed them everywhere, terminated
// sandboxes out of order, a fork shown by its internal snapshot image, a
// chart that started empty on every visit, a missing icon, an unexplained
// console setting and volumes shown by id.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { api, createSandbox, signedInPage, done, shot, eventually } from '../lib/harness.mjs';

const n = (name) => `#network-form [name=${name}]`;

/** The details' facts, read in one go (they are redrawn every two seconds). */
const facts = (page) => page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#facts dt')]
  .map((dt) => [dt.textContent, dt.nextElementSibling.textContent])));

async function running(page, name) {
  await page.waitForFunction((want) => document.querySelector('#detail-name')?.textContent === want
    && document.querySelector('#detail-status')?.textContent === 'RUNNING', name, { timeout: 90000 });
}

test('a refused network change leaves no banner behind once a change is applied', async () => {
  const sb = await createSandbox({ name: 'ui-fh-network' });
  try {
    const page = await signedInPage({ hash: `#/sandbox/${sb.id}/details` });
    await page.waitForSelector('#network-current:not(:empty)');
    await page.selectOption(n('network'), 'deny');
    await page.fill(n('egress'), 'bad..name');
    await page.click('#network-save');
    await page.waitForSelector('#notice.error:not([hidden])');
    assert.match(await page.textContent('#notice-text'), /Could not change the network policy of ui-fh-network: .*bad\.\.name/);

    await page.fill(n('egress'), 'example.com');
    await page.click('#network-save');
    await page.waitForFunction(() => /^Applied: All except example\.com\./.test(document.querySelector('#network-status').textContent));
    assert.ok(await page.isHidden('#notice'), 'the banner of the refused change is still shown');
    assert.deepEqual((await api('GET', `/api/v1/sandbox/${sb.id}`)).networkPolicy, { deny: ['example.com'] });
    // An unrelated message is not taken back by the next success.
    await page.fill('#expose-port', '');
    await page.click('#expose-form button[type=submit]');
    await page.waitForSelector('#notice.error:not([hidden])');
    await page.selectOption(n('network'), 'allow-all');
    await page.click('#network-save');
    await page.waitForFunction(() => /^Applied: All egress\./.test(document.querySelector('#network-status').textContent));
    assert.match(await page.textContent('#notice-text'), /Could not expose the port/);
    await done(page);
  } finally {
    await api('DELETE', `/api/v1/sandbox/${sb.id}`).catch(() => {});
  }
});

test('the "Forked" message goes with the user to the fork and no further; the fork says what it is a fork of', async () => {
  const source = await createSandbox({ name: 'ui-fh-source' });
  let forkId = null;
  try {
    const page = await signedInPage({ hash: `#/sandbox/${source.id}/details` });
    await page.waitForSelector('#btn-fork:enabled');
    await page.click('#btn-fork');
    await page.fill('#prompt-input', 'ui-fh-fork');
    await page.click('#prompt-confirm');
    await running(page, 'ui-fh-fork');
    forkId = /#\/sandbox\/([a-z0-9]+)/.exec(page.url())[1];
    assert.notEqual(forkId, source.id);
    await page.waitForSelector('#notice:not([hidden])');
    assert.equal(await page.textContent('#notice-text'), 'Forked ui-fh-source into ui-fh-fork.');

    // Where it came from, in words, not the snapshot image it runs.
    await page.waitForFunction(() => /fork of ui-fh-source/.test(document.querySelector('#detail-sub').textContent));
    assert.doesNotMatch(await page.textContent('#detail-sub'), /stockade-snapshot/);
    // Another tab of the fork: the message stays.
    await page.click('#tab-details');
    await page.waitForFunction(() => /^fork of ui-fh-source$/.test([...document.querySelectorAll('#facts dt')]
      .find((d) => d.textContent === 'Image')?.nextElementSibling.textContent || ''));
    assert.ok(await page.isVisible('#notice'));
    await shot(page, 'firsthour-01-fork');

    // Another page: the message is gone, and does not come back.
    await page.click('#nav-snapshots');
    await page.waitForSelector('#page-snapshots:not([hidden])');
    assert.ok(await page.isHidden('#notice'), 'the fork\'s message followed the user to the snapshots page');
    await page.click(`#sandbox-list li[data-id="${source.id}"] a`);
    await page.waitForFunction((id) => document.querySelector('#detail-sub').textContent.startsWith(id), source.id);
    assert.ok(await page.isHidden('#notice'));
    await done(page);
  } finally {
    if (forkId) await api('DELETE', `/api/v1/sandbox/${forkId}`).catch(() => {});
    await api('DELETE', `/api/v1/sandbox/${source.id}`).catch(() => {});
  }
});

test('a sandbox made from a snapshot names the snapshot and its sandbox', async () => {
  const source = await createSandbox({ name: 'ui-fh-snapped' });
  const snap = await api('POST', `/api/v1/sandbox/${source.id}/snapshots`, { name: 'fh-before' });
  let restored = null;
  try {
    await eventually(async () => (await api('GET', `/api/v1/snapshots/${snap.id}`)).status === 'READY', { timeout: 60000, what: 'the snapshot' });
    restored = await createSandbox({ name: 'ui-fh-restored', source: { type: 'snapshot', snapshotId: snap.id } });
    assert.equal(restored.dockerImage, `stockade-snapshot:${snap.id}`);
    const page = await signedInPage({ hash: `#/sandbox/${restored.id}/details` });
    await page.waitForFunction(() => / · snapshot fh-before of ui-fh-snapped · /.test(document.querySelector('#detail-sub').textContent));
    await page.waitForSelector('#facts dd[data-fact="Image"]');
    assert.equal((await facts(page)).Image, 'snapshot fh-before of ui-fh-snapped');
    assert.doesNotMatch(await page.textContent('#page-sandbox'), /stockade-snapshot:/);
    await done(page);
  } finally {
    if (restored) await api('DELETE', `/api/v1/sandbox/${restored.id}`).catch(() => {});
    await api('DELETE', `/api/v1/sandbox/${source.id}`).catch(() => {});
    await api('DELETE', `/api/v1/snapshots/${snap.id}`).catch(() => {});
  }
});

test('terminated sandboxes are listed by when they ended, the latest first', async () => {
  // Made in the order a, b, c (the API lists them c, b, a); ended b, c, a.
  const a = await createSandbox({ name: 'ui-fh-ended-a' });
  const b = await createSandbox({ name: 'ui-fh-ended-b' });
  const c = await createSandbox({ name: 'ui-fh-ended-c' });
  for (const sb of [b, c, a]) {
    await api('DELETE', `/api/v1/sandbox/${sb.id}`);
    await new Promise((r) => setTimeout(r, 1100));
  }
  const ended = await api('GET', '/api/v1/sandbox?is_active=false&per_page=1000');
  const mine = ended.sandboxes.filter((s) => [a.id, b.id, c.id].includes(s.id));
  assert.deepEqual(mine.map((s) => s.name), ['ui-fh-ended-c', 'ui-fh-ended-b', 'ui-fh-ended-a'], 'the API\'s own order changed');

  const page = await signedInPage({ hash: '#/?show=terminated' });
  const order = () => page.evaluate((ids) => [...document.querySelectorAll('#sandbox-list li[data-id]')]
    .map((li) => li.getAttribute('data-id')).filter((id) => ids.includes(id)), [a.id, b.id, c.id]);
  await eventually(async () => (await order()).length === 3, { what: 'the three terminated sandboxes in the list' });
  assert.deepEqual(await order(), [a.id, c.id, b.id]);
  assert.match(await page.textContent(`#sandbox-list li[data-id="${a.id}"] .sb-meta`), /terminated \d+s ago/);
  // Still so after the list refreshes, and after a visit to one of them.
  await page.waitForTimeout(3500);
  assert.deepEqual(await order(), [a.id, c.id, b.id]);
  await page.click(`#sandbox-list li[data-id="${b.id}"] a`);
  await page.waitForSelector('#terminated-banner:not([hidden])');
  assert.deepEqual(await order(), [a.id, c.id, b.id]);
  await shot(page, 'firsthour-02-terminated');
  await done(page);
});

/** CPU-coloured pixels of the chart left of `right` CSS pixels from its right edge. */
function cpuInkOlderThan(right) {
  const c = document.getElementById('chart');
  if (!c || !c.clientWidth) return 0;
  const scale = c.width / c.clientWidth;
  const w = Math.max(1, Math.round((c.clientWidth - 44 - right) * scale));
  const data = c.getContext('2d').getImageData(Math.round(44 * scale), 0, w, Math.round(175 * scale)).data;
  let ink = 0;
  for (let i = 0; i < data.length; i += 4) {
    if (data[i + 3] >= 128 && Math.abs(data[i] - 43) < 40 && Math.abs(data[i + 1] - 89) < 40 && Math.abs(data[i + 2] - 195) < 40) ink++;
  }
  return ink;
}

test('the CPU and memory chart shows the last minutes as soon as the details open', async () => {
  // A quarter of a core kept busy: the CPU line runs along the top.
  const sb = await createSandbox({ name: 'ui-fh-chart', cpuCores: 0.25, memoryGB: 0.5, startCommand: 'while true; do :; done' });
  try {
    // Someone watched it a while ago (another tab, the CLI): the server measured it.
    const began = Date.now();
    let samples = [];
    while (Date.now() - began < 60000) {
      await api('GET', `/api/v1/sandbox/${sb.id}`);
      samples = (await api('GET', `/api/v1/sandbox/${sb.id}/usage/history`)).samples;
      if (samples.length >= 4 && Date.parse(samples.at(-1).at) - Date.parse(samples[0].at) >= 20000) break;
      await new Promise((r) => setTimeout(r, 1000));
    }
    assert.ok(Date.parse(samples.at(-1).at) - Date.parse(samples[0].at) >= 20000, `too little history: ${JSON.stringify(samples)}`);

    // A fresh page: its own refreshes would reach back two seconds at first.
    const page = await signedInPage({ hash: `#/sandbox/${sb.id}/details` });
    await page.waitForFunction(() => /CPU, % of 0\.25 cores: [\d.]+ %/.test(document.querySelector('#chart-legend').textContent), null, { timeout: 20000 });
    // On a one-minute axis some 650 px wide, 120 px is about eleven seconds:
    // more than the page could have measured itself by then.
    await page.waitForFunction(cpuInkOlderThan, 120, { timeout: 2500 }).catch(() => {
      throw new Error('the chart did not show the measured history at once');
    });
    await shot(page, 'firsthour-03-chart');
    await done(page);
  } finally {
    await api('DELETE', `/api/v1/sandbox/${sb.id}`).catch(() => {});
  }
});

test('the dashboard has an icon and asks for nothing that is not there', async () => {
  const missing = [];
  const page = await signedInPage({
    setup: (p) => p.on('response', (r) => { if (r.status() === 404) missing.push(r.url()); }),
  });
  await page.waitForSelector('#my-quota:not([hidden])');
  await page.waitForTimeout(1000);
  const icon = await page.getAttribute('link[rel=icon]', 'href');
  assert.match(icon, /^data:image\/svg\+xml,/);
  // The icon is a picture the browser can draw.
  const drawn = await page.evaluate((href) => new Promise((resolve) => {
    const img = new Image();
    img.onload = () => resolve(img.naturalWidth > 0);
    img.onerror = () => resolve(false);
    img.src = href;
  }), icon);
  assert.ok(drawn, 'the icon does not load as an image');
  assert.deepEqual(missing, [], 'the page asked for something the server does not have');
  assert.ok(!missing.some((u) => u.endsWith('/favicon.ico')));
  await done(page);
});

test('the console command setting says what {message} does, and does it', async () => {
  const sb = await createSandbox({ name: 'ui-fh-console' });
  try {
    const page = await signedInPage({ hash: `#/sandbox/${sb.id}/commands` });
    await page.waitForSelector('#commands-pane:not([hidden])');
    assert.equal(await page.textContent('#agent-settings summary'), 'Console command: each message runs as a shell command');
    await page.click('#agent-settings summary');
    await page.waitForSelector('#agent-help', { state: 'visible' });
    // The input is described by the help text, which says what the placeholder does.
    assert.equal(await page.getAttribute('#agent-command', 'aria-describedby'), 'agent-help');
    const help = await page.textContent('#agent-help');
    assert.match(help, /\{message\} is a placeholder, replaced by your message, quoted for the shell/);
    assert.match(help, /Left empty, what you type runs as a shell command/);
    assert.match(await page.getAttribute('#agent-command', 'title'), /\{message\} marks where the message goes/);
    await shot(page, 'firsthour-04-console-setting');

    // As the help says: the message, quoted, where {message} stands.
    await page.fill('#agent-command', 'printf "got<%s>\\n" {message}');
    await page.press('#agent-command', 'Tab');
    assert.equal(await page.textContent('#agent-summary'), 'each message runs as printf "got<%s>\\n" {message}');
    await page.waitForFunction(() => !document.querySelector('#console-input').disabled);
    await page.fill('#console-input', 'it\'s $HOME; ok');
    await page.press('#console-input', 'Enter');
    await page.waitForFunction(() => /exit code/.test(document.querySelector('.msg .exit')?.textContent || ''), null, { timeout: 30000 });
    assert.equal(await page.textContent('.msg .stdout'), 'got<it\'s $HOME; ok>\n');
    await done(page);
  } finally {
    await api('DELETE', `/api/v1/sandbox/${sb.id}`).catch(() => {});
  }
});

test('volumes are shown by their sandbox\'s name, the id beside it', async () => {
  const live = await createSandbox({ name: 'ui-fh-volume-live' });
  const kept = await createSandbox({ name: 'ui-fh-volume-kept' });
  try {
    await api('DELETE', `/api/v1/sandbox/${kept.id}?preserveVolume=true`);
    const page = await signedInPage({ hash: '#/volumes' });
    const cell = (id) => `#volumes-list tr[data-volume="agent-sandbox-${id}"] td[data-sandbox]`;
    await page.waitForSelector(cell(live.id));
    assert.equal(await page.textContent(`${cell(live.id)} a`), 'ui-fh-volume-live');
    assert.equal(await page.textContent(`${cell(live.id)} .muted`), `${live.id} · RUNNING`);
    // The orphaned volume of a deleted sandbox: its name too, from the terminated ones.
    await page.waitForSelector(cell(kept.id));
    assert.match(await page.textContent(cell(kept.id)), new RegExp(`^ui-fh-volume-kept${kept.id} · TERMINATED$`));
    assert.equal(await page.textContent('#volumes-list thead th'), 'Sandbox');
    await shot(page, 'firsthour-05-volumes');
    await done(page);
  } finally {
    await api('DELETE', `/api/v1/sandbox/${live.id}`).catch(() => {});
    await api('DELETE', `/api/v1/volumes/agent-sandbox-${kept.id}`).catch(() => {});
  }
});
