// Pause and resume from the dashboard: the buttons, the PAUSED status with
// the time since it was paused (list, header, details), a background
// process that keeps its PID across the pause, a terminal that goes on
// where it was, a console refused while paused (the API's message shown,
// Resume offered), and the lifecycle set in the create form, with a
// sandbox that resumes by itself when a command is sent to it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { api, raw, createSandbox, signedInPage, done, shot, screenText, eventually } from '../lib/harness.mjs';

/** Runs a shell command through the exec API; answers its buffered result. */
const exec = (id, shell) => api('POST', `/api/v1/sandbox/${id}/exec`, { shell });

/** Whether Docker has the sandbox's container frozen. */
const frozen = (id) => execFileSync('docker', ['inspect', '--format', '{{.State.Paused}}', `stockade-${id}`]).toString().trim() === 'true';

async function status(page, want) {
  await page.waitForFunction((s) => document.querySelector('#detail-status')?.textContent === s, want, { timeout: 30000 });
}

async function mode(page, which) {
  await page.click(`#mode-${which}`);
  await page.waitForSelector(`#${which}-pane:not([hidden])`);
}

/**
 * Holds back the page's list refreshes until the answer is called, so
 * that the page learns of a change made behind it only from what it does
 * itself.
 */
async function holdListing(page) {
  let release;
  const held = new Promise((resolve) => { release = resolve; });
  await page.route(/\/api\/v1\/sandbox\?/, async (route) => { await held; await route.continue(); });
  return async () => {
    // The held listings go on; then the route goes once they have.
    release();
    await page.unrouteAll({ behavior: 'wait' });
  };
}

async function onScreen(page, pattern, what) {
  return eventually(async () => pattern.test(await screenText(page)), { what: `${what} on the terminal` });
}

test('Pause and Resume keep a background process with its PID and the terminal session', async () => {
  const sb = await createSandbox({ name: 'ui-pause' });
  try {
    const bg = await api('POST', `/api/v1/sandbox/${sb.id}/exec`, {
      shell: 'echo $$ > /workspace/bg.pid; exec sleep 3600', background: true,
    });
    const pid = await eventually(async () => (await exec(sb.id, 'cat /workspace/bg.pid')).stdout.trim(), { what: 'the background process\'s PID' });
    assert.match(pid, /^\d+$/);

    const page = await signedInPage({ hash: `#/sandbox/${sb.id}/terminal` });
    await status(page, 'RUNNING');
    await page.waitForFunction(() => /^Connected/.test(document.querySelector('#terminal-status').textContent), null, { timeout: 30000 });
    await page.click('#terminal-host');
    await page.keyboard.type('echo before-$((6*7))');
    await page.keyboard.press('Enter');
    await onScreen(page, /before-42/, 'the output before the pause');
    assert.ok(await page.isVisible('#btn-pause'));
    assert.ok(await page.isHidden('#btn-resume'));

    await page.click('#btn-pause');
    await status(page, 'PAUSED');
    assert.match(await page.getAttribute('#detail-status', 'class'), /\bPAUSED\b/);
    const item = `#sandbox-list li[data-id="${sb.id}"]`;
    await page.waitForFunction((sel) => document.querySelector(`${sel} .chip`)?.textContent === 'PAUSED', item);
    assert.match(await page.getAttribute(`${item} .chip`, 'class'), /\bPAUSED\b/);
    assert.match(await page.textContent(`${item} .sb-meta`), /paused \d+s ago/);
    assert.match(await page.textContent('#detail-sub'), /paused \d+s ago/);
    // The chip has a colour of its own, unlike a running or stopped one.
    const colour = await page.evaluate(() => getComputedStyle(document.querySelector('#detail-status')).backgroundColor);
    assert.notEqual(colour, 'rgb(220, 252, 231)');
    assert.notEqual(colour, 'rgb(254, 243, 199)');
    // Resume in the place of Pause; Stop and Delete still there.
    assert.ok(await page.isHidden('#btn-pause'));
    assert.ok(await page.isEnabled('#btn-resume'));
    // A paused sandbox can still be snapshotted and forked (its files).
    assert.ok(await page.isEnabled('#btn-snapshot'));
    assert.ok(await page.isEnabled('#btn-fork'));
    assert.ok(await page.isEnabled('#btn-stop'));
    assert.ok(await page.isEnabled('#btn-delete'));
    assert.ok(await page.isDisabled('#btn-start'));
    await page.waitForSelector('#paused-banner:not([hidden])');
    assert.match(await page.textContent('#paused-text'), /was paused \d+s ago: its processes are frozen/);
    assert.ok(await page.isEnabled('#banner-resume'));
    await page.waitForFunction(() => /paused: resume it to use the terminal, which goes on where it was/.test(document.querySelector('#terminal-status').textContent));
    await shot(page, 'pause-01-paused');

    // The server agrees, and so does Docker.
    const paused = await api('GET', `/api/v1/sandbox/${sb.id}`);
    assert.equal(paused.status, 'PAUSED');
    assert.ok(Date.parse(paused.pausedAt) <= Date.now());
    assert.ok(frozen(sb.id), 'the container is not paused in Docker');
    const refused = await raw('POST', `/api/v1/sandbox/${sb.id}/exec`, {
      body: JSON.stringify({ shell: 'true' }), headers: { 'Content-Type': 'application/json' },
    });
    assert.equal(refused.status, 409);
    assert.equal((await refused.json()).error.code, 'sandbox_paused');

    // The console's other modes say it is paused instead of waiting on it.
    await mode(page, 'commands');
    assert.ok(await page.isDisabled('#console-input'));
    assert.match(await page.getAttribute('#console-input', 'placeholder'), /paused: resume it to run commands/);
    await mode(page, 'notebook');
    await page.waitForSelector('#notebook-hint:not([hidden])');
    assert.match(await page.textContent('#notebook-hint'), /paused: resume it to run cells/);
    assert.ok(await page.isDisabled('#notebook-run-all'));

    // Details: the status with its time, the lifecycle among the settings.
    await page.click('#tab-details');
    await page.waitForSelector('#facts dd[data-fact="Status"]');
    assert.match(await page.textContent('#facts dd[data-fact="Status"]'), /^PAUSED \(paused \d+s ago\)/);
    assert.match(await page.textContent('#facts dd[data-fact="Paused"]'), /paused \d+s ago/);
    assert.match(await page.textContent('#facts dd[data-fact="On timeout"]'), /^stop/);
    assert.match(await page.textContent('#facts dd[data-fact="Auto-resume"]'), /^no/);
    assert.equal(await page.textContent('#facts dd[data-fact="Idle timeout"]'), 'none');
    await shot(page, 'pause-02-details');

    await page.click('#btn-resume');
    await status(page, 'RUNNING');
    await page.waitForSelector('#paused-banner', { state: 'hidden' });
    assert.ok(await page.isVisible('#btn-pause'));
    assert.ok(await page.isHidden('#btn-resume'));
    await page.waitForFunction((sel) => document.querySelector(`${sel} .chip`)?.textContent === 'RUNNING', item);
    assert.doesNotMatch(await page.textContent('#detail-sub'), /paused/);
    const resumed = await api('GET', `/api/v1/sandbox/${sb.id}`);
    assert.equal(resumed.status, 'RUNNING');
    assert.equal(resumed.pausedAt, undefined);
    assert.ok(!frozen(sb.id), 'the container is still paused in Docker');

    // The same process, with the same PID, is still there.
    const alive = await exec(sb.id, `kill -0 ${pid} && cat /proc/${pid}/cmdline`);
    assert.equal(alive.exitCode, 0, `process ${pid}: ${alive.stderr}`);
    assert.deepEqual(alive.stdout.split('\0').filter(Boolean), ['sleep', '3600']);
    assert.equal((await exec(sb.id, 'cat /workspace/bg.pid')).stdout.trim(), pid);
    assert.equal((await api('GET', `/api/v1/sandbox/${sb.id}/processes/${bg.processId}`)).status, 'running');

    // The terminal session went on where it was.
    await page.click('#tab-console');
    await mode(page, 'terminal');
    await page.waitForFunction(() => /^Connected/.test(document.querySelector('#terminal-status').textContent));
    await onScreen(page, /before-42/, 'the output from before the pause');
    await page.click('#terminal-host');
    await page.keyboard.type('echo after-$((40+2))');
    await page.keyboard.press('Enter');
    await onScreen(page, /after-42/, 'the output after the resume');

    // Paused behind the page (the list, held back, has not told it yet): a
    // command is refused with the API's message, and the page then shows
    // the pause and offers Resume.
    await mode(page, 'commands');
    assert.ok(await page.isEnabled('#console-input'));
    let resumeListing = await holdListing(page);
    try {
      await api('POST', `/api/v1/sandbox/${sb.id}/pause`);
      await page.fill('#console-input', 'echo never');
      await page.press('#console-input', 'Enter');
      await page.waitForSelector('.msg .exit.fail');
      assert.match(await page.textContent('.msg .exit.fail'), new RegExp(`error: Sandbox ${sb.id} is paused: resume it`));
      await status(page, 'PAUSED');
      await page.waitForSelector('#paused-banner:not([hidden])');
      assert.ok(await page.isDisabled('#console-input'));
      await shot(page, 'pause-03-refused');
      await page.click('#banner-resume');
      await status(page, 'RUNNING');
    } finally {
      await resumeListing();
    }
    await page.waitForFunction(() => !document.querySelector('#console-input').disabled);
    await page.fill('#console-input', 'echo back-$((1+1))');
    await page.press('#console-input', 'Enter');
    await page.waitForFunction(() => /back-2/.test(document.querySelector('#transcript-host').textContent), null, { timeout: 30000 });

    // The same for a new terminal session: refused with the API's message,
    // and opened by itself once the sandbox is resumed.
    await mode(page, 'terminal');
    await page.click('#terminal-host');
    await page.keyboard.type('exit');
    await page.keyboard.press('Enter');
    await page.waitForSelector('#terminal-reconnect:not([hidden])');
    resumeListing = await holdListing(page);
    try {
      await api('POST', `/api/v1/sandbox/${sb.id}/pause`);
      await page.click('#terminal-reconnect');
      await page.waitForFunction((id) => document.querySelector('#notice-text').textContent
        .startsWith(`Could not open a terminal: Sandbox ${id} is paused: resume it`), sb.id, { timeout: 30000 });
      await status(page, 'PAUSED');
      await page.waitForFunction(() => /This sandbox is paused: resume it to use the terminal\.$/.test(document.querySelector('#terminal-status').textContent));
      await page.click('#banner-resume');
      await status(page, 'RUNNING');
    } finally {
      await resumeListing();
    }
    await page.waitForFunction(() => /^Connected/.test(document.querySelector('#terminal-status').textContent), null, { timeout: 30000 });
    await page.click('#terminal-host');
    await page.keyboard.type('echo again-$((40+3))');
    await page.keyboard.press('Enter');
    await onScreen(page, /again-43/, 'the output of the new session');
    await done(page);
  } finally {
    await api('DELETE', `/api/v1/sandbox/${sb.id}`).catch(() => {});
  }
});

test('the create form sets the lifecycle; an auto-resuming sandbox wakes for a command', async () => {
  const page = await signedInPage();
  await page.click('#create-toggle');
  await page.fill('#create-form input[name=name]', 'ui-auto-resume');
  await page.fill('#create-form input[name=memory]', '0.5');
  await page.selectOption('#create-form select[name=onTimeout]', 'pause');
  await page.check('#create-form input[name=autoResume]');
  // A bad idle timeout is refused by the form, naming the API's field.
  await page.fill('#create-form input[name=idleTimeout]', '-1');
  await page.click('#create-submit');
  await page.waitForFunction(() => /lifecycle\.idleTimeoutMinutes: must be at least 0/.test(document.querySelector('#create-status').textContent));
  assert.equal(await page.getAttribute('#create-form input[name=idleTimeout]', 'aria-invalid'), 'true');
  assert.equal((await api('GET', '/api/v1/sandbox?name=ui-auto-resume')).total, 0);
  await page.fill('#create-form input[name=idleTimeout]', '30');
  await page.click('#create-submit');
  await page.waitForFunction(() => document.querySelector('#detail-name')?.textContent === 'ui-auto-resume'
    && document.querySelector('#detail-status')?.textContent === 'RUNNING', null, { timeout: 60000 });
  const [sb] = (await api('GET', '/api/v1/sandbox?name=ui-auto-resume')).sandboxes;
  try {
    assert.deepEqual(sb.lifecycle, { onTimeout: 'pause', autoResume: true, idleTimeoutMinutes: 30 });

    await page.click('#tab-details');
    await page.waitForSelector('#facts dd[data-fact="On timeout"]');
    assert.match(await page.textContent('#facts dd[data-fact="On timeout"]'), /^pause: frozen in place/);
    assert.match(await page.textContent('#facts dd[data-fact="Auto-resume"]'), /^yes/);
    assert.match(await page.textContent('#facts dd[data-fact="Idle timeout"]'), /^30 min without use \(then paused\)/);

    // Paused elsewhere: the page follows, and says a command wakes it.
    await api('POST', `/api/v1/sandbox/${sb.id}/pause`);
    await status(page, 'PAUSED');
    assert.match(await page.textContent('#paused-text'), /resumes by itself when it is used/);
    await page.click('#tab-console');
    await mode(page, 'commands');
    assert.ok(await page.isEnabled('#console-input'));
    await page.fill('#console-input', 'echo woke-$((1+1))');
    await page.press('#console-input', 'Enter');
    await page.waitForFunction(() => /exit code|error/.test(document.querySelector('.msg .exit').textContent), null, { timeout: 30000 });
    assert.match(await page.textContent('.msg .exit'), /exit code 0/);
    assert.match(await page.textContent('.msg .stdout'), /woke-2/);
    assert.equal((await api('GET', `/api/v1/sandbox/${sb.id}`)).status, 'RUNNING');
    await status(page, 'RUNNING');
    await page.waitForSelector('#paused-banner', { state: 'hidden' });
    await shot(page, 'pause-04-auto-resumed');
    await done(page);
  } finally {
    await api('DELETE', `/api/v1/sandbox/${sb.id}`).catch(() => {});
  }
});
