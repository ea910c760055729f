// The console's notebook: its place in the URL, its cells, and (with the
// code-interpreter image, `STOCKADE_TEST_IMAGE_CODE`) cells that run in the
// sandbox's real Jupyter kernels: state kept from cell to cell and across a
// reload, a matplotlib plot as a PNG, a pandas table as HTML, hostile HTML
// sanitised, an error's traceback, Stop interrupting a cell, Bash and
// JavaScript, a restart that forgets the variables, and the kernels'
// execution counts (a test of their own).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { api, createSandbox, signedInPage, done, shot, routeMissing, assertNoOverflow } from '../lib/harness.mjs';

const codeImage = process.env.STOCKADE_TEST_IMAGE_CODE;

const cells = '#notebook-host .cell';
const code = (page, i) => page.locator(`${cells} .cell-code`).nth(i);
const cell = (page, i) => page.locator(cells).nth(i);

async function at(page, pattern) {
  await page.waitForFunction((p) => new RegExp(p).test(location.hash), pattern.source, { timeout: 15000 });
}

async function notebookShown(page, count) {
  await page.waitForSelector('#notebook-pane:not([hidden])', { timeout: 15000 });
  await page.waitForFunction((n) => document.querySelectorAll('#notebook-host .cell').length === n, count, { timeout: 15000 });
  assert.equal(await page.getAttribute('#mode-notebook', 'aria-pressed'), 'true');
  assert.equal(await page.getAttribute('#tab-console', 'aria-selected'), 'true');
}

/** Waits until cell `i` is no longer queued or running; answers its outputs' text. */
async function finished(page, i, timeout = 60000) {
  await page.waitForFunction((n) => {
    const c = document.querySelectorAll('#notebook-host .cell')[n];
    return c && c.dataset.state === 'idle';
  }, i, { timeout });
  return cell(page, i).locator('.cell-out').innerText();
}

/** Puts `source` into cell `i`, made when missing. */
async function write(page, i, source, language = 'python') {
  while (await page.locator(cells).count() <= i) await page.click('#notebook-add');
  await code(page, i).fill(source);
  await cell(page, i).locator('.cell-lang').selectOption(language);
}

/** Runs `source` in cell `i` with its Run button; answers its outputs' text. */
async function run(page, i, source, { language = 'python', timeout } = {}) {
  await write(page, i, source, language);
  await cell(page, i).locator('.cell-run').click();
  return finished(page, i, timeout);
}

const countOf = (page, i) => cell(page, i).locator('.cell-count').textContent();

test('the notebook is a console mode with its place in the URL', async () => {
  const sb = await createSandbox({ name: 'ui-notebook-url' });
  const page = await signedInPage({ hash: `#/sandbox/${sb.id}/notebook` });
  await page.waitForSelector('#btn-stop:enabled');
  await notebookShown(page, 1);
  assert.equal(await cell(page, 0).locator('.cell-lang').inputValue(), 'python');
  assert.deepEqual(await cell(page, 0).locator('.cell-lang option').evaluateAll((os) => os.map((o) => o.value)),
    ['python', 'javascript', 'bash']);

  // Cells are added, and their code and languages survive a reload.
  await code(page, 0).fill('print("kept")');
  await page.click('#notebook-add');
  await notebookShown(page, 2);
  await code(page, 1).fill('echo kept too');
  await cell(page, 1).locator('.cell-lang').selectOption('bash');
  await page.reload();
  await notebookShown(page, 2);
  assert.equal(await code(page, 0).inputValue(), 'print("kept")');
  assert.equal(await code(page, 1).inputValue(), 'echo kept too');
  assert.equal(await cell(page, 1).locator('.cell-lang').inputValue(), 'bash');

  // The mode buttons and back/forward move between the console's modes.
  await page.click('#mode-commands');
  await at(page, new RegExp(`^#/sandbox/${sb.id}/commands$`));
  await page.waitForSelector('#commands-pane:not([hidden])');
  assert.ok(await page.isHidden('#notebook-pane'));
  await page.goBack();
  await notebookShown(page, 2);
  await page.click('#tab-files');
  await at(page, new RegExp(`^#/sandbox/${sb.id}/files`));
  await page.click('#tab-console');
  await at(page, new RegExp(`^#/sandbox/${sb.id}/notebook`));
  await notebookShown(page, 2);

  // The sanitiser is DOMPurify from npm, served by the server, with the
  // notebook's rules: no handlers, scripts or images that make requests.
  const clean = await page.evaluate(async () => {
    const { default: purify } = await import('/dashboard/purify.mjs');
    return { version: purify.version, out: purify.sanitize('<b>ok</b><img src="/x"><script>alert(2)</script><a href="javascript:alert(3)">a</a>') };
  });
  assert.match(clean.version, /^3\./);
  assert.equal(clean.out, '<b>ok</b><img><a>a</a>');

  // A cell removed is gone; the last one is never removed.
  await cell(page, 1).locator('.cell-delete').click();
  await cell(page, 0).locator('.cell-delete').click();
  await notebookShown(page, 1);
  assert.equal(await code(page, 0).inputValue(), '');

  // A server without the route, or an image without kernels, says so in
  // the cell and as every API error is shown.
  const missing = await routeMissing('POST', `/api/v1/sandbox/${sb.id}/code`, { body: '{}', headers: { 'Content-Type': 'application/json' } });
  const text = await run(page, 0, '1 + 1');
  assert.match(text, missing ? /does not offer that yet/ : /kernel/i);
  await page.waitForSelector('#notice.error:not([hidden])');
  assert.match(await page.textContent('#notice-text'), /Could not run the cell/);
  assert.equal(await countOf(page, 0), '[ ]');
  await shot(page, '90-notebook-no-kernel');

  // A stopped sandbox runs nothing, and says why.
  await api('POST', `/api/v1/sandbox/${sb.id}/stop`);
  await page.waitForSelector('#notebook-hint:not([hidden])', { timeout: 30000 });
  assert.match(await page.textContent('#notebook-hint'), /needs a running sandbox/);
  assert.ok(await cell(page, 0).locator('.cell-run').isDisabled());
  assert.ok(await page.isDisabled('#notebook-run-all'));
  await done(page);
});

/**
 * Whether the code-interpreter tests can run: skipped (with the reason)
 * without the image's name or the server's code route; a name Docker does
 * not know fails.
 */
async function kernelsAvailable(t) {
  if (!codeImage) {
    t.skip('STOCKADE_TEST_IMAGE_CODE is not set: the code-interpreter image runs these cells');
    return false;
  }
  try {
    execFileSync('docker', ['image', 'inspect', codeImage], { stdio: 'ignore' });
  } catch (_) {
    assert.fail(`STOCKADE_TEST_IMAGE_CODE is ${codeImage}, which Docker does not have: build it with scripts/build-image code-interpreter`);
  }
  if (await routeMissing('POST', '/api/v1/sandbox/000000000000/code')) {
    t.skip('the server answers 404 for POST /api/v1/sandbox/{id}/code: its code route is not there yet');
    return false;
  }
  return true;
}

test('cells run in the sandbox\'s kernels and show every kind of output', { timeout: 420000 }, async (t) => {
  if (!(await kernelsAvailable(t))) return;
  const sb = await createSandbox({ name: 'ui-notebook', dockerImage: codeImage });
  const page = await signedInPage({ hash: `#/sandbox/${sb.id}/notebook` });
  await page.waitForSelector('#btn-stop:enabled', { timeout: 60000 });
  await notebookShown(page, 1);

  // State carries from cell to cell; the notebook's own context is in the URL.
  assert.equal(await run(page, 0, 'x = 21', { timeout: 90000 }), '');
  await at(page, new RegExp(`^#/sandbox/${sb.id}/notebook\\?python=[0-9a-f-]{8,}$`));
  const contextId = new URL(page.url()).hash.split('python=')[1];
  // Shift+Enter runs the cell and moves on to a new one.
  await page.click('#notebook-add');
  await code(page, 1).fill('x * 2');
  await code(page, 1).press('Shift+Enter');
  assert.equal((await finished(page, 1)).trim(), '42');
  assert.equal(await cell(page, 1).locator('.result[data-kind="text"]').textContent(), '42');
  await page.waitForFunction(() => document.activeElement === document.querySelectorAll('#notebook-host .cell-code')[2]);

  // A reload keeps the cells and runs the next one in the same kernel.
  await page.reload();
  await notebookShown(page, 3);
  await page.waitForSelector('#btn-stop:enabled');
  assert.equal(await code(page, 1).inputValue(), 'x * 2');
  assert.equal((await run(page, 2, 'print(x + 1)')).trim(), '22');
  assert.equal(new URL(page.url()).hash.split('python=')[1], contextId);

  // A matplotlib figure is a PNG.
  await run(page, 3, 'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title("squares")\nplt.show()', { timeout: 120000 });
  const img = cell(page, 3).locator('.result[data-kind="png"] img');
  assert.match(await img.getAttribute('src'), /^data:image\/png;base64,iVBORw0KGgo/);
  assert.ok(await img.evaluate((i) => i.complete && i.naturalWidth > 100), 'the plot decodes as an image');

  // A pandas DataFrame is an HTML table.
  await run(page, 4, 'import pandas as pd\npd.DataFrame({"animal": ["cat", "dog"], "legs": [4, 4]})', { timeout: 90000 });
  const table = cell(page, 4).locator('.result[data-kind="html"] table');
  assert.deepEqual(await table.locator('thead th').evaluateAll((ths) => ths.map((h) => h.textContent.trim()).filter(Boolean)), ['animal', 'legs']);
  assert.deepEqual(await table.locator('tbody td').evaluateAll((tds) => tds.map((d) => d.textContent.trim())), ['cat', '4', 'dog', '4']);
  assert.equal(await cell(page, 4).locator('.cell-out style').count(), 0, 'no stylesheet of the output restyles the page');
  await shot(page, '91-notebook-outputs');
  // On a phone the outputs scroll in their own boxes, never the page.
  await page.setViewportSize({ width: 380, height: 800 });
  await assertNoOverflow(page, 'the notebook at 380 px');
  await shot(page, '91-notebook-narrow');
  await page.setViewportSize({ width: 1280, height: 860 });

  // HTML from the kernel is sanitised: handlers, scripts and javascript:
  // links are gone and never run, the harmless markup stays. On a page of
  // its own, a new tab at the notebook's URL (the same kernel, so `x` is
  // there): Chromium reports every inline handler it parses, even in the
  // sanitiser's inert document, as a CSP violation it blocked, so that
  // page's console may hold those and nothing else.
  const seen = { csp: [], errors: [], external: [] };
  const hostile = await signedInPage({
    hash: new URL(page.url()).hash,
    setup: (p) => {
      p.on('console', (m) => { if (/Content Security Policy/i.test(m.text())) seen.csp.push(m.text()); });
      p.on('pageerror', (e) => seen.errors.push(e.message));
      p.context().on('request', (r) => { if (new URL(r.url()).origin !== new URL(page.url()).origin && !r.url().startsWith('data:')) seen.external.push(r.url()); });
    },
  });
  await notebookShown(hostile, 1);
  await hostile.waitForSelector('#btn-stop:enabled');
  const markup = '<b id="nb-bold">bold</b><img id="nb-img" src=x onerror="window.nbPwned = 1">'
    + '<script>window.nbPwned = 2</script><a id="nb-link" href="javascript:window.nbPwned = 3">link</a>'
    + '<svg id="nb-svg" onload="window.nbPwned = 4"><circle r="5"/></svg>';
  await run(hostile, 0, `from IPython.display import HTML, display\nprint(x)\ndisplay(HTML('${markup}'))`);
  const out = cell(hostile, 0).locator('.cell-out');
  assert.equal(await out.locator('pre.stdout').textContent(), '21\n');
  assert.equal(await out.locator('b#nb-bold').textContent(), 'bold');
  assert.equal(await out.locator('script').count(), 0);
  assert.deepEqual(await out.locator('#nb-img').evaluate((n) => n.getAttributeNames()), ['id']);
  assert.equal(await out.locator('#nb-link').getAttribute('href'), null);
  assert.equal(await out.locator('#nb-svg').getAttribute('onload'), null);
  await out.locator('#nb-link').click();
  await hostile.waitForTimeout(500);
  assert.equal(await hostile.evaluate(() => window.nbPwned), undefined, 'no script of the output ran');

  // Run all runs every cell in order and stops at the first that fails.
  await write(hostile, 1, 'y = 5');
  await write(hostile, 2, 'raise ValueError("stop here")');
  await write(hostile, 3, 'print("never")');
  await hostile.click('#notebook-run-all');
  await cell(hostile, 2).locator('.cell-error[data-error="ValueError"]').waitFor({ timeout: 30000 });
  await finished(hostile, 2);
  await hostile.waitForTimeout(1000);
  assert.equal(await cell(hostile, 0).locator('b#nb-bold').count(), 1);
  assert.equal(await cell(hostile, 3).getAttribute('data-state'), 'idle');
  assert.equal(await cell(hostile, 3).locator('.cell-out').textContent(), '');
  await hostile.context().close();
  assert.deepEqual(seen.errors, []);
  assert.deepEqual(seen.external, []);
  for (const text of seen.csp) assert.match(text, /inline event handler .*has been blocked/);

  // An error shows its name, value and traceback, without escape codes.
  await run(page, 5, 'def f():\n    return 1 / 0\nf()');
  const error = cell(page, 5).locator('.cell-error[data-error="ZeroDivisionError"]');
  assert.match(await error.locator('.error-head').textContent(), /^ZeroDivisionError: division by zero$/);
  const traceback = await error.locator('.traceback').textContent();
  assert.match(traceback, /return 1 \/ 0/);
  assert.ok(!traceback.includes('\x1b'), 'the traceback has no raw escape codes');
  assert.ok(await error.locator('.traceback span[class^="ansi-"]').count() > 0, 'the colours are kept as styles');

  // Cells run one at a time: a cell asked for while another runs waits.
  // Stop interrupts the running cell in the kernel, so the waiting one
  // runs at once rather than after the sleep.
  await write(page, 6, 'import time\nprint("sleeping", flush=True)\ntime.sleep(120)');
  await cell(page, 6).locator('.cell-run').click();
  await cell(page, 6).locator('.cell-out').getByText('sleeping').waitFor({ timeout: 30000 });
  await write(page, 7, 'print("after", x)');
  await cell(page, 7).locator('.cell-run').click();
  assert.equal(await cell(page, 7).getAttribute('data-state'), 'queued');
  assert.match(await cell(page, 7).locator('.cell-status').textContent(), /waiting/);
  await page.waitForTimeout(1000);
  assert.equal(await cell(page, 7).getAttribute('data-state'), 'queued');
  assert.ok(await cell(page, 6).locator('.cell-stop').isVisible());
  await cell(page, 6).locator('.cell-stop').click();
  assert.match(await finished(page, 6, 10000), /stopped/);
  assert.equal((await finished(page, 7, 30000)).trim(), 'after 21');

  // Bash and JavaScript cells run in their own kernels, named in the URL too.
  assert.match(await run(page, 8, 'echo "bash-$((6 * 7))"', { language: 'bash', timeout: 90000 }), /bash-42/);
  await at(page, /[?&]bash=[0-9a-f-]{8,}/);
  // Deno colours its values: shown as styles, never as escape codes.
  assert.equal(await run(page, 9, '[1, 2, 3].map((n) => n * 2)', { language: 'javascript', timeout: 120000 }), '[ 2, 4, 6 ]');
  await at(page, /[?&]javascript=[0-9a-f-]{8,}/);

  // Markdown is rendered, SVG drawn, JSON pretty-printed, a
  // JPEG shown as a data URL.
  await run(page, 10, [
    'import io',
    'from IPython.display import JSON, SVG, Image, Markdown, display',
    'from PIL import Image as Picture',
    'display(Markdown("## Sum\\n\\n*x* is **21**"))',
    'display(SVG(\'<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20"><circle id="nb-dot" cx="10" cy="10" r="8"/></svg>\'))',
    'display(JSON({"answer": 42, "list": [1, 2]}))',
    'buf = io.BytesIO()',
    'Picture.new("RGB", (16, 8), "red").save(buf, "JPEG")',
    'display(Image(data=buf.getvalue(), format="jpeg"))',
  ].join('\n'));
  const rich = cell(page, 10).locator('.cell-out');
  assert.equal(await rich.locator('.result[data-kind="markdown"] h2').textContent(), 'Sum');
  assert.equal(await rich.locator('.result[data-kind="markdown"] strong').textContent(), '21');
  assert.equal(await rich.locator('.result[data-kind="svg"] svg circle#nb-dot').count(), 1);
  assert.deepEqual(JSON.parse(await rich.locator('.result[data-kind="json"] pre').textContent()), { answer: 42, list: [1, 2] });
  const jpeg = rich.locator('.result[data-kind="jpeg"] img');
  assert.match(await jpeg.getAttribute('src'), /^data:image\/jpeg;base64,\/9j\//);
  assert.ok(await jpeg.evaluate((i) => i.complete && i.naturalWidth === 16), 'the JPEG decodes');

  // Restart: the variables are gone.
  await page.click('#notebook-restart');
  await page.click('#prompt-confirm');
  await page.waitForFunction(() => /Restarted/.test(document.querySelector('#notebook-status').textContent), null, { timeout: 60000 });
  await run(page, 11, 'x', { timeout: 90000 });
  const gone = cell(page, 11).locator('.cell-error[data-error="NameError"]');
  assert.match(await gone.locator('.error-head').textContent(), /name 'x' is not defined/);
  assert.equal(new URL(page.url()).hash.split('python=')[1].split('&')[0], contextId, 'the same context, restarted');
  await shot(page, '92-notebook-restarted');

  // Clear outputs empties every cell.
  await page.click('#notebook-clear');
  assert.equal(await page.locator(`${cells} .cell-out > *`).count(), 0);
  await done(page);
  await api('DELETE', `/api/v1/sandbox/${sb.id}`);
});

test('each cell shows its execution count, and a restart starts them again', { timeout: 240000 }, async (t) => {
  if (!(await kernelsAvailable(t))) return;
  const sb = await createSandbox({ name: 'ui-notebook-counts', dockerImage: codeImage });
  const page = await signedInPage({ hash: `#/sandbox/${sb.id}/notebook` });
  await page.waitForSelector('#btn-stop:enabled', { timeout: 60000 });
  await notebookShown(page, 1);
  assert.equal(await countOf(page, 0), '[ ]');
  await run(page, 0, 'x = 21', { timeout: 90000 });
  assert.equal(await countOf(page, 0), '[1]');
  assert.equal((await run(page, 1, 'x * 2')).trim(), '42');
  assert.equal(await countOf(page, 1), '[2]');
  // A cell run again gets the kernel's next count.
  await cell(page, 0).locator('.cell-run').click();
  await finished(page, 0);
  assert.equal(await countOf(page, 0), '[3]');
  await page.click('#notebook-restart');
  await page.click('#prompt-confirm');
  await page.waitForFunction(() => /Restarted/.test(document.querySelector('#notebook-status').textContent), null, { timeout: 60000 });
  assert.deepEqual(await page.locator(`${cells} .cell-count`).allTextContents(), ['[ ]', '[ ]']);
  await cell(page, 1).locator('.cell-run').click();
  await finished(page, 1);
  assert.equal(await countOf(page, 1), '[1]');
  assert.equal(await cell(page, 1).locator('.cell-error[data-error="NameError"]').count(), 1);
  await done(page);
  await api('DELETE', `/api/v1/sandbox/${sb.id}`);
});
