// The file browser: tree, upload by drag and drop and by picking,
// download, view and edit small text files, new folder, rename, delete,
// and live updates.
//
// `files/mkdir`, `files/move` and `files/watch` are being added to the
// server; where it answers "no route" for one, the test first checks the
// dashboard says so in a banner, then plays the route's contract itself
// (doing the real thing in the sandbox with `docker exec`) so that the
// dashboard's side of it is proven.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createSandbox, putFile, raw, signedInPage, done, shot, routeMissing, eventually } from '../lib/harness.mjs';

async function content(id, p) {
  const resp = await raw('GET', `/api/v1/sandbox/${id}/files?path=${encodeURIComponent(p)}`);
  return resp.ok ? resp.text() : null;
}

async function listed(page, name) {
  return page.waitForSelector(`#file-entries tr[data-path$="/${name}"]`, { timeout: 15000 });
}

/** Drops files made in the page onto `selector`, as a drag from the desktop would. */
async function drop(page, selector, files) {
  const dt = await page.evaluateHandle((fs) => {
    const transfer = new DataTransfer();
    for (const f of fs) transfer.items.add(new File([f.body], f.name, { type: 'text/plain' }));
    return transfer;
  }, files);
  await page.dispatchEvent('#files-drop', 'dragover', { dataTransfer: dt });
  await page.dispatchEvent(selector, 'drop', { dataTransfer: dt });
}

/** Plays `POST …/files/mkdir?path=` and `POST …/files/move {from,to}` for a server without them. */
async function playFileRoutes(page, sb, calls) {
  const container = `stockade-${sb.id}`;
  await page.route((url) => url.pathname === `/api/v1/sandbox/${sb.id}/files/mkdir`, async (route) => {
    const req = route.request();
    const p = new URL(req.url()).searchParams.get('path');
    calls.push({ route: 'mkdir', method: req.method(), path: p, csrf: req.headers()['x-stockade-csrf'] });
    execFileSync('docker', ['exec', container, 'mkdir', '-p', p]);
    await route.fulfill({ status: 201, contentType: 'application/json', body: JSON.stringify({ path: p, type: 'dir' }) });
  });
  await page.route((url) => url.pathname === `/api/v1/sandbox/${sb.id}/files/move`, async (route) => {
    const req = route.request();
    const body = req.postDataJSON();
    calls.push({ route: 'move', method: req.method(), body, csrf: req.headers()['x-stockade-csrf'] });
    execFileSync('docker', ['exec', container, 'mv', '-T', body.from, body.to]);
    await route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify({ path: body.to }) });
  });
}

test('the file browser: tree, upload, download, edit, new folder, rename, delete', async () => {
  const sb = await createSandbox({ name: 'ui-files' });
  await putFile(sb.id, 'src/main.txt', 'hello\n');
  await putFile(sb.id, 'README.md', '# readme\n');
  await putFile(sb.id, 'big.bin', Buffer.alloc(1024 * 1024 + 10, 0x61));
  const page = await signedInPage({ hash: `#/sandbox/${sb.id}/files` });
  await listed(page, 'README.md');
  await page.waitForSelector('#file-tree li[data-path="/workspace/src"]');
  assert.equal(await page.textContent('#file-title'), '/workspace');

  // Into a folder: the URL follows, the tree opens it.
  await page.click('#file-entries a:text("src/")');
  await page.waitForFunction((id) => location.hash === `#/sandbox/${id}/files/workspace/src`, sb.id);
  await listed(page, 'main.txt');
  await page.waitForSelector('#file-tree li[data-path="/workspace/src/main.txt"]');

  // Upload: files dropped on the folder shown, on a folder of the tree, and picked.
  await drop(page, '#file-view', [{ name: 'dropped.txt', body: 'dropped content\n' }]);
  await listed(page, 'dropped.txt');
  assert.equal(await content(sb.id, 'src/dropped.txt'), 'dropped content\n');
  await drop(page, '#file-tree li[data-path="/workspace"] > .tree-row a', [{ name: 'at-root.txt', body: 'root drop\n' }]);
  await eventually(async () => (await content(sb.id, 'at-root.txt')) === 'root drop\n', { what: 'at-root.txt uploaded to /workspace' });
  await page.setInputFiles('#file-upload', { name: 'picked.txt', mimeType: 'text/plain', buffer: Buffer.from('picked\n') });
  await listed(page, 'picked.txt');
  assert.equal(await content(sb.id, 'src/picked.txt'), 'picked\n');
  await shot(page, '40-files');

  // Download a file, and a folder as a tar archive.
  const [file] = await Promise.all([page.waitForEvent('download'), page.click('#file-entries tr[data-path="/workspace/src/main.txt"] a:text("Download")')]);
  assert.equal(file.suggestedFilename(), 'main.txt');
  assert.equal(readFileSync(await file.path(), 'utf8'), 'hello\n');
  const [tarball] = await Promise.all([page.waitForEvent('download'), page.click('.file-head a:text("Download")')]);
  assert.equal(tarball.suggestedFilename(), 'src.tar');
  const names = execFileSync('tar', ['-tf', await tarball.path()]).toString();
  assert.match(names, /main\.txt/);
  assert.match(names, /dropped\.txt/);

  // View and edit a small text file; Ctrl+S saves it.
  await page.click('#file-entries a:text("main.txt")');
  await page.waitForSelector('#file-editor');
  assert.equal(await page.inputValue('#file-editor'), 'hello\n');
  assert.ok(await page.isDisabled('#file-save'));
  await page.fill('#file-editor', 'hello, edited\n');
  await page.press('#file-editor', 'Control+s');
  await page.waitForFunction(() => /^Saved at/.test(document.querySelector('#file-status').textContent));
  assert.equal(await content(sb.id, 'src/main.txt'), 'hello, edited\n');
  await shot(page, '41-file-editor');

  // A file over 1 MiB is offered for download, not opened.
  await page.fill('#files-path', 'big.bin');
  await page.press('#files-path', 'Enter');
  await page.waitForFunction(() => /larger than 1 MiB/.test(document.querySelector('#file-status')?.textContent || ''));
  assert.equal(await page.$('#file-editor'), null);

  // New folder and rename: the routes, or their contract played here.
  await page.goto(`${new URL(page.url()).origin}/#/sandbox/${sb.id}/files/workspace/src`);
  await listed(page, 'main.txt');
  const calls = [];
  const mkdirMissing = await routeMissing('GET', `/api/v1/sandbox/${sb.id}/files/mkdir`);
  const moveMissing = await routeMissing('GET', `/api/v1/sandbox/${sb.id}/files/move`);
  if (mkdirMissing) {
    await page.click('#files-mkdir');
    await page.fill('#prompt-input', 'not-yet');
    await page.click('#prompt-confirm');
    await page.waitForFunction(() => /does not offer that yet/.test(document.querySelector('#notice').textContent));
    assert.ok(await page.isVisible('#notice.error'));
  }
  if (mkdirMissing || moveMissing) await playFileRoutes(page, sb, calls);
  await page.click('#files-mkdir');
  await page.fill('#prompt-input', 'made-here');
  await page.click('#prompt-confirm');
  await listed(page, 'made-here');
  assert.equal(execFileSync('docker', ['exec', `stockade-${sb.id}`, 'stat', '-c', '%F', '/workspace/src/made-here']).toString().trim(), 'directory');

  await page.click('#file-entries tr[data-path="/workspace/src/dropped.txt"] button:text("Rename")');
  await page.fill('#prompt-input', 'renamed.txt');
  await page.click('#prompt-confirm');
  await listed(page, 'renamed.txt');
  assert.equal(await content(sb.id, 'src/renamed.txt'), 'dropped content\n');
  assert.equal(await content(sb.id, 'src/dropped.txt'), null);
  if (mkdirMissing) {
    assert.deepEqual(calls.find((c) => c.route === 'mkdir'), { route: 'mkdir', method: 'POST', path: '/workspace/src/made-here', csrf: '1' });
  }
  if (moveMissing) {
    assert.deepEqual(calls.find((c) => c.route === 'move'), { route: 'move', method: 'POST', body: { from: '/workspace/src/dropped.txt', to: '/workspace/src/renamed.txt' }, csrf: '1' });
  }

  // Delete a file, then a folder with what is in it.
  await page.click('#file-entries tr[data-path="/workspace/src/picked.txt"] button:text("Delete")');
  await page.click('#prompt-confirm');
  await page.waitForSelector('#file-entries tr[data-path="/workspace/src/picked.txt"]', { state: 'detached' });
  assert.equal(await content(sb.id, 'src/picked.txt'), null);
  await putFile(sb.id, 'src/made-here/inner.txt', 'x');
  await page.click('#file-entries tr[data-path="/workspace/src/made-here"] button:text("Delete")');
  await page.click('#prompt-confirm');
  await page.waitForSelector('#file-entries tr[data-path="/workspace/src/made-here"]', { state: 'detached' });
  assert.equal((await raw('GET', `/api/v1/sandbox/${sb.id}/files/stat?path=/workspace/src/made-here`)).status, 404);
  await shot(page, '42-files-after');
  await done(page);
});

test('the file browser shows changes made inside the sandbox', async () => {
  const sb = await createSandbox({ name: 'ui-files-live' });
  await putFile(sb.id, 'first.txt', '1');
  const watchMissing = await routeMissing('GET', `/api/v1/sandbox/${sb.id}/files/watch?path=/workspace&recursive=true`);
  let release = null;
  const watched = [];
  const setup = watchMissing ? (page) => page.route((url) => url.pathname === `/api/v1/sandbox/${sb.id}/files/watch`, async (route) => {
    // The watch stream's contract: SSE events named create/write/remove/
    // rename/chmod with {"path","type"}; this one sends one event, then ends.
    watched.push(Object.fromEntries(new URL(route.request().url()).searchParams));
    const event = await new Promise((r) => { release = r; });
    await route.fulfill({ status: 200, headers: { 'Content-Type': 'text/event-stream' }, body: `event: create\ndata: ${JSON.stringify(event)}\n\n` });
  }) : undefined;
  const page = await signedInPage({ hash: `#/sandbox/${sb.id}/files/workspace`, setup });
  await listed(page, 'first.txt');

  // Written inside the sandbox once the page watches: shown without any click.
  if (!watchMissing) {
    await page.waitForFunction(() => /^Live/.test(document.querySelector('#files-live').textContent));
  }
  execFileSync('docker', ['exec', `stockade-${sb.id}`, 'sh', '-c', 'echo live > /workspace/made-inside.txt']);
  if (watchMissing) {
    await eventually(() => release, { what: 'the page to open the watch stream' });
    assert.deepEqual(watched[0], { path: '/workspace', recursive: 'true' });
    release({ path: '/workspace/made-inside.txt', type: 'file' });
  }
  await listed(page, 'made-inside.txt');

  // Without a live stream, coming back to the window refreshes.
  if (watchMissing) {
    await page.waitForFunction(() => /focus back/.test(document.querySelector('#files-live').textContent));
    execFileSync('docker', ['exec', `stockade-${sb.id}`, 'sh', '-c', 'echo again > /workspace/on-focus.txt']);
    await page.waitForTimeout(300);
    assert.equal(await page.$('#file-entries tr[data-path="/workspace/on-focus.txt"]'), null);
    await page.evaluate(() => window.dispatchEvent(new Event('focus')));
    await listed(page, 'on-focus.txt');
  }
  await shot(page, '43-files-live');
  await done(page);
});
