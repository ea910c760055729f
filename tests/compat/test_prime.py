"""Prime Intellect's `prime-sandboxes` SDK against Stockade, unchanged:
PRIME_API_BASE_URL=http://HOST:PORT and a Stockade
token as PRIME_API_KEY. Commands and files go through the sandbox gateway
that POST /sandbox/{id}/auth points at (on Stockade itself)."""

import asyncio
import os
import time

import pytest

prime = pytest.importorskip("prime_sandboxes")

from prime_sandboxes import (  # noqa: E402
    APIClient,
    APIError,
    AsyncAPIClient,
    AsyncSandboxClient,
    CommandTimeoutError,
    CreateSandboxRequest,
    SandboxClient,
    SandboxFileNotFoundError,
    StartCommand,
)
from prime_sandboxes.models import VolumeMount  # noqa: E402

pytestmark = pytest.mark.usefixtures("prime_env")


@pytest.fixture(scope="module")
def client(prime_env):
    return SandboxClient(APIClient())


def _request(run_id, **kw):
    base = dict(
        name=f"p-{run_id}-{os.urandom(3).hex()}",
        docker_image=os.environ.get("STOCKADE_TEST_IMAGE_DEBIAN", "stockade-test-debian:latest"),
        labels=[f"suite-{run_id}"],
    )
    base.update(kw)
    return CreateSandboxRequest(**base)


@pytest.fixture(scope="module")
def sandbox(client, run_id):
    sb = client.create(
        _request(
            run_id,
            start_command=StartCommand(executable="sleep", args=["infinity"]),
            environment_vars={"FROM_ENV": "env-value"},
            secrets={"FROM_SECRET": "secret-value"},
            cpu_cores=1,
            memory_gb=1,
        )
    )
    client.wait_for_creation(sb.id)
    yield sb
    client.delete(sb.id)


def test_create_answers_what_the_sdk_requires(client, sandbox):
    # The SDK validated the answer (updatedAt, diskMountPath, whole-number
    # timeoutMinutes, startCommand as {executable, args}).
    assert sandbox.status == "RUNNING"
    assert sandbox.disk_mount_path == "/workspace"
    assert sandbox.updated_at >= sandbox.created_at
    assert sandbox.timeout_minutes == 60
    assert sandbox.start_command.executable == "sleep"
    assert sandbox.start_command.args == ["infinity"]
    again = client.get(sandbox.id)
    assert again.id == sandbox.id and again.start_command == sandbox.start_command


def test_list_and_statuses(client, sandbox, run_id):
    page = client.list(labels=[f"suite-{run_id}"], per_page=100)
    assert sandbox.id in {s.id for s in page.sandboxes}
    statuses = client.get_sandbox_statuses([sandbox.id, "aaaaaaaaaaaa"])
    assert [s.status for s in statuses.statuses] == ["RUNNING"]
    assert [e.code for e in statuses.errors] == ["NOT_FOUND"]
    assert client.bulk_wait_for_creation([sandbox.id])[sandbox.id] == "RUNNING"


def test_a_paused_sandbox_reads_as_paused_and_refuses_commands_until_resumed(
    prime_env, client, run_id
):
    import httpx

    sb = client.create(
        _request(run_id, start_command=StartCommand(executable="sleep", args=["infinity"]))
    )
    try:
        client.wait_for_creation(sb.id)
        pid = client.execute_command(sb.id, "sleep 1000 >/dev/null 2>&1 & echo $!").stdout.strip()
        # Paused with Stockade's own API (prime-sandboxes has no pause).
        rest = httpx.Client(
            base_url=prime_env.base, headers={"Authorization": f"Bearer {os.environ['PRIME_API_KEY']}"}
        )
        assert rest.post(f"/api/v1/sandbox/{sb.id}/pause").status_code == 200
        assert client.get(sb.id).status == "PAUSED"
        statuses = client.get_sandbox_statuses([sb.id])
        assert [s.status for s in statuses.statuses] == ["PAUSED"]
        with pytest.raises(APIError) as refused:
            client.execute_command(sb.id, "true", timeout=10)
        assert "paused" in str(refused.value).lower()
        assert rest.post(f"/api/v1/sandbox/{sb.id}/resume").status_code == 200
        assert client.execute_command(sb.id, f"kill -0 {pid} && echo alive").stdout == "alive\n"
    finally:
        client.delete(sb.id)


def test_execute_command(client, sandbox):
    r = client.execute_command(
        sandbox.id, "echo $FROM_ENV $FROM_SECRET $EXTRA; pwd; echo oops >&2; exit 4",
        working_dir="/tmp", env={"EXTRA": "extra-value"},
    )
    assert r.exit_code == 4
    assert r.stdout == "env-value secret-value extra-value\n/tmp\n"
    assert r.stderr == "oops\n"
    assert client.execute_command(sandbox.id, "id -un", user="root").stdout == "root\n"


def test_execute_command_timeout(client, sandbox):
    start = time.monotonic()
    with pytest.raises(CommandTimeoutError):
        client.execute_command(sandbox.id, "sleep 30", timeout=1)
    assert time.monotonic() - start < 15


def test_background_job(client, sandbox):
    status = client.run_background_job(sandbox.id, "sleep 1; echo finished; exit 3", poll_interval=1)
    assert status.completed and status.exit_code == 3
    assert status.stdout.strip() == "finished"


def test_upload_download_read(client, sandbox, tmp_path):
    local = tmp_path / "up.bin"
    payload = os.urandom(3 * 1024 * 1024)
    local.write_bytes(payload)
    up = client.upload_file(sandbox.id, "/tmp/up/file.bin", str(local))
    assert up.success and up.path == "/tmp/up/file.bin" and up.size == len(payload)
    back = tmp_path / "down.bin"
    client.download_file(sandbox.id, "/tmp/up/file.bin", str(back))
    assert back.read_bytes() == payload
    client.upload_bytes(sandbox.id, "/tmp/up/text.txt", b"0123456789\n", "text.txt")
    whole = client.read_file(sandbox.id, "/tmp/up/text.txt")
    assert whole.content == "0123456789\n" and whole.size == 11
    window = client.read_file(sandbox.id, "/tmp/up/text.txt", offset=2, length=3)
    assert window.content == "234" and window.total_size == 11 and window.truncated
    with pytest.raises(SandboxFileNotFoundError):
        client.read_file(sandbox.id, "/tmp/up/none.txt")


def test_logs(client, run_id):
    sb = client.create(
        _request(run_id, start_command=StartCommand(executable="sh", args=["-c", "echo logged-line; sleep 600"]))
    )
    try:
        deadline = time.time() + 10
        logs = ""
        while "logged-line" not in logs and time.time() < deadline:
            logs = client.get_logs(sb.id)
            time.sleep(0.3)
        assert "logged-line" in logs
    finally:
        client.delete(sb.id)


def test_bulk_delete_by_ids_and_labels(client, run_id):
    label = f"bulk-{run_id}"
    a = client.create(_request(run_id, labels=[label]))
    b = client.create(_request(run_id, labels=[label]))
    c = client.create(_request(run_id))
    r = client.bulk_delete(sandbox_ids=[c.id])
    assert r.succeeded == [c.id] and r.failed == []
    r = client.bulk_delete(labels=[label])
    assert sorted(r.succeeded) == sorted([a.id, b.id])
    r = client.bulk_delete(sandbox_ids=[a.id])
    assert r.succeeded == [] and r.failed[0]["sandbox_id"] == a.id


def test_checkpoints_restore(client, sandbox, run_id):
    client.execute_command(sandbox.id, "echo checkpointed > /workspace/cp.txt")
    cp = client.checkpoint(sandbox.id)
    cp = client.wait_for_checkpoint(cp.id, timeout_seconds=120)
    assert cp.state == "DURABLE"
    assert cp.id in {c.id for c in client.list_checkpoints(sandbox.id)}
    restored = client.create(
        CreateSandboxRequest(name=f"restored-{run_id}", checkpoint_id=cp.id, labels=[f"suite-{run_id}"])
    )
    try:
        client.wait_for_creation(restored.id)
        assert client.read_file(restored.id, "/workspace/cp.txt").content == "checkpointed\n"
    finally:
        client.delete(restored.id)
    client.delete_checkpoint(cp.id)


def test_live_process_stdin_and_signal(prime_env, sandbox):
    async def scenario():
        async with AsyncAPIClient() as api:
            c = AsyncSandboxClient(api)
            p = await c.open_process(sandbox.id, "read line; echo got:$line; sleep 300")
            await p.write_stdin(b"hello\n")
            first = await asyncio.wait_for(p.stdout.__anext__(), 20)
            assert first == b"got:hello\n"
            await p.kill()
            code = await asyncio.wait_for(p.wait(), 20)
            assert code != 0
            await p.aclose()
            await c.aclose()

    asyncio.run(scenario())


def test_image_without_bash_gives_a_clear_error(client, run_id):
    sb = client.create(
        _request(run_id, docker_image=os.environ.get("STOCKADE_TEST_IMAGE", "stockade-test-base:latest"))
    )
    try:
        with pytest.raises(APIError) as err:
            client.execute_command(sb.id, "echo hi")
        text = str(err.value)
        assert "/bin/bash" in text and "does not exist" in text, text
    finally:
        client.delete(sb.id)


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda c, sid: c.create_ssh_session(sid, "ssh-ed25519 AAAA test"), "SSH"),
        (lambda c, sid: c.create_lan_network("lan"), "LAN"),
        (lambda c, sid: c.set_network(sid, allow=["example.com"]), "egress"),
        (lambda c, sid: c.volumes.publish(sid, "vol", wait=False), "volume"),
    ],
)
def test_what_cannot_map_is_a_501_with_a_sentence(client, sandbox, call, words):
    with pytest.raises(APIError) as err:
        call(client, sandbox.id)
    text = str(err.value)
    assert "HTTP 501" in text and words.lower() in text.lower(), text


def test_create_fields_that_cannot_map(client, run_id):
    with pytest.raises(APIError) as err:
        client.create(_request(run_id, region="eu-west"))
    assert "HTTP 501" in str(err.value) and "region" in str(err.value)


def test_an_idle_timeout_is_the_lifecycles(client, run_id):
    sb = client.create(_request(run_id, idle_timeout_minutes=5))
    try:
        client.wait_for_creation(sb.id)
        raw = client.client.request("GET", f"/sandbox/{sb.id}")
        assert raw["lifecycle"]["idleTimeoutMinutes"] == 5, raw
    finally:
        client.delete(sb.id)


def test_volumes_are_shared_between_sandboxes(client, run_id):
    name = f"pv-{run_id}-{os.urandom(2).hex()}"
    vol = client.volumes.create(name)
    assert vol.name == name and vol.id
    ids = []
    try:
        assert client.volumes.get(name).id == vol.id
        assert name in [v.name for v in client.volumes.list(per_page=1000).volumes]
        sleep = StartCommand(executable="sleep", args=["infinity"])
        writer = client.create(
            _request(run_id, start_command=sleep,
                     volumes=[VolumeMount(name=name, mount_path="/mnt/shared")])
        )
        ids.append(writer.id)
        reader = client.create(
            _request(run_id, start_command=sleep,
                     volumes=[VolumeMount(name=name, mount_path="/ro", read_only=True)])
        )
        ids.append(reader.id)
        client.wait_for_creation(writer.id)
        client.wait_for_creation(reader.id)
        client.execute_command(writer.id, "echo shared > /mnt/shared/f.txt")
        assert client.execute_command(reader.id, "cat /ro/f.txt").stdout == "shared\n"
        refused = client.execute_command(reader.id, "echo x > /ro/g.txt")
        assert refused.exit_code != 0
        # Mounted: the delete is refused, naming the sandboxes.
        with pytest.raises(APIError) as err:
            client.volumes.delete(name)
        assert "409" in str(err.value) and writer.id in str(err.value), str(err.value)
    finally:
        for sid in ids:
            client.delete(sid)
    for _ in range(100):
        try:
            client.volumes.delete(name)
            break
        except APIError as e:
            # The sandboxes' records end as their deletes finish.
            assert "409" in str(e), str(e)
            time.sleep(0.2)
    with pytest.raises(APIError) as err:
        client.volumes.get(name)
    assert "404" in str(err.value), str(err.value)


def _built_template(api, name, steps):
    """A template built through Stockade's own API from the Debian test
    image; its id."""
    status, body = api.request("POST", "/api/v1/templates", {
        "name": f"{name}:v1",
        "fromImage": os.environ.get("STOCKADE_TEST_IMAGE_DEBIAN", "stockade-test-debian:latest"),
        "steps": steps,
    })
    assert status == 202, body
    template, build = body["templateId"], body["builds"][0]["buildId"]
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        status, body = api.request("GET", f"/api/v1/templates/{template}/builds/{build}")
        assert status == 200, body
        if body["build"]["status"] in ("ready", "error"):
            break
        time.sleep(0.5)
    assert body["build"]["status"] == "ready", body
    return template


def test_docker_image_names_a_template(client, prime_env, run_id):
    """prime's create has only `docker_image`: it names one of the
    caller's templates by `name[:tag]`, as E2B's templateID does."""
    api = prime_env.api("tenant-a")
    name = f"prime-{run_id}".lower()
    template = _built_template(api, name, [
        {"type": "WORKDIR", "path": "/srv"},
        {"type": "ENV", "vars": [["FROM_TEMPLATE", "baked-in"]]},
        {"type": "RUN", "command": "echo from the build > /srv/baked.txt"},
    ])
    try:
        for reference in (name, f"{name}:v1"):
            sb = client.create(_request(run_id, docker_image=reference))
            try:
                client.wait_for_creation(sb.id)
                r = client.execute_command(sb.id, "cat /srv/baked.txt; echo $FROM_TEMPLATE")
                assert (r.exit_code, r.stdout) == (0, "from the build\nbaked-in\n"), r
            finally:
                client.delete(sb.id)
        # A tag the template does not have is a 404 that names it.
        with pytest.raises(APIError) as err:
            client.create(_request(run_id, docker_image=f"{name}:no-such-tag"))
        assert "no-such-tag" in str(err.value), err.value
        # For another account the name is only an image, which no host has.
        other = SandboxClient(APIClient(api_key=prime_env.tokens["tenant-b"]))
        with pytest.raises(APIError):
            other.create(_request(run_id, docker_image=name))
    finally:
        api.request("DELETE", f"/api/v1/templates/{template}")
