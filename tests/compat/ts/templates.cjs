// E2B's Template API through the TypeScript SDK against Stockade, unchanged:
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY come from the environment,
// STOCKADE_COMPAT_BASE_IMAGE is a local base image, STOCKADE_COMPAT_CONTEXT a
// build context with app/hello.txt. Builds a template with every step kind
// (its files uploaded through the link the API hands out, with a streamed
// body), then one from a Dockerfile in the background, creates sandboxes from
// both and checks each step's effect, and deletes them. Prints one JSON line
// with what it saw; exits non-zero on the first thing that does not hold.
'use strict'

const assert = require('node:assert/strict')
const { Sandbox, Template } = require('e2b')

async function remove(name) {
  await fetch(`${process.env.E2B_API_URL}/templates/${name}`, {
    method: 'DELETE',
    headers: { 'X-API-Key': process.env.E2B_API_KEY },
  })
}

async function out(sb, cmd, opts) {
  return (await sb.commands.run(cmd, opts)).stdout.trim()
}

async function waitReady(info) {
  const deadline = Date.now() + 300_000
  let offset = 0
  const lines = []
  for (;;) {
    const status = await Template.getBuildStatus(info, { logsOffset: offset })
    offset += status.logEntries.length
    lines.push(...status.logEntries.map((e) => e.message))
    assert.notEqual(status.status, 'error', JSON.stringify(status.reason))
    if (status.status === 'ready' && status.logEntries.length === 0) return lines
    assert.ok(Date.now() < deadline, 'the build did not finish')
    await new Promise((r) => setTimeout(r, 500))
  }
}

async function main() {
  const marker = process.env.STOCKADE_COMPAT_RUN_ID || 'ts'
  const base = process.env.STOCKADE_COMPAT_BASE_IMAGE
  const context = process.env.STOCKADE_COMPAT_CONTEXT
  const seen = {}

  const name = `ts-steps-${marker}`
  try {
    const template = Template({ fileContextPath: context })
      .fromImage(base)
      .setEnvs({ GREETING: 'hi-ts' })
      .setWorkdir('/opt/ts')
      .copy('app/hello.txt', '/opt/ts/')
      .runCmd('echo built > /opt/ts/built.txt')
      .setUser('user')
      .runCmd('id -un > /home/user/who.txt')
      .setStartCmd('touch /tmp/started && sleep 100000', 'test -f /tmp/started')
    const logs = []
    const info = await Template.build(template, name, { onBuildLogs: (e) => logs.push(e.message) })
    assert.ok(info.templateId && info.buildId)
    assert.ok(logs.some((l) => l.includes('RUN echo built')), logs.join('\n'))
    assert.equal(await Template.aliasExists(name), true)
    const sb = await Sandbox.create(name, { timeoutMs: 300_000 })
    try {
      assert.equal(await out(sb, 'pwd'), '/opt/ts')
      assert.equal(await out(sb, 'id -un'), 'user')
      assert.equal(await out(sb, 'echo $GREETING'), 'hi-ts')
      assert.equal(await out(sb, 'cat /opt/ts/hello.txt'), 'hello from the context')
      assert.equal(await out(sb, 'cat /opt/ts/built.txt'), 'built')
      assert.equal(await out(sb, 'cat /home/user/who.txt'), 'user')
      assert.equal(await out(sb, 'test -f /tmp/started && echo yes'), 'yes')
      seen.steps = true
    } finally {
      await sb.kill()
    }
  } finally {
    await remove(name)
  }
  assert.equal(await Template.aliasExists(name), false)

  const fromFile = `ts-dockerfile-${marker}`
  try {
    const template = Template({ fileContextPath: context }).fromDockerfile(
      `FROM ${base}\nENV MODE=slow\nWORKDIR /srv\nCOPY app/hello.txt ./\nRUN echo made > made.txt\n`,
    )
    const info = await Template.buildInBackground(template, fromFile)
    const lines = await waitReady(info)
    assert.ok(lines.some((l) => l.includes('made.txt')), lines.join('\n'))
    const sb = await Sandbox.create(fromFile, { timeoutMs: 120_000 })
    try {
      assert.equal(await out(sb, 'pwd'), '/srv')
      assert.equal(await out(sb, 'cat made.txt hello.txt'), 'made\nhello from the context')
      assert.equal(await out(sb, 'echo $MODE'), 'slow')
      seen.dockerfile = true
    } finally {
      await sb.kill()
    }
  } finally {
    await remove(fromFile)
  }
  console.log(JSON.stringify(seen))
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
