// Shared volumes from the dashboard: create one (and see refused names
// explained), fill it through its file browser (new folder, upload,
// download, rename, delete, breadcrumbs), mount it in a sandbox made with
// the create form and in one read-only, see the mounts in the sandbox's
// details and on the volume, find the uploaded file inside the sandbox, a
// symlink made there shown and not followed, the delete refused while
// sandboxes mount it, and the delete once they are gone; no sideways
// scrolling on a narrow screen.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { api, raw, createSandbox, signedInPage, done, shot, eventually, assertNoOverflow } from '../lib/harness.mjs';

const NAME = 'ui-shared';
const exec = (id, shell) => api('POST', `/api/v1/sandbox/${id}/exec`, { shell });

async function volumeContent(p) {
  const resp = await raw('GET', `/api/v1/shared-volumes/${NAME}/files/content?path=${encodeURIComponent(p)}`);
  return resp.ok ? resp.text() : null;
}

/** Waits for the file browser to show folder `dir` with its entries listed. */
async function folder(page, dir) {
  await page.waitForSelector(`#volume-files .file-head[data-dir="${dir}"]`);
  await page.waitForSelector('#volume-entries, #volume-status');
}

const row = (p) => `#volume-entries tr[data-path="${p}"]`;

async function confirm(page, answer) {
  if (answer !== undefined) await page.fill('#prompt-input', answer);
  await page.click('#prompt-confirm');
}

test('shared volumes: create, files, mounted by sandboxes, delete refused while mounted, then deleted', async () => {
  const made = { sandboxes: [] };
  try {
    const page = await signedInPage({ hash: '#/shared-volumes' });
    assert.equal(await page.getAttribute('#nav-shared-volumes', 'aria-current'), 'page');
    await page.waitForSelector('#shared-volumes-empty');

    // A name the server refuses is explained and its field marked.
    const form = (name) => `#shared-volume-form [name=${name}]`;
    await page.fill(form('name'), 'Not a name!');
    await page.click('#shared-volume-create');
    await page.waitForSelector('#shared-volume-status.error');
    assert.match(await page.textContent('#shared-volume-status'), /^Not created: .*invalid volume name 'Not a name!'/);
    assert.equal(await page.getAttribute(form('name'), 'aria-invalid'), 'true');

    await page.fill(form('name'), NAME);
    await page.click('#shared-volume-create');
    await page.waitForSelector(`#shared-volumes-table tr[data-volume="${NAME}"]`);
    assert.equal(await page.textContent('#shared-volume-status'), `Created volume ${NAME}.`);
    assert.equal(await page.getAttribute(form('name'), 'aria-invalid'), null);
    made.volume = (await api('GET', `/api/v1/shared-volumes/${NAME}`)).id;
    assert.match(await page.textContent(`tr[data-volume="${NAME}"] [data-mounts]`), /no sandbox/);
    // A second one of the same name: the server's conflict, shown.
    await page.fill(form('name'), NAME);
    await page.click('#shared-volume-create');
    await page.waitForFunction(() => /^Not created: .+/.test(document.querySelector('#shared-volume-status').textContent));
    assert.equal((await api('GET', '/api/v1/shared-volumes')).total, 1);
    await shot(page, 'volumes-01-list');

    // Its file browser: empty at first; a new folder, then into it.
    await page.click(`tr[data-volume="${NAME}"] a:text("${NAME}")`);
    await page.waitForFunction((n) => location.hash === `#/shared-volumes/${n}`, NAME);
    await folder(page, '/');
    assert.equal(await page.textContent('#shared-volume-name'), NAME);
    assert.match(await page.textContent('#volume-status'), /empty/);
    await page.click('#volume-mkdir');
    await confirm(page, 'docs');
    await page.waitForSelector(row('/docs'));
    await page.click(`${row('/docs')} a:text("docs/")`);
    await page.waitForFunction((n) => location.hash === `#/shared-volumes/${n}/files/docs`, NAME);
    await folder(page, '/docs');
    assert.deepEqual(await page.$$eval('#volume-crumbs li', (lis) => lis.map((li) => li.textContent)), [NAME, 'docs']);

    // Upload into the folder shown, then download it again.
    await page.setInputFiles('#volume-upload', { name: 'hello.txt', mimeType: 'text/plain', buffer: Buffer.from('hello from the volume\n') });
    await page.waitForSelector(row('/docs/hello.txt'));
    assert.equal(await volumeContent('/docs/hello.txt'), 'hello from the volume\n');
    const [download] = await Promise.all([page.waitForEvent('download'), page.click(`${row('/docs/hello.txt')} a:text("Download")`)]);
    assert.equal(download.suggestedFilename(), 'hello.txt');
    assert.equal(readFileSync(await download.path(), 'utf8'), 'hello from the volume\n');

    // Rename and delete.
    await page.setInputFiles('#volume-upload', { name: 'draft.txt', mimeType: 'text/plain', buffer: Buffer.from('draft\n') });
    await page.waitForSelector(row('/docs/draft.txt'));
    await page.click(`${row('/docs/draft.txt')} button:text("Rename")`);
    await confirm(page, 'final.txt');
    await page.waitForSelector(row('/docs/final.txt'));
    assert.equal(await volumeContent('/docs/final.txt'), 'draft\n');
    assert.equal(await volumeContent('/docs/draft.txt'), null);
    await page.click(`${row('/docs/final.txt')} button:text("Delete")`);
    await confirm(page);
    await page.waitForSelector(row('/docs/final.txt'), { state: 'detached' });
    assert.equal(await volumeContent('/docs/final.txt'), null);
    await shot(page, 'volumes-02-files');

    // The breadcrumbs lead back to the root.
    await page.click(`#volume-crumbs a:text("${NAME}")`);
    await folder(page, '/');
    await page.waitForSelector(row('/docs'));

    // A sandbox made with the create form mounts it. The volume's page
    // offers the form with a mount of it; removed, and added again by hand.
    await page.click(`#shared-volume-new-sandbox[href="#/new?volume=${NAME}"]`);
    await page.waitForFunction((n) => location.hash === `#/new?volume=${n}`, NAME);
    await page.waitForSelector('#mount-rows [data-mount]');
    assert.equal(await page.inputValue('#mount-rows [name=mountVolume]'), NAME);
    await page.click('#mount-rows button:text("Remove")');
    assert.equal(await page.$('#mount-rows [data-mount]'), null);
    await page.fill('#create-form input[name=name]', 'ui-mounter');
    await page.click('#mount-add');
    await page.selectOption('#mount-rows [name=mountVolume]', NAME);
    // A mount without a path is caught before the server sees it.
    await page.click('#create-submit');
    await page.waitForFunction(() => /volumeMounts\[0\]\.path: enter the absolute path/.test(document.querySelector('#create-status').textContent));
    assert.equal(await page.getAttribute('#mount-rows [name=mountPath]', 'aria-invalid'), 'true');
    await page.fill('#mount-rows [name=mountPath]', '/data');
    await shot(page, 'volumes-03-create-with-mount');
    await page.click('#create-submit');
    await page.waitForFunction(() => document.querySelector('#detail-name')?.textContent === 'ui-mounter'
      && document.querySelector('#detail-status')?.textContent === 'RUNNING', null, { timeout: 90000 });
    const writer = /#\/sandbox\/([a-z0-9]+)/.exec(page.url())[1];
    made.sandboxes.push(writer);
    assert.deepEqual((await api('GET', `/api/v1/sandbox/${writer}`)).volumeMounts.map((m) => [m.name, m.path, m.readOnly]), [[NAME, '/data', false]]);

    // What was uploaded is there inside the sandbox.
    const cat = await exec(writer, 'cat /data/docs/hello.txt');
    assert.equal(cat.exitCode, 0, cat.stderr);
    assert.equal(cat.stdout, 'hello from the volume\n');

    // And a second sandbox mounts it read-only.
    const reader = await createSandbox({ name: 'ui-reader', volumeMounts: [{ volume: NAME, path: '/shared', readOnly: true }] });
    made.sandboxes.push(reader.id);

    // The details show the mount, its name a link to the volume.
    await page.click('#tab-details');
    await page.waitForSelector('#facts [data-fact="Shared volumes"]');
    assert.equal(await page.textContent('#facts [data-fact="Shared volumes"]'), `${NAME} at /data`);
    await shot(page, 'volumes-04-details-mount');
    await page.click(`#facts [data-fact="Shared volumes"] a:text("${NAME}")`);
    await page.waitForFunction((id) => location.hash === `#/shared-volumes/${id}`, made.volume);
    await page.waitForFunction((n) => document.querySelector('#shared-volume-name')?.textContent === n, NAME);
    await page.waitForSelector('#shared-volume-facts [data-fact="Mounted by"] [data-sandbox]');
    const mountedBy = await page.textContent('#shared-volume-facts [data-fact="Mounted by"]');
    assert.match(mountedBy, /ui-mounter at \/data/);
    assert.match(mountedBy, /ui-reader at \/shared \(ro\)/);

    // A symlink made inside the sandbox is shown with its target, not followed.
    const ln = await exec(writer, 'ln -s hello.txt /data/docs/link.txt');
    assert.equal(ln.exitCode, 0, ln.stderr);
    await page.click(`${row('/docs')} a:text("docs/")`);
    await folder(page, '/docs');
    await page.waitForSelector(row('/docs/link.txt'));
    assert.equal(await page.getAttribute(row('/docs/link.txt'), 'data-type'), 'symlink');
    assert.equal(await page.$(`${row('/docs/link.txt')} a.entry-link`), null);
    assert.equal(await page.$(`${row('/docs/link.txt')} a:text("Download")`), null);
    assert.match(await page.textContent(`${row('/docs/link.txt')} td:first-child`), /link\.txt → hello\.txt/);
    await shot(page, 'volumes-05-symlink');

    // Both pages fit a narrow screen.
    await page.setViewportSize({ width: 380, height: 800 });
    await assertNoOverflow(page, 'a shared volume\'s page');
    await page.click('#nav-shared-volumes');
    await page.waitForSelector(`tr[data-volume="${NAME}"] [data-sandbox="${reader.id}"]`);
    await assertNoOverflow(page, 'the shared volumes');
    await page.setViewportSize({ width: 1280, height: 860 });

    // The list names the sandboxes that mount it; deleting it is refused with the server's reason.
    const mounts = await page.textContent(`tr[data-volume="${NAME}"] [data-mounts]`);
    assert.match(mounts, /ui-mounter at \/data/);
    assert.match(mounts, /ui-reader at \/shared \(ro\)/);
    assert.equal(await page.getAttribute(`tr[data-volume="${NAME}"] [data-sandbox="${writer}"] a`, 'href'), `#/sandbox/${writer}/details`);
    await page.click(`button[aria-label="Delete volume ${NAME}"]`);
    await confirm(page);
    await page.waitForSelector('#notice.error:not([hidden])');
    const refusal = await page.textContent('#notice-text');
    assert.match(refusal, new RegExp(`^Could not delete volume ${NAME}: .*mounted by`));
    assert.ok(refusal.includes(writer) && refusal.includes(reader.id), refusal);
    await page.waitForSelector(`#shared-volumes-table tr[data-volume="${NAME}"]`);
    await shot(page, 'volumes-06-delete-refused');

    // Once the sandboxes are gone it can be deleted, and the list is empty.
    for (const id of made.sandboxes) await api('DELETE', `/api/v1/sandbox/${id}`);
    await eventually(async () => (await api('GET', `/api/v1/shared-volumes/${NAME}`)).mounts.length === 0, { what: 'the mounts to go with their sandboxes', timeout: 60000 });
    await page.reload();
    await page.waitForSelector(`tr[data-volume="${NAME}"] [data-mounts]:has-text("no sandbox")`);
    await page.click(`button[aria-label="Delete volume ${NAME}"]`);
    await confirm(page);
    await page.waitForSelector('#shared-volumes-empty');
    assert.equal(await page.textContent('#notice-text'), `Deleted volume ${NAME}.`);
    assert.equal((await api('GET', '/api/v1/shared-volumes')).total, 0);
    made.volume = null;
    await done(page);
  } finally {
    // What a failure left behind.
    for (const id of made.sandboxes) await raw('DELETE', `/api/v1/sandbox/${id}`).catch(() => {});
    if (made.volume) {
      await eventually(async () => [204, 404].includes((await raw('DELETE', `/api/v1/shared-volumes/${made.volume}`)).status),
        { what: 'the volume to be deleted', timeout: 60000 }).catch(() => {});
    }
  }
});
