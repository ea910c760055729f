// What the API can do, from the dashboard: the full create form with a
// source (an uploaded local archive), snapshots (take, list, start a sandbox
// from one, delete), fork, volumes with orphans and their cleanup, the
// terminated filter, and the admin's accounts and teams.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { api, raw, createSandbox, signedInPage, done, shot, eventually } from '../lib/harness.mjs';

async function content(id, p) {
  const resp = await raw('GET', `/api/v1/sandbox/${id}/files?path=${encodeURIComponent(p)}`);
  return resp.ok ? resp.text() : null;
}

async function waitRunning(page, name) {
  await page.waitForFunction((n) => document.querySelector('#detail-name')?.textContent === n
    && document.querySelector('#detail-status')?.textContent === 'RUNNING', name, { timeout: 90000 });
  const id = /#\/sandbox\/([a-z0-9]+)/.exec(page.url())[1];
  return id;
}

test('create with every setting and a local archive as the source', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'stockade-ui-archive-'));
  const tree = path.join(dir, 'project');
  mkdirSync(path.join(tree, 'sub'), { recursive: true });
  writeFileSync(path.join(tree, 'hello.txt'), 'from the archive\n');
  writeFileSync(path.join(tree, 'sub', 'inner.txt'), 'inner\n');
  const archive = path.join(dir, 'project.tar.gz');
  execFileSync('tar', ['-C', tree, '-czf', archive, '.']);

  const page = await signedInPage({ hash: '#/new' });
  const f = (name) => `#create-form [name=${name}]`;
  await page.fill(f('name'), 'ui-archive');
  await page.fill(f('cpu'), '0.5');
  await page.fill(f('memory'), '0.25');
  await page.fill(f('disk'), '2');
  await page.fill(f('timeout'), '45');
  await page.uncheck(f('persistent'));
  await page.selectOption(f('network'), 'deny-all');
  await page.fill(f('env'), 'GREETING=hello there\nMODE=test');
  await page.fill(f('labels'), 'ui, archive');
  await page.fill(f('tags'), 'team=dash\nkind=test');
  await page.fill(f('ports'), '3000, 8080');
  await page.check('#create-form input[name=source][value=upload]');
  await page.setInputFiles(f('archive'), archive);
  await shot(page, '50-create-form');
  await page.click('#create-submit');
  await page.waitForSelector('#create-status.loading');
  const id = await waitRunning(page, 'ui-archive');
  rmSync(dir, { recursive: true, force: true });

  const sb = await api('GET', `/api/v1/sandbox/${id}`);
  assert.equal(sb.cpuCores, 0.5);
  assert.equal(sb.memoryGB, 0.25);
  assert.equal(sb.diskSizeGB, 2);
  assert.equal(sb.timeoutMinutes, 45);
  assert.equal(sb.persistent, false);
  assert.equal(sb.networkAccess, false);
  assert.equal(sb.networkPolicy, 'deny-all');
  assert.deepEqual(sb.environmentVars, { GREETING: 'hello there', MODE: 'test' });
  assert.deepEqual(sb.labels.sort(), ['archive', 'ui']);
  assert.deepEqual(sb.tags, { kind: 'test', team: 'dash' });
  assert.deepEqual(sb.ports, [3000, 8080]);
  assert.equal(await content(id, 'hello.txt'), 'from the archive\n');
  assert.equal(await content(id, 'sub/inner.txt'), 'inner\n');
  // The header shows resources as entered.
  assert.match(await page.textContent('#detail-sub'), /0\.5 cores · 0\.25 GB/);
  await page.click('#tab-files');
  await page.waitForSelector('#file-entries tr[data-path="/workspace/hello.txt"]');
  await shot(page, '51-created-from-archive');
  await done(page);
});

test('snapshots: take one, start a sandbox from it, delete it; fork a sandbox', async () => {
  const source = await createSandbox({ name: 'ui-snap-source' });
  await raw('PUT', `/api/v1/sandbox/${source.id}/files?path=kept.txt`, { body: 'kept in the snapshot\n' });
  const page = await signedInPage({ hash: `#/sandbox/${source.id}/snapshots` });
  await page.waitForSelector('#sandbox-snapshots p');
  assert.match(await page.textContent('#sandbox-snapshots'), /No snapshots of this sandbox yet/);
  await page.waitForSelector('#snapshot-take:enabled');
  await page.click('#snapshot-take');
  await page.fill('#prompt-input', 'ui-snap');
  await page.click('#prompt-confirm');
  const row = '#sandbox-snapshots tr[data-snapshot]';
  await page.waitForSelector(row, { timeout: 60000 });
  await page.waitForSelector(`${row} .chip.READY`, { timeout: 90000 });
  await shot(page, '52-snapshots');
  const snapId = await page.getAttribute(row, 'data-snapshot');

  // New sandbox from it: the create form opens with the snapshot chosen.
  await page.click(`${row} a:text("New sandbox from it")`);
  await page.waitForSelector('#page-new:not([hidden])');
  assert.ok(await page.isChecked('#create-form input[name=source][value=snapshot]'));
  await page.waitForFunction((s) => document.querySelector('#create-form [name=snapshot]').value === s, snapId);
  await page.fill('#create-form [name=name]', 'ui-from-snap');
  await page.click('#create-submit');
  const restored = await waitRunning(page, 'ui-from-snap');
  assert.equal(await content(restored, 'kept.txt'), 'kept in the snapshot\n');

  // Fork: a new sandbox with the source's files; the source keeps running.
  await page.click(`li[data-id="${source.id}"] a`);
  await page.waitForSelector('#btn-fork:enabled');
  assert.equal(await page.textContent('#detail-name'), 'ui-snap-source');
  await page.click('#btn-fork');
  await page.fill('#prompt-input', 'ui-forked');
  await page.click('#prompt-confirm');
  const forked = await waitRunning(page, 'ui-forked');
  assert.notEqual(forked, source.id);
  assert.equal(await content(forked, 'kept.txt'), 'kept in the snapshot\n');
  assert.equal((await api('GET', `/api/v1/sandbox/${source.id}`)).status, 'RUNNING');

  // The snapshots page lists it with its source; delete it there.
  await page.click('#nav-snapshots');
  await page.waitForSelector(`#snapshots-list tr[data-snapshot="${snapId}"]`);
  assert.match(await page.textContent(`#snapshots-list tr[data-snapshot="${snapId}"]`), new RegExp(source.id));
  await page.click(`#snapshots-list tr[data-snapshot="${snapId}"] button:text("Delete")`);
  await page.click('#prompt-confirm');
  await eventually(async () => {
    const r = await raw('GET', `/api/v1/snapshots/${snapId}`);
    if (r.status === 404) return true;
    const s = await r.json();
    return s.status === 'DELETING' || s.status === 'DELETED';
  }, { what: 'the snapshot to be deleted' });
  await page.waitForFunction((s) => {
    const r = document.querySelector(`#snapshots-list tr[data-snapshot="${s}"]`);
    return !r || /DELETING/.test(r.textContent);
  }, snapId);
  await done(page);
});

test('volumes: sizes, orphans and their cleanup', async () => {
  const sb = await createSandbox({ name: 'ui-orphan-maker' });
  await raw('PUT', `/api/v1/sandbox/${sb.id}/files?path=data.bin`, { body: Buffer.alloc(200000, 1) });
  await api('DELETE', `/api/v1/sandbox/${sb.id}?preserveVolume=true`);
  const live = await createSandbox({ name: 'ui-volume-live' });
  const page = await signedInPage({ hash: '#/volumes' });
  const orphanRow = `#volumes-list tr[data-volume="agent-sandbox-${sb.id}"]`;
  await page.waitForSelector(orphanRow);
  assert.match(await page.textContent(orphanRow), /orphaned/);
  assert.match(await page.textContent(`#volumes-list tr[data-volume="agent-sandbox-${live.id}"]`), /in use/);
  assert.match(await page.textContent('#volumes-summary'), /\d+ volumes?, .* in all; \d+ orphaned/);
  await page.check('#volumes-orphans');
  await page.waitForSelector(`#volumes-list tr[data-volume="agent-sandbox-${live.id}"]`, { state: 'detached' });
  assert.ok(await page.$(orphanRow));
  await shot(page, '53-volumes');
  await page.click('#volumes-cleanup');
  await page.waitForSelector('#prompt-dialog[open]');
  assert.match(await page.textContent('#prompt-title'), /Remove \d+ orphaned volume/);
  await page.click('#prompt-confirm');
  await page.waitForFunction(() => /Removed \d+ volumes? and freed/.test(document.querySelector('#notice').textContent));
  await page.waitForSelector(orphanRow, { state: 'detached' });
  assert.equal((await api('GET', '/api/v1/volumes/orphaned')).total, 0);
  await done(page);
});

test('terminated sandboxes are a filter of the list', async () => {
  const sb = await createSandbox({ name: 'ui-gone' });
  await api('DELETE', `/api/v1/sandbox/${sb.id}`);
  const page = await signedInPage();
  await page.waitForSelector('#sandbox-list li');
  assert.equal(await page.$(`li[data-id="${sb.id}"]`), null);
  await page.selectOption('#list-filter', 'terminated');
  await page.waitForSelector(`li[data-id="${sb.id}"]`);
  assert.match(page.url(), /[?&]show=terminated/);
  assert.match(await page.textContent(`li[data-id="${sb.id}"]`), /TERMINATED/);
  await page.click(`li[data-id="${sb.id}"] a`);
  await page.waitForSelector('#terminated-banner:not([hidden])');
  assert.equal(await page.textContent('#detail-status'), 'TERMINATED');
  for (const b of ['#btn-start', '#btn-stop', '#btn-delete', '#btn-fork']) assert.ok(await page.isDisabled(b), `${b} is enabled`);
  await page.click('#tab-details');
  await page.waitForFunction(() => /Terminated/.test(document.querySelector('#facts').textContent));
  await shot(page, '54-terminated');
  await page.selectOption('#list-filter', 'active');
  await page.waitForSelector(`li[data-id="${sb.id}"]`, { state: 'detached' });
  await done(page);
});

test('admin: accounts (the token shown once) and teams with members', async () => {
  const page = await signedInPage({ hash: '#/admin/accounts' });
  await page.waitForSelector('#accounts-list tr[data-account]');
  const name = `ui-user-${Date.now().toString(36)}`;
  await page.fill('#account-form [name=name]', name);
  await page.click('#account-form button[type=submit]');
  await page.waitForSelector('#account-token:not([hidden]) #new-token');
  const newToken = (await page.textContent('#new-token')).trim();
  const me = await api('GET', '/api/v1/me', undefined, { as: newToken });
  assert.equal(me.account.name, name);
  assert.equal(me.account.isAdmin, false);
  await page.waitForSelector(`#accounts-list tr:has-text("${name}")`);
  await shot(page, '55-account-token');
  await page.click('#account-token button:text("Done, hide it")');
  assert.ok(await page.isHidden('#account-token'));
  assert.ok(!(await page.content()).includes(newToken), 'the token is still in the page');

  await page.click('#admin-tab-teams');
  await page.waitForSelector('#admin-teams:not([hidden])');
  const team = `ui-team-${Date.now().toString(36)}`;
  await page.fill('#team-form [name=name]', team);
  await page.click('#team-form button[type=submit]');
  const card = `#teams-list section:has(h3:text("${team}"))`;
  await page.waitForSelector(card);
  await page.selectOption(`${card} select`, me.account.id);
  await page.click(`${card} button:text("Add member")`);
  await page.waitForSelector(`${card} li[data-member="${me.account.id}"]`);
  const teamId = await page.getAttribute(card, 'data-team');
  assert.deepEqual((await api('GET', `/api/v1/teams/${teamId}`)).members.map((m) => m.id), [me.account.id]);
  await shot(page, '56-teams');
  await page.click(`${card} li[data-member="${me.account.id}"] button`);
  await page.click('#prompt-confirm');
  await page.waitForSelector(`${card} li[data-member="${me.account.id}"]`, { state: 'detached' });
  assert.deepEqual((await api('GET', `/api/v1/teams/${teamId}`)).members, []);

  // A team name the server refuses: its message in a banner.
  await page.fill('#team-form [name=name]', 'not a valid name!');
  await page.click('#team-form button[type=submit]');
  await page.waitForSelector('#notice.error:not([hidden])');
  assert.match(await page.textContent('#notice'), /Could not create the team/);
  await done(page);
});
