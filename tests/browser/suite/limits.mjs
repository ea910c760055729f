// The settings the API gained, from the dashboard: the egress policy on
// create and changed live, disk use against its limits,
// account quotas for administrators and for the account itself, refusals of
// a quota or a full host as banners, and `/health`
// warnings for administrators.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { api, createSandbox, putFile, signedInPage, done, shot, assertNoOverflow, env } from '../lib/harness.mjs';

async function waitRunning(page, name) {
  await page.waitForFunction((n) => document.querySelector('#detail-name')?.textContent === n
    && document.querySelector('#detail-status')?.textContent === 'RUNNING', name, { timeout: 90000 });
  return /#\/sandbox\/([a-z0-9]+)/.exec(page.url())[1];
}

/** The details' facts, read in one go (they are redrawn every two seconds). */
function facts(page) {
  return page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#facts dt')]
    .map((dt) => [dt.textContent, dt.nextElementSibling.textContent])));
}

async function errorBanner(page, pattern) {
  await page.waitForFunction((src) => {
    const n = document.querySelector('#notice');
    return n && !n.hidden && n.classList.contains('error') && new RegExp(src).test(n.textContent);
  }, pattern.source, { timeout: 30000 });
  return page.textContent('#notice-text');
}

test('egress policy: chosen on create, a bad entry named in a banner, changed live in the details', async () => {
  const page = await signedInPage({ hash: '#/new' });
  const f = (name) => `#create-form [name=${name}]`;
  await page.fill(f('name'), 'ui-egress');
  assert.ok(await page.isHidden(f('egress')), 'the entries show only for a list');
  await page.selectOption(f('network'), 'allow');
  assert.ok(await page.isVisible(f('egress')));
  assert.ok(await page.isVisible(f('egressExcept')));
  // An empty list is refused before anything is sent.
  await page.click('#create-submit');
  await page.waitForFunction(() => /networkPolicy\.allow: enter at least one destination/.test(document.querySelector('#create-status').textContent));
  assert.equal(await page.getAttribute(f('egress'), 'aria-invalid'), 'true');
  // An entry the API refuses: its message, naming the entry, in a banner.
  await page.fill(f('egress'), 'pypi.org\nnot a host!');
  await page.click('#create-submit');
  const text = await errorBanner(page, /networkPolicy\.allow\[1\]/);
  assert.match(text, /Could not create the sandbox: .*networkPolicy\.allow\[1\]: 'not a host!'/);
  assert.equal(await page.getAttribute(f('egress'), 'aria-invalid'), 'true');
  await shot(page, '80-egress-bad-entry');
  assert.equal((await api('GET', '/api/v1/sandbox?name=ui-egress')).sandboxes.length, 0);

  await page.fill(f('egress'), 'pypi.org\n*.pythonhosted.org\n\n198.51.100.0/24:5432');
  await page.fill(f('egressExcept'), '198.51.100.3');
  await page.click('#create-submit');
  const id = await waitRunning(page, 'ui-egress');
  assert.ok(await page.isHidden('#notice'), 'the banner of the refused create is gone');
  const sb = await api('GET', `/api/v1/sandbox/${id}`);
  assert.deepEqual(sb.networkPolicy.allow, ['pypi.org', '*.pythonhosted.org', '198.51.100.0/24:5432']);
  assert.equal(sb.networkPolicy.deny.length, 1);
  assert.match(sb.networkPolicy.deny[0], /^198\.51\.100\.3/);

  // The details show it, with the same control filled in.
  await page.click('#tab-details');
  await page.waitForFunction(() => /^Now: Only pypi\.org, \*\.pythonhosted\.org, 198\.51\.100\.0\/24:5432 \(except 198\.51\.100\.3/.test(document.querySelector('#network-current').textContent));
  assert.match((await facts(page)).Network, /^Only pypi\.org/);
  const n = (name) => `#network-form [name=${name}]`;
  assert.equal(await page.inputValue(n('network')), 'allow');
  assert.equal(await page.inputValue(n('egress')), 'pypi.org\n*.pythonhosted.org\n198.51.100.0/24:5432');
  await shot(page, '81-egress-details');

  // Changed live: all but one name.
  await page.selectOption(n('network'), 'deny');
  assert.ok(await page.isHidden(n('egressExcept')));
  await page.fill(n('egress'), 'example.com');
  await page.click('#network-save');
  await page.waitForFunction(() => /^Applied: All except example\.com\. networkPolicy: applied to the running sandbox's traffic now/.test(document.querySelector('#network-status').textContent));
  assert.deepEqual((await api('GET', `/api/v1/sandbox/${id}`)).networkPolicy, { deny: ['example.com'] });
  await page.waitForFunction(() => document.querySelector('#network-current').textContent === 'Now: All except example.com.');
  // The form keeps the applied policy while the details refresh.
  await page.waitForTimeout(2500);
  assert.equal(await page.inputValue(n('network')), 'deny');

  // A refused entry: a banner naming it; nothing changes.
  await page.fill(n('egress'), 'example.com\nbad..name');
  await page.click('#network-save');
  assert.match(await errorBanner(page, /networkPolicy\.deny\[1\]/), /Could not change the network policy of ui-egress: .*'bad\.\.name'/);
  assert.equal(await page.getAttribute(n('egress'), 'aria-invalid'), 'true');
  assert.deepEqual((await api('GET', `/api/v1/sandbox/${id}`)).networkPolicy, { deny: ['example.com'] });

  // No egress at all.
  await page.selectOption(n('network'), 'deny-all');
  await page.click('#network-save');
  await page.waitForFunction(() => /^Applied: No egress\./.test(document.querySelector('#network-status').textContent));
  const after = await api('GET', `/api/v1/sandbox/${id}`);
  assert.equal(after.networkPolicy, 'deny-all');
  assert.equal(after.networkAccess, false);
  await page.waitForFunction(() => /^No egress/.test([...document.querySelectorAll('#facts dt')].find((d) => d.textContent === 'Network')?.nextElementSibling.textContent || ''));
  assert.ok(!(await page.isVisible(n('egress'))));
  await done(page);
});

test('details: disk use against its limit, or that the limit is not enforced on this host', async () => {
  const sb = await createSandbox({ name: 'ui-disk', diskSizeGB: 2 });
  await putFile(sb.id, 'blob.bin', Buffer.alloc(300 * 1024, 7));
  const page = await signedInPage({ hash: `#/sandbox/${sb.id}/details` });
  await page.waitForFunction(() => [...document.querySelectorAll('#facts dt')].some((d) => d.textContent === 'Disk, /workspace'), null, { timeout: 30000 });
  const details = await api('GET', `/api/v1/sandbox/${sb.id}`);
  const health = await (await fetch(`${env.base}/api/v1/health`)).json();
  const areas = [['Disk, /workspace', 'workspace'], ['Disk, root filesystem', 'rootFs']];
  for (const [label, key] of areas) {
    const limit = details.disk[`${key}LimitBytes`];
    if (limit != null) {
      assert.equal(limit, 2 * 1024 ** 3);
      await page.waitForFunction((l) => / of 2 GB$/.test([...document.querySelectorAll('#facts dt')].find((d) => d.textContent === l).nextElementSibling.textContent), label);
    } else {
      // The reason is the one /health gives, once it has loaded.
      const reason = health.disk && health.disk[key] && health.disk[key].reason;
      await page.waitForFunction(([l, r]) => {
        const t = [...document.querySelectorAll('#facts dt')].find((d) => d.textContent === l).nextElementSibling.textContent;
        return /the 2 GB limit is not enforced on this host/.test(t) && (!r || t.includes(r));
      }, [label, reason || null]);
    }
  }
  assert.equal((await facts(page)).Disk, undefined, 'the measured areas replace the plain size');
  await shot(page, '82-disk');
  await done(page);

  // Where the host enforces the limits: use against them, in the units
  // diskSizeGB is entered in (figures put into the details answer).
  const enforced = await signedInPage({
    hash: `#/sandbox/${sb.id}/details`,
    setup: (p) => p.route((url) => url.pathname === `/api/v1/sandbox/${sb.id}`, async (route) => {
      const resp = await route.fetch();
      const body = await resp.json();
      body.disk = { workspaceBytes: 512 * 1024 ** 2, workspaceLimitBytes: 2 * 1024 ** 3, rootFsBytes: 1.5 * 1024 ** 2, rootFsLimitBytes: 2 * 1024 ** 3 };
      await route.fulfill({ response: resp, json: body });
    }),
  });
  await enforced.waitForFunction(() => /512 MB of 2 GB/.test(document.querySelector('#facts').textContent));
  const f = await facts(enforced);
  assert.equal(f['Disk, /workspace'], '512 MB of 2 GB');
  assert.equal(f['Disk, root filesystem'], '1.5 MB of 2 GB');
  await done(enforced);
});

test('quotas: an admin sees and edits each account\'s; the account sees its own; over quota is a banner', async () => {
  const made = await api('POST', '/api/v1/accounts', { name: `ui-quota-${Date.now().toString(36)}` });
  const user = made.account;
  const admin = await signedInPage({ hash: '#/admin/accounts' });
  const row = `#accounts-list tr[data-account="${user.id}"]`;
  await admin.waitForSelector(`${row} td[data-quota=sandboxes]`);
  const before = await api('GET', `/api/v1/accounts/${user.id}/quota`);
  const expected = (used, limit) => (limit == null ? `${used} (no limit)` : `${used} of ${limit}`);
  assert.equal(await admin.textContent(`${row} td[data-quota=sandboxes]`), expected(0, before.quota.sandboxes));
  await admin.click(`${row} button:text("Edit quota")`);
  await admin.waitForSelector('#quota-form:not([hidden])');
  assert.equal(await admin.textContent('#quota-title'), `Quota of ${user.name}`);
  const q = (name) => `#quota-form [name=${name}]`;
  for (const name of ['cpuCores', 'memoryGB', 'diskGB', 'snapshots', 'snapshotGB', 'uploads', 'uploadGB']) await admin.fill(q(name), '');
  // Refused in the form: a negative count, a fraction of a sandbox.
  await admin.fill(q('sandboxes'), '-1');
  await admin.click('#quota-save');
  await admin.waitForFunction(() => /^Not saved: sandboxes: must be at least 0/.test(document.querySelector('#quota-status').textContent));
  assert.equal(await admin.getAttribute(q('sandboxes'), 'aria-invalid'), 'true');
  await admin.fill(q('sandboxes'), '1.5');
  await admin.click('#quota-save');
  await admin.waitForFunction(() => /^Not saved: sandboxes: must be a whole number/.test(document.querySelector('#quota-status').textContent));
  // Refused by the server: its message, the field marked.
  await admin.fill(q('sandboxes'), '1');
  await admin.fill(q('cpuCores'), '5000000');
  await admin.click('#quota-save');
  await admin.waitForFunction(() => /^Not saved: .*cpuCores/.test(document.querySelector('#quota-status').textContent));
  assert.equal(await admin.getAttribute(q('cpuCores'), 'aria-invalid'), 'true');
  assert.equal(await admin.getAttribute(q('sandboxes'), 'aria-invalid'), null);
  // A fraction of a snapshot is refused in the form too.
  await admin.fill(q('cpuCores'), '');
  await admin.fill(q('snapshots'), '2.5');
  await admin.click('#quota-save');
  await admin.waitForFunction(() => /^Not saved: snapshots: must be a whole number/.test(document.querySelector('#quota-status').textContent));
  assert.equal(await admin.getAttribute(q('snapshots'), 'aria-invalid'), 'true');
  // One sandbox, three snapshots in at most 1.5 GB, uploads of at most
  // half a GB; the rest unlimited.
  await admin.fill(q('snapshots'), '3');
  await admin.fill(q('snapshotGB'), '1.5');
  await admin.fill(q('uploadGB'), '0.5');
  await admin.click('#quota-save');
  await admin.waitForFunction(() => /^Saved the quota of /.test(document.querySelector('#quota-status').textContent));
  assert.deepEqual((await api('GET', `/api/v1/accounts/${user.id}/quota`)).quota, {
    sandboxes: 1, cpuCores: null, memoryGB: null, diskGB: null,
    snapshots: 3, snapshotGB: 1.5, uploads: null, uploadGB: 0.5,
    volumes: null, volumeGB: null,
  });
  await admin.waitForFunction((r) => document.querySelector(`${r} td[data-quota=snapshots]`)?.textContent === '0 of 3; 0 of 1.5 GB', row);
  assert.equal(await admin.textContent(`${row} td[data-quota=uploads]`), '0 (no limit); 0 of 0.5 GB');
  await admin.waitForFunction((r) => document.querySelector(`${r} td[data-quota=sandboxes]`)?.textContent === '0 of 1', row);
  assert.equal(await admin.textContent(`${row} td[data-quota=cpuCores]`), '0 cores (no limit)');
  await shot(admin, '83-quota-editor');

  // The account itself: its quota on the home page, no admin section.
  const page = await signedInPage({ hash: '#/', as: made.token });
  await page.waitForSelector('#my-quota:not([hidden]) dd[data-quota=sandboxes]');
  assert.equal(await page.textContent('#my-quota dd[data-quota=sandboxes]'), '0 of 1');
  assert.match(await page.textContent('#my-quota dd[data-quota=memoryGB]'), /^0 GB \(no limit\)$/);
  assert.equal(await page.textContent('#my-quota dd[data-quota=snapshots]'), '0 of 3; 0 of 1.5 GB');
  assert.ok(await page.isHidden('#nav-admin'));
  assert.ok(await page.isHidden('#health-warnings'), 'server warnings are for administrators');

  // Two creates with a quota of one: the second is refused, in a banner.
  await page.goto(`${env.base}/#/new`);
  await page.waitForSelector('#page-new:not([hidden])');
  await page.fill('#create-form [name=name]', 'ui-quota-one');
  await page.click('#create-submit');
  const first = await waitRunning(page, 'ui-quota-one');
  await page.goto(`${env.base}/#/new`);
  await page.waitForSelector('#page-new:not([hidden])');
  await page.fill('#create-form [name=name]', 'ui-quota-two');
  await page.click('#create-submit');
  const refused = await errorBanner(page, /quota/i);
  assert.match(refused, /^Could not create the sandbox: /);
  assert.match(await page.textContent('#create-status'), /quota/i);
  await shot(page, '84-quota-exceeded');
  const mine = await api('GET', '/api/v1/sandbox', undefined, { as: made.token });
  assert.deepEqual(mine.sandboxes.map((s) => s.id), [first]);
  await page.goto(`${env.base}/#/`);
  await page.waitForFunction(() => document.querySelector('#my-quota dd[data-quota=sandboxes]')?.textContent === '1 of 1');
  assert.match(await page.textContent('#my-quota dd[data-quota=cpuCores]'), /^1 core \(no limit\)$/);

  // A start the quota refuses (half a core for a one-core sandbox): a banner.
  await api('POST', `/api/v1/sandbox/${first}/stop`, undefined, { as: made.token });
  await api('PUT', `/api/v1/accounts/${user.id}/quota`, { sandboxes: 1, cpuCores: 0.5 });
  await page.goto(`${env.base}/#/sandbox/${first}/details`);
  await page.waitForSelector('#btn-start:enabled');
  await page.click('#btn-start');
  assert.match(await errorBanner(page, /quota/i), /^Could not start ui-quota-one: /);
  assert.equal((await api('GET', `/api/v1/sandbox/${first}`, undefined, { as: made.token })).status, 'STOPPED');
  await api('DELETE', `/api/v1/sandbox/${first}`, undefined, { as: made.token });
  await done(page);

  // The editor fits a narrow screen.
  const narrow = await signedInPage({ width: 380, height: 800, hash: '#/admin/accounts' });
  await narrow.waitForSelector(`${row} button`);
  await narrow.click(`${row} button:text("Edit quota")`);
  await narrow.waitForSelector('#quota-form:not([hidden])');
  await assertNoOverflow(narrow, 'the quota editor');
  await shot(narrow, '85-narrow-quota');
  await done(narrow);
  await done(admin);
});

test('a full host: the API\'s insufficient_capacity message in a banner', async () => {
  const sb = await createSandbox({ name: 'ui-capacity' });
  await api('POST', `/api/v1/sandbox/${sb.id}/stop`);
  // The harness's server does not check capacity (its suites keep more
  // sandboxes than a test host has room for): the refusal is put in the
  // start's answer, as the server words it.
  const message = 'insufficient capacity on server local: 2 GB of memory asked, 1.5 GB of 15.6 GB free (memory overcommit 1)';
  const page = await signedInPage({
    hash: `#/sandbox/${sb.id}/details`,
    setup: (p) => p.route((url) => url.pathname === `/api/v1/sandbox/${sb.id}/start`, (route) => route.fulfill({
      status: 409, json: { error: { code: 'insufficient_capacity', message } },
    })),
  });
  await page.waitForSelector('#btn-start:enabled');
  await page.click('#btn-start');
  assert.equal(await errorBanner(page, /insufficient capacity/), `Could not start ui-capacity: ${message}`);
  await shot(page, '86-capacity');
  await done(page);
});

test('/health warnings are shown to administrators', async () => {
  const health = await (await fetch(`${env.base}/api/v1/health`)).json();
  const warnings = health.warnings || [];
  const page = await signedInPage();
  if (warnings.length) {
    await page.waitForSelector('#health-warnings:not([hidden])');
    assert.deepEqual(await page.$$eval('#health-warning-list li', (lis) => lis.map((li) => li.textContent)), warnings);
  } else {
    await page.waitForTimeout(1500);
    assert.ok(await page.isHidden('#health-warnings'));
  }
  await done(page);

  // Each warning the server gives is listed (here: the egress filter down).
  const egress = 'networkPolicy allow/deny lists cannot be enforced: the iptables command was not found';
  const disk = 'diskSizeGB is not enforced on this host: /workspace: no quota support';
  const routed = await signedInPage({
    setup: (p) => p.route((url) => url.pathname === '/api/v1/health', async (route) => {
      const resp = await route.fetch();
      const body = await resp.json();
      body.warnings = [egress, disk];
      await route.fulfill({ response: resp, json: body });
    }),
  });
  await routed.waitForSelector('#health-warnings:not([hidden])');
  // One line until opened, naming what each warning is about.
  assert.equal(await routed.textContent('#health-summary'),
    'This server needs attention: 2 warnings (networkPolicy allow/deny lists cannot be enforced; diskSizeGB is not enforced on this host)');
  assert.ok(await routed.isHidden('#health-warning-list li >> nth=0'));
  await routed.click('#health-summary');
  await routed.waitForSelector('#health-warning-list li', { state: 'visible' });
  assert.deepEqual(await routed.$$eval('#health-warning-list li', (lis) => lis.map((li) => li.textContent)), [egress, disk]);
  await shot(routed, '87-health-warnings');
  await done(routed);
});
