// E2B's Volume API through the TypeScript SDK against Stockade, unchanged:
// E2B_API_URL, E2B_SANDBOX_URL, E2B_VOLUME_API_URL and E2B_API_KEY come from
// the environment, STOCKADE_COMPAT_OTHER_KEY is another account's key.
// Creates a volume, writes through the content API, mounts it in two
// sandboxes (one read-write through `Sandbox.create({volumeMounts})`, one
// read-only through Stockade's `readOnly` in E2B's own create body, reached
// with `Sandbox.connect`), checks each sees the other's writes and that the
// other account gets nothing, and destroys the volume. Prints one JSON line
// with what it saw; exits non-zero on the first thing that does not hold.
'use strict'

const assert = require('node:assert/strict')
const { Sandbox, Volume, CommandExitError, VolumeNotFoundError } = require('e2b')

async function readOnlySandbox(name, marker) {
  const res = await fetch(`${process.env.E2B_API_URL}/sandboxes`, {
    method: 'POST',
    headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify({
      templateID: 'base',
      timeout: 300,
      metadata: { suite: marker, role: 'ts-volume-ro' },
      volumeMounts: [{ name, path: '/data', readOnly: true }],
    }),
  })
  const body = await res.json()
  assert.equal(res.status, 201, JSON.stringify(body))
  return Sandbox.connect(body.sandboxID)
}

async function main() {
  const marker = process.env.STOCKADE_COMPAT_RUN_ID || 'ts'
  const other = process.env.STOCKADE_COMPAT_OTHER_KEY
  assert.ok(other, 'STOCKADE_COMPAT_OTHER_KEY is set')
  const seen = {}
  const vol = await Volume.create(`ts-vol-${marker}`)
  seen.volumeId = vol.volumeId
  let destroyed = false
  try {
    assert.ok(vol.token, 'the create answer carries the content token')
    const again = await Volume.connect(vol.volumeId)
    assert.equal(again.token, vol.token)
    assert.ok((await Volume.list()).some((v) => v.volumeId === vol.volumeId))
    assert.equal((await Volume.getInfo(vol.volumeId)).name, vol.name)

    // The content API, without a sandbox.
    const written = await vol.writeFile('/seed/input.txt', 'prepared once\n')
    assert.equal(written.size, 'prepared once\n'.length)
    assert.equal(await vol.readFile('/seed/input.txt'), 'prepared once\n')
    const bytes = await vol.readFile('/seed/input.txt', { format: 'bytes' })
    assert.equal(Buffer.from(bytes).toString(), 'prepared once\n')
    assert.ok(await vol.exists('/seed/input.txt'))
    assert.equal(await vol.exists('/nope.txt'), false)
    await vol.makeDir('/results', { force: true })
    assert.deepEqual((await vol.list('/')).map((e) => e.name).sort(), ['results', 'seed'])
    assert.equal((await vol.getInfo('/seed/input.txt')).name, 'input.txt')
    await vol.writeFile('/scratch.txt', 'scratch')
    await vol.remove('/scratch.txt')
    assert.equal(await vol.exists('/scratch.txt'), false)

    // Two sandboxes share it, one read-only.
    const rw = await Sandbox.create({
      timeoutMs: 300_000,
      metadata: { suite: marker, role: 'ts-volume-rw' },
      volumeMounts: { '/data': vol },
    })
    try {
      const ro = await readOnlySandbox(vol.name, marker)
      try {
        for (const sb of [rw, ro]) {
          assert.equal((await sb.commands.run('cat /data/seed/input.txt')).stdout, 'prepared once\n')
        }
        await rw.commands.run('echo from-rw > /data/results/rw.txt')
        assert.equal((await ro.commands.run('cat /data/results/rw.txt')).stdout, 'from-rw\n')
        assert.equal(await vol.readFile('/results/rw.txt'), 'from-rw\n')
        await vol.writeFile('/results/api.txt', 'from the API')
        for (const sb of [rw, ro]) {
          assert.equal((await sb.commands.run('cat /data/results/api.txt')).stdout, 'from the API')
        }
        await assert.rejects(ro.commands.run('echo no > /data/results/ro.txt'), (e) => {
          assert.ok(e instanceof CommandExitError, `a CommandExitError, got ${e}`)
          assert.match(e.stderr, /[Rr]ead-only/)
          return true
        })
        assert.equal(await vol.exists('/results/ro.txt'), false)
        seen.shared = true
        // Mounted: not destroyed.
        await assert.rejects(Volume.destroy(vol.volumeId))
      } finally {
        await ro.kill()
      }
    } finally {
      await rw.kill()
    }

    // Another account: not found, its token opens nothing of this volume.
    await assert.rejects(Volume.getInfo(vol.volumeId, { apiKey: other }), VolumeNotFoundError)
    assert.equal(await Volume.destroy(vol.volumeId, { apiKey: other }), false)
    assert.ok(!(await Volume.list({ apiKey: other })).some((v) => v.volumeId === vol.volumeId))
    const res = await fetch(
      `${process.env.E2B_VOLUME_API_URL}/volumecontent/${vol.volumeId}/file?path=/seed/input.txt`,
      { headers: { Authorization: `Bearer ${other}` } },
    )
    assert.ok([401, 403, 404].includes(res.status), `another account's key: ${res.status}`)
    seen.isolated = true

    const token = vol.token
    assert.equal(await Volume.destroy(vol.volumeId), true)
    destroyed = true
    await assert.rejects(Volume.getInfo(vol.volumeId), VolumeNotFoundError)
    const gone = await fetch(
      `${process.env.E2B_VOLUME_API_URL}/volumecontent/${vol.volumeId}/file?path=/seed/input.txt`,
      { headers: { Authorization: `Bearer ${token}` } },
    )
    assert.equal(gone.status, 404)
    seen.destroyed = true
  } finally {
    if (!destroyed) await Volume.destroy(vol.volumeId).catch(() => {})
  }
  console.log(JSON.stringify(seen))
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
