// The API reference page (/api/v1/docs) as a new user reads it: sandboxes
// first and the administration last, Markdown rendered (code, links), and
// the create body with Stockade's own fields first and the fields only
// prime-sandboxes sends grouped under a heading of their own.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { env, shot } from '../lib/harness.mjs';

test('the API reference reads in the order a user needs it', async () => {
  const context = await env.browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const port = new URL(env.base).port;
  const outside = [];
  context.on('request', (r) => {
    const u = new URL(r.url());
    if (!(u.hostname === '127.0.0.1' && u.port === port) && !['data:', 'blob:', 'about:'].includes(u.protocol)) outside.push(u.href);
  });
  await page.goto(`${env.base}/api/v1/docs`);
  await page.waitForSelector('section h2');
  const sections = await page.$$eval('section > h2', (hs) => hs.map((h) => h.textContent.trim()));
  assert.equal(sections[0], 'sandboxes', `sections: ${sections}`);
  assert.equal(sections[sections.length - 1], 'system', `sections: ${sections}`);
  assert.ok(sections.indexOf('accounts') > sections.indexOf('exec'), `sections: ${sections}`);
  assert.ok(sections.indexOf('hosts') > sections.indexOf('files'), `sections: ${sections}`);

  // Markdown: inline code and links are rendered, not shown as marks.
  const text = await page.textContent('body');
  assert.ok(!/\]\(http/.test(text), 'a Markdown link was left as text');
  assert.ok((await page.$$('section code')).length > 50, 'inline code is rendered');

  // The create body: own fields, then the prime-sandboxes group.
  const rows = await page.$$eval('details.op', (ops) => {
    const create = ops.find((d) => d.querySelector('.method')?.textContent === 'POST'
      && d.querySelector('.path')?.textContent === '/api/v1/sandbox');
    const heading = create && [...create.querySelectorAll('h4')].find((h) => h.textContent === 'Request body');
    let table = heading && heading.nextElementSibling;
    while (table && table.tagName !== 'TABLE') table = table.nextElementSibling;
    // Each row's first cell: the field (or the group's heading).
    return table ? [...table.querySelectorAll('tr')].map((tr) => tr.cells[0].textContent.trim()) : [];
  });
  const group = rows.findIndex((r) => /prime-sandboxes compatibility/.test(r));
  assert.ok(group > 0, `no prime-sandboxes group in the create body: ${rows.slice(0, 5)}`);
  const own = rows.slice(1, group);
  const compat = rows.slice(group + 1);
  for (const f of ['name', 'dockerImage', 'lifecycle', 'networkPolicy']) assert.ok(own.includes(f), `${f} among the own fields: ${own}`);
  for (const f of ['secrets', 'vm', 'networkAllowlist']) assert.ok(compat.includes(f), `${f} in the compatibility group: ${compat}`);
  await shot(page, '90-api-docs');
  await context.close();
  assert.deepEqual(errors, []);
  assert.deepEqual(outside, []);
});
