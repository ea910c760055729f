// E2B's TypeScript SDK against Stockade, unchanged (a smoke test):
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY come from the environment, as
// a user sets them. Creates a sandbox, runs commands (with a streaming
// callback and a failing one), writes and reads a file, lists the sandbox by
// its metadata, pauses it with a process running and resumes it (the process
// goes on), lets a pausing timeout pause it and wakes it with a command,
// and kills it. Prints one JSON line with what it saw; exits
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

    // Pause keeps the processes: the same PID after connect resumes it.
    const counter =
      "sh -c 'echo $$ > /tmp/pid; i=0; while :; do i=$((i+1)); echo $i > /tmp/n.new; mv /tmp/n.new /tmp/n; sleep 0.1; done'"
    await sbx.commands.run(counter, { background: true })
    const pid = await waitForPid(sbx)
    assert.equal(await sbx.pause(), true)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
    const resumed = await Sandbox.connect(sbx.sandboxId)
    assert.equal((await resumed.getInfo()).state, 'running')
    const alive = await resumed.commands.run(`kill -0 ${pid} && echo alive`)
    assert.equal(alive.stdout.trim(), 'alive')
    seen.pidAfterResume = pid

    // A timeout that pauses, and a command that wakes the sandbox up.
    const napper = await Sandbox.create({
      timeoutMs: 300_000,
      metadata: { suite: marker, role: 'ts-napper' },
      lifecycle: { onTimeout: 'pause', autoResume: true },
    })
    try {
      await napper.commands.run(counter, { background: true })
      const napPid = await waitForPid(napper)
      await napper.setTimeout(2_000)
      const deadline = Date.now() + 30_000
      while ((await Sandbox.getInfo(napper.sandboxId)).state !== 'paused') {
        assert.ok(Date.now() < deadline, 'not paused 30 s after its timeout')
        await new Promise((r) => setTimeout(r, 500))
      }
      const woke = await napper.commands.run(`kill -0 ${napPid} && echo same`)
      assert.equal(woke.stdout.trim(), 'same')
      assert.equal((await Sandbox.getInfo(napper.sandboxId)).state, 'running')
      seen.autoResumed = true
    } finally {
      await napper.kill()
    }
  } finally {
    seen.killed = await sbx.kill()
  }
  assert.equal(seen.killed, true)
  assert.equal(await Sandbox.getInfo(seen.sandboxId).then(() => 'found', () => 'gone'), 'gone')
  console.log(JSON.stringify(seen))
}

// The PID the counter wrote, once it has.
async function waitForPid(sbx) {
  const deadline = Date.now() + 10_000
  for (;;) {
    const pid = (await sbx.commands.run('cat /tmp/pid 2>/dev/null || true')).stdout.trim()
    if (pid) return pid
    assert.ok(Date.now() < deadline, 'the counter never started')
    await new Promise((r) => setTimeout(r, 100))
  }
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e))
  process.exit(1)
})
