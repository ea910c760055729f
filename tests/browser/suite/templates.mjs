// Templates from the dashboard: a Dockerfile the server cannot honour is
// explained next to its field; corrected, it builds with its log followed
// live until the build is ready (the build the refusal left waiting is the
// one that runs); built again with a build context, uploaded once under
// its SHA-256; the log is shown again from the list; a build whose RUN
// fails shows why; a sandbox made from it with the create form (which
// refuses a template with an image) has its files, working directory and
// environment; deleted from the list.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { image, api, raw, signedInPage, done, shot, eventually, assertNoOverflow } from '../lib/harness.mjs';

const NAME = `ui-template-${Date.now().toString(36)}`;
const BROKEN = `${NAME}-broken`;
const DOCKERFILE = `FROM ${image}\nWORKDIR /srv\nRUN echo made-in-template > /srv/made.txt\nENV FROM_TEMPLATE=yes`;
const exec = (id, shell) => api('POST', `/api/v1/sandbox/${id}/exec`, { shell });
const field = (name) => `#template-form [name=${name}]`;
const row = `#templates-table tr[data-template="${NAME}"]`;

/** A tar of one file, `hello.txt`: a build context. */
function contextTar() {
  const dir = mkdtempSync(path.join(tmpdir(), 'stockade-context-'));
  try {
    writeFileSync(path.join(dir, 'hello.txt'), 'hello from the context\n');
    return execFileSync('tar', ['-c', '-C', dir, 'hello.txt']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Waits until the log panel shows the RUN step and the build is ready. */
async function builtLog(page) {
  await page.waitForSelector('#template-log-box:not([hidden])');
  await page.waitForFunction(() => /RUN echo made-in-template/.test(document.querySelector('#template-log').textContent), null, { timeout: 120000 });
  await page.waitForFunction(() => document.querySelector('#template-build-status .chip')?.textContent === 'ready', null, { timeout: 120000 });
}

test('templates: build from a Dockerfile with its log, a sandbox from it, delete', async () => {
  const made = { sandboxes: [] };
  try {
    const page = await signedInPage({ hash: '#/templates' });
    assert.equal(await page.getAttribute('#nav-templates', 'aria-current'), 'page');
    await page.waitForSelector('#templates-empty, #templates-table');

    // A Dockerfile the server cannot honour: its reason, and its field marked.
    await page.fill(field('name'), NAME);
    await page.fill(field('dockerfile'), 'FROM x\nCOPY --from=a /x /y');
    await page.click('#template-build');
    await page.waitForSelector('#template-status.error');
    assert.match(await page.textContent('#template-status'), /^Not built: .*dockerfile.*line 2/);
    assert.equal(await page.getAttribute(field('dockerfile'), 'aria-invalid'), 'true');
    assert.equal(await page.getAttribute(field('name'), 'aria-invalid'), null);
    const templateId = (await api('GET', `/api/v1/templates/${NAME}`)).templateId;
    // The template is made, its build waiting: nothing to start a sandbox from yet.
    await page.waitForSelector(`${row} .chip[data-status="waiting"]`);
    assert.equal(await page.$(`${row} a:text("New sandbox from it")`), null);
    await shot(page, 'templates-01-refused');

    // Corrected, it builds: the log follows the steps until it is ready.
    await page.fill(field('dockerfile'), DOCKERFILE);
    await page.click('#template-build');
    await builtLog(page);
    assert.equal(await page.getAttribute(field('dockerfile'), 'aria-invalid'), null);
    assert.equal(await page.isHidden('#template-build-reason'), true);
    const template = await api('GET', `/api/v1/templates/${NAME}`);
    assert.equal(template.templateId, templateId);
    assert.deepEqual(template.builds.map((b) => b.status), ['ready']);
    // Every line of the build's log, once each and in order.
    const buildPath = `/api/v1/templates/${templateId}/builds/${template.builds[0].buildId}`;
    const { logEntries } = await api('GET', `${buildPath}?limit=1000`);
    await eventually(async () => (await page.textContent('#template-log')) === logEntries.map((l) => `${l.message}\n`).join(''),
      { what: 'the log panel to hold the whole log' });
    await page.waitForSelector(`${row} .chip[data-status="ready"]`);
    await shot(page, 'templates-02-built');

    // Built again with a build context: the browser hashes it, and uploads it only while the server lacks it.
    const tar = contextTar();
    const hash = createHash('sha256').update(tar).digest('hex');
    const puts = [];
    page.on('request', (r) => { if (r.method() === 'PUT' && r.url().includes('/files/')) puts.push(r.url()); });
    await page.fill(field('dockerfile'), `${DOCKERFILE}\nCOPY hello.txt ./`);
    await page.setInputFiles(field('context'), { name: 'context.tar', mimeType: 'application/x-tar', buffer: tar });
    for (let i = 0; i < 2; i++) {
      await page.click('#template-log-close');
      await page.click('#template-build');
      await builtLog(page);
    }
    assert.deepEqual(puts, [`${new URL(page.url()).origin}/api/v1/templates/${templateId}/files/${hash}`]);
    assert.equal((await api('GET', `/api/v1/templates/${templateId}/files/${hash}`)).present, true);
    assert.deepEqual((await api('GET', `/api/v1/templates/${NAME}`)).builds.map((b) => b.status), ['ready', 'ready', 'ready']);

    // A step that fails: the build's reason, quoting its output.
    await page.click('#template-log-close');
    await page.fill(field('name'), BROKEN);
    await page.fill(field('dockerfile'), `FROM ${image}\nRUN echo about-to-fail; exit 3`);
    await page.setInputFiles(field('context'), []);
    await page.click('#template-build');
    await page.waitForFunction(() => document.querySelector('#template-build-status .chip')?.textContent === 'error', null, { timeout: 120000 });
    assert.match(await page.textContent('#template-build-reason'), /RUN echo about-to-fail; exit 3\) failed with exit code 3[^]*about-to-fail/);
    assert.match(await page.textContent('#template-log'), /about-to-fail/);
    await page.waitForSelector(`#templates-table tr[data-template="${BROKEN}"] .chip[data-status="error"]`);
    assert.equal(await page.$(`#templates-table tr[data-template="${BROKEN}"] a:text("New sandbox from it")`), null);
    await shot(page, 'templates-03-failed');
    await api('DELETE', `/api/v1/templates/${BROKEN}`);

    // The page fits a narrow screen.
    await page.setViewportSize({ width: 380, height: 800 });
    await assertNoOverflow(page, 'the templates');
    await page.setViewportSize({ width: 1280, height: 860 });

    // Its log again from the list.
    await page.click('#template-log-close');
    assert.equal(await page.isHidden('#template-log-box'), true);
    await page.click(`button[aria-label="Build log of ${NAME}"]`);
    await builtLog(page);

    // A sandbox from it, through the create form it offers.
    await page.click(`${row} a:text("New sandbox from it")`);
    await page.waitForFunction((n) => location.hash === `#/new?template=${n}`, NAME);
    await page.waitForFunction((n) => document.querySelector('#create-form [name=template]').value === n, NAME);
    // A template brings its own image: one given as well is refused before the server sees it.
    await page.fill('#create-form input[name=image]', image);
    await page.click('#create-submit');
    await page.waitForFunction(() => /template: give an image, a runtime preset or a template/.test(document.querySelector('#create-status').textContent));
    assert.equal(await page.getAttribute('#create-form [name=template]', 'aria-invalid'), 'true');
    await page.fill('#create-form input[name=image]', '');
    await page.fill('#create-form input[name=name]', 'ui-from-template');
    await page.click('#create-submit');
    await page.waitForFunction(() => document.querySelector('#detail-name')?.textContent === 'ui-from-template'
      && document.querySelector('#detail-status')?.textContent === 'RUNNING', null, { timeout: 90000 });
    const id = /#\/sandbox\/([a-z0-9]+)/.exec(page.url())[1];
    made.sandboxes.push(id);
    const cat = await exec(id, 'cat /srv/made.txt');
    assert.equal(cat.exitCode, 0, cat.stderr);
    assert.equal(cat.stdout, 'made-in-template\n');
    assert.equal((await exec(id, 'pwd')).stdout, '/srv\n');
    assert.equal((await exec(id, 'cat hello.txt')).stdout, 'hello from the context\n');
    assert.equal((await exec(id, 'echo $FROM_TEMPLATE')).stdout, 'yes\n');
    await api('DELETE', `/api/v1/sandbox/${id}`);
    made.sandboxes = [];

    // Back on the page, the log is closed: leaving it stopped following.
    await page.click('#nav-templates');
    await page.waitForSelector(row);
    assert.equal(await page.isHidden('#template-log-box'), true);

    // Deleted from the list: gone from it and from the API.
    await page.click(`button[aria-label="Delete template ${NAME}"]`);
    await page.click('#prompt-confirm');
    await page.waitForSelector(row, { state: 'detached' });
    assert.equal(await page.textContent('#notice-text'), `Deleted template ${NAME}.`);
    assert.equal((await raw('GET', `/api/v1/templates/${templateId}`)).status, 404);
    await shot(page, 'templates-04-deleted');
    await done(page);
  } finally {
    // What a failure left behind.
    for (const id of made.sandboxes) await raw('DELETE', `/api/v1/sandbox/${id}`).catch(() => {});
    for (const name of [NAME, BROKEN]) await raw('DELETE', `/api/v1/templates/${name}`).catch(() => {});
  }
});
