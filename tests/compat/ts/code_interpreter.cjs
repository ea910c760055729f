// E2B's code-interpreter TypeScript SDK (npm `@e2b/code-interpreter`)
// against Stockade, unchanged (a smoke test): E2B_API_URL, E2B_SANDBOX_URL
// and E2B_API_KEY come from the environment, as a user sets them. Creates a
// sandbox of the SDK's default template (code-interpreter-v1), runs Python
// cells (state across cells, streamed stdout, an error, a matplotlib chart),
// runs code in a context of its own and in JavaScript, and kills the
// sandbox. Prints one JSON line with what it saw; exits non-zero on the
// first thing that does not hold.
'use strict'

const assert = require('node:assert/strict')
const { Sandbox } = require('@e2b/code-interpreter')

async function main() {
  const marker = process.env.STOCKADE_COMPAT_RUN_ID || 'ts-code'
  assert.equal(Sandbox.defaultTemplate, 'code-interpreter-v1')
  const sbx = await Sandbox.create({
    timeoutMs: 300_000,
    metadata: { suite: marker, role: 'ts-code-interpreter' },
  })
  const seen = { sandboxId: sbx.sandboxId }
  try {
    const info = await sbx.getInfo()
    assert.equal(info.templateId, 'code-interpreter-v1')

    // State across cells.
    const first = await sbx.runCode('x = 1')
    assert.equal(first.error, undefined, JSON.stringify(first.error))
    const second = await sbx.runCode('x + 1')
    assert.equal(second.text, '2')
    seen.text = second.text

    // Streamed stdout, in order.
    const lines = []
    const printed = await sbx.runCode('print("one", flush=True)\nprint("two")', {
      onStdout: (m) => lines.push(m.line),
    })
    assert.equal(lines.join(''), 'one\ntwo\n')
    assert.equal(printed.logs.stdout.join(''), 'one\ntwo\n')
    seen.stdout = lines.join('')

    // An error is part of the execution, not a thrown exception.
    const errors = []
    const failed = await sbx.runCode('1/0', { onError: (e) => errors.push(e.name) })
    assert.ok(failed.error, 'an error')
    assert.equal(failed.error.name, 'ZeroDivisionError')
    assert.ok(failed.error.traceback.includes('ZeroDivisionError'))
    assert.deepEqual(errors, ['ZeroDivisionError'])
    seen.error = failed.error.name

    // A matplotlib plot: a PNG and the chart's data.
    const plot = await sbx.runCode(
      [
        'import matplotlib.pyplot as plt',
        'plt.figure()',
        'plt.plot([1, 2, 3], [4, 5, 6], label="up")',
        'plt.title("Up")',
        'plt.show()',
      ].join('\n'),
    )
    assert.equal(plot.error, undefined, JSON.stringify(plot.error))
    const chartResult = plot.results.find((r) => r.png)
    assert.ok(chartResult, `a PNG result, got ${JSON.stringify(plot.results.map((r) => r.formats()))}`)
    assert.ok(chartResult.png.startsWith('iVBORw0KGgo'), 'base64 of a PNG')
    assert.ok(chartResult.chart, 'the chart data')
    assert.equal(chartResult.chart.type, 'line')
    assert.equal(chartResult.chart.title, 'Up')
    seen.chart = chartResult.chart.type

    // A context of its own.
    const ctx = await sbx.createCodeContext({ cwd: '/tmp', language: 'python' })
    assert.ok(ctx.id)
    assert.equal(ctx.cwd, '/tmp')
    const cwd = await sbx.runCode('import os; os.getcwd()', { context: ctx })
    assert.equal(cwd.text, '/tmp')
    const isolated = await sbx.runCode('x', { context: ctx })
    assert.equal(isolated.error && isolated.error.name, 'NameError')
    const listed = await sbx.listCodeContexts()
    assert.ok(listed.some((c) => c.id === ctx.id), 'the context is listed')
    await sbx.removeCodeContext(ctx)
    assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id), 'the context is gone')
    seen.contextCwd = cwd.text

    // JavaScript.
    const js = await sbx.runCode('console.log("hi from js"); 1 + 1', { language: 'javascript' })
    assert.equal(js.error, undefined, JSON.stringify(js.error))
    assert.equal(js.logs.stdout.join(''), 'hi from js\n')
    assert.equal(js.text, '2')
    seen.javascript = js.text
  } finally {
    seen.killed = await sbx.kill()
  }
  assert.equal(seen.killed, true)
  console.log(JSON.stringify(seen))
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e))
  process.exit(1)
})
