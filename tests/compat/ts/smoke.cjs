// E2B's TypeScript SDK against Stockade, unchanged (a smoke test):
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY come from the environment, as
// a user sets them. Creates a sandbox, runs commands (with a streaming
// callback and a failing one), writes and reads a file, lists the sandbox by
// its metadata and kills it. Prints one JSON line with what it saw; exits
// non-zero on the first thing that does not hold.
'use strict'

const assert = require('node:assert/strict')
const { Sandbox, CommandExitError } = require('e2b')

async function main() {
  const marker = process.env.STOCKADE_COMPAT_RUN_ID || 'ts'
  const sbx = await Sandbox.create({
    timeoutMs: 300_000,
    metadata: { suite: marker, role: 'ts-smoke' },
  })
  const seen = { sandboxId: sbx.sandboxId }
  try {
    const chunks = []
    const out = await sbx.commands.run('echo hello from ts; echo to-stderr >&2', {
      onStdout: (d) => chunks.push(d),
    })
    assert.equal(out.exitCode, 0)
    assert.equal(out.stdout, 'hello from ts\n')
    assert.equal(out.stderr, 'to-stderr\n')
    assert.ok(chunks.join('').includes('hello from ts'), 'the onStdout callback saw the output')
    seen.stdout = out.stdout

    await assert.rejects(sbx.commands.run('exit 3'), (e) => {
      assert.ok(e instanceof CommandExitError, `a CommandExitError, got ${e}`)
      assert.equal(e.exitCode, 3)
      return true
    })

    await sbx.files.write('/tmp/ts-smoke.txt', 'written by the TypeScript SDK')
    assert.equal(await sbx.files.read('/tmp/ts-smoke.txt'), 'written by the TypeScript SDK')
    assert.ok(await sbx.files.exists('/tmp/ts-smoke.txt'))

    const paginator = Sandbox.list({ query: { metadata: { suite: marker, role: 'ts-smoke' } } })
    const listed = await paginator.nextItems()
    assert.deepEqual(
      listed.map((s) => s.sandboxId),
      [sbx.sandboxId],
    )
    assert.ok(await sbx.isRunning())
  } finally {
    seen.killed = await sbx.kill()
  }
  assert.equal(seen.killed, true)
  assert.equal(await Sandbox.getInfo(seen.sandboxId).then(() => 'found', () => 'gone'), 'gone')
  console.log(JSON.stringify(seen))
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e))
  process.exit(1)
})
