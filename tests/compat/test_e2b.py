"""E2B's Python SDK against Stockade, unchanged:
E2B_API_URL = E2B_SANDBOX_URL = http://HOST:PORT/e2b and a Stockade token as
E2B_API_KEY. Every call is the SDK's own; a few checks read the answers
with plain HTTP to see what the SDK does not expose."""

import hashlib
import io
import os
import threading
import time

import httpx
import pytest

e2b = pytest.importorskip("e2b")

from e2b import (  # noqa: E402
    CommandExitException,
    FilesystemEventType,
    FileType,
    NotFoundException,
    PtySize,
    Sandbox,
    SandboxException,
    SandboxQuery,
    SandboxState,
    TimeoutException,
)

pytestmark = pytest.mark.usefixtures("e2b_env")


@pytest.fixture(scope="module")
def sandbox(e2b_env, run_id):
    """One sandbox (default template) most tests share."""
    sb = Sandbox.create(timeout=900, metadata={"suite": run_id, "role": "shared"})
    yield sb
    sb.kill()


# --- create and templates ------------------------------------------------------


def test_create_default_template_answers_like_e2b(sandbox, e2b_env):
    info = sandbox.get_info()
    assert info.sandbox_id == sandbox.sandbox_id
    assert info.template_id == "base"
    assert info.state == SandboxState.RUNNING
    assert info.metadata["role"] == "shared"
    assert info.cpu_count >= 1 and info.memory_mb >= 512
    assert info.end_at > info.started_at
    assert sandbox.is_running()
    # The in-sandbox agent answers through Stockade with the envd token.
    assert sandbox._envd_access_token


def test_create_another_template_and_envs(e2b_env, run_id):
    # The test image by another name than the server's default ("base").
    template = e2b_env.debian_image.rsplit(":", 1)[0]
    sb = Sandbox.create(
        template=template,
        envs={"GREETING": "hello from envs"},
        metadata={"suite": run_id},
        timeout=300,
    )
    try:
        assert sb.get_info().template_id == template
        out = sb.commands.run("echo $GREETING")
        assert out.stdout == "hello from envs\n"
    finally:
        assert sb.kill()


def test_unknown_template_and_bad_input_are_sdk_errors(e2b_env):
    with pytest.raises(SandboxException) as err:
        Sandbox.create(template="no such template!", timeout=60)
    assert "Template" in str(err.value) or "templateID" in str(err.value)
    with pytest.raises(SandboxException) as err:
        Sandbox.create(metadata={"": "empty key"}, timeout=60)
    assert "metadata" in str(err.value)


def test_metadata_takes_many_keys(e2b_env, run_id):
    many = {f"k{i:02d}": f"v{i}" for i in range(64)}
    sb = Sandbox.create(metadata={**many, "suite": run_id}, timeout=120)
    try:
        assert sb.get_info().metadata == {**many, "suite": run_id}
        # Stockade's own API keeps its five-tag limit, unaffected.
        status, body = e2b_env.api().request("GET", f"/api/v1/sandbox/{sb.sandbox_id}")
        assert status == 200 and body["tags"] == {}
    finally:
        sb.kill()


def test_image_without_bash_gives_a_clear_error(e2b_env, run_id):
    sb = Sandbox.create(template=e2b_env.busybox_image, metadata={"suite": run_id}, timeout=120)
    try:
        with pytest.raises(SandboxException) as err:
            sb.commands.run("echo hi")
        text = str(err.value)
        assert "/bin/bash" in text and "does not exist" in text, text
        # Files still work: they need no shell.
        sb.files.write("/tmp/plain.txt", "no shell needed")
        assert sb.files.read("/tmp/plain.txt") == "no shell needed"
    finally:
        sb.kill()


# --- commands --------------------------------------------------------------------


def test_run_in_the_foreground(sandbox):
    r = sandbox.commands.run("echo out; echo err >&2; pwd", cwd="/tmp")
    assert r.exit_code == 0
    assert r.stdout == "out\n/tmp\n"
    assert r.stderr == "err\n"


def test_streaming_callbacks_see_output_as_it_comes(sandbox):
    seen, times = [], []
    start = time.monotonic()

    def on_stdout(chunk):
        seen.append(chunk)
        times.append(time.monotonic() - start)

    errs = []
    sandbox.commands.run(
        "for i in 1 2 3; do echo line$i; sleep 0.4; done; echo bad >&2",
        on_stdout=on_stdout,
        on_stderr=errs.append,
    )
    assert "".join(seen) == "line1\nline2\nline3\n"
    assert "".join(errs) == "bad\n"
    # The first line arrived well before the command ended (streamed).
    assert times[0] < 1.0, times


def test_background_process_and_wait(sandbox):
    h = sandbox.commands.run("sleep 1; echo done", background=True)
    assert h.pid > 0
    assert any(p.pid == h.pid for p in sandbox.commands.list())
    r = h.wait()
    assert r.exit_code == 0 and r.stdout == "done\n"


def test_stdin_then_close(sandbox):
    h = sandbox.commands.run("cat; echo end", background=True, stdin=True)
    sandbox.commands.send_stdin(h.pid, "first\n")
    h.send_stdin("second\n")
    sandbox.commands.close_stdin(h.pid)
    r = h.wait()
    assert r.stdout == "first\nsecond\nend\n"


def test_kill(sandbox):
    h = sandbox.commands.run("sleep 300", background=True)
    assert sandbox.commands.kill(h.pid)
    with pytest.raises(CommandExitException) as err:
        h.wait()
    assert err.value.exit_code != 0
    assert not sandbox.commands.kill(h.pid)  # gone: the SDK says False


def test_non_zero_exit_raises_as_the_sdk_does(sandbox):
    with pytest.raises(CommandExitException) as err:
        sandbox.commands.run("echo partial; exit 7")
    assert err.value.exit_code == 7
    assert err.value.stdout == "partial\n"


def test_command_timeout(sandbox):
    start = time.monotonic()
    with pytest.raises((TimeoutException, CommandExitException)):
        sandbox.commands.run("sleep 30", timeout=1)
    assert time.monotonic() - start < 10


# --- pty ---------------------------------------------------------------------------


def test_pty_input_resize_output(sandbox):
    chunks = []
    got = threading.Event()

    def on_data(data: bytes):
        chunks.append(data)
        # The echo of the typed line shows `$(stty size)`, not its output.
        if b"SIZE:30 101" in b"".join(chunks):
            got.set()

    t = sandbox.pty.create(PtySize(rows=24, cols=80), timeout=60)
    reader = threading.Thread(target=lambda: t.wait(on_pty=on_data), daemon=True)
    reader.start()
    sandbox.pty.resize(t.pid, PtySize(rows=30, cols=101))
    sandbox.pty.send_stdin(t.pid, b"echo SIZE:$(stty size)\n")
    assert got.wait(20), b"".join(chunks)
    sandbox.pty.send_stdin(t.pid, b"exit\n")
    reader.join(20)
    assert not reader.is_alive()


# --- files --------------------------------------------------------------------------


def test_write_and_read_text_and_bytes(sandbox):
    info = sandbox.files.write("/tmp/f/text.txt", "héllo\n")
    assert info.path == "/tmp/f/text.txt"
    assert sandbox.files.read("/tmp/f/text.txt") == "héllo\n"
    blob = bytes(range(256)) * 4
    sandbox.files.write("/tmp/f/blob.bin", blob)
    assert bytes(sandbox.files.read("/tmp/f/blob.bin", format="bytes")) == blob


def test_list_exists_info_mkdir_rename_remove(sandbox):
    fs = sandbox.files
    assert fs.make_dir("/tmp/tree/a/b")
    assert not fs.make_dir("/tmp/tree/a/b")  # already there
    fs.write("/tmp/tree/a/b/deep.txt", "x")
    fs.write("/tmp/tree/top.txt", "12345")
    shallow = {e.name for e in fs.list("/tmp/tree")}
    assert shallow == {"a", "top.txt"}
    deep = {e.path for e in fs.list("/tmp/tree", depth=3)}
    assert "/tmp/tree/a/b/deep.txt" in deep
    assert fs.exists("/tmp/tree/top.txt") and not fs.exists("/tmp/tree/nope")
    info = fs.get_info("/tmp/tree/top.txt")
    assert info.type == FileType.FILE and info.size == 5
    assert fs.get_info("/tmp/tree/a").type == FileType.DIR
    moved = fs.rename("/tmp/tree/top.txt", "/tmp/tree/moved.txt")
    assert moved.path == "/tmp/tree/moved.txt"
    assert not fs.exists("/tmp/tree/top.txt")
    fs.remove("/tmp/tree/a")
    assert not fs.exists("/tmp/tree/a")
    with pytest.raises(NotFoundException):
        fs.read("/tmp/tree/a/b/deep.txt")


def test_watch_dir_events(sandbox):
    sandbox.files.make_dir("/tmp/watched")
    w = sandbox.files.watch_dir("/tmp/watched")
    try:
        sandbox.files.write("/tmp/watched/new.txt", "1")
        sandbox.files.remove("/tmp/watched/new.txt")
        events = []
        deadline = time.time() + 10
        while time.time() < deadline:
            events += w.get_new_events()
            kinds = {(e.name, e.type) for e in events}
            if ("new.txt", FilesystemEventType.REMOVE) in kinds:
                break
            time.sleep(0.2)
        kinds = {(e.name, e.type) for e in events}
        assert ("new.txt", FilesystemEventType.CREATE) in kinds, events
        assert ("new.txt", FilesystemEventType.REMOVE) in kinds, events
    finally:
        w.stop()


def test_large_upload_and_download_stream(sandbox):
    size = 48 * 1024 * 1024
    chunk = os.urandom(1024 * 1024)
    digest = hashlib.sha256()

    class Source(io.RawIOBase):
        def __init__(self):
            self.left = size

        def readable(self):
            return True

        def readinto(self, b):
            n = min(len(b), self.left, len(chunk))
            if n == 0:
                return 0
            b[:n] = chunk[:n]
            digest.update(chunk[:n])
            self.left -= n
            return n

    sandbox.files.write("/tmp/big.bin", io.BufferedReader(Source(), 1024 * 1024))
    assert sandbox.files.get_info("/tmp/big.bin").size == size
    got = hashlib.sha256()
    total = 0
    for piece in sandbox.files.read("/tmp/big.bin", format="stream"):
        got.update(piece)
        total += len(piece)
    assert total == size
    assert got.hexdigest() == digest.hexdigest()


# --- lifecycle ---------------------------------------------------------------------


def test_set_timeout_and_expiry(e2b_env, run_id):
    sb = Sandbox.create(timeout=600, metadata={"suite": run_id})
    end_before = sb.get_info().end_at
    sb.set_timeout(3)
    end_after = sb.get_info().end_at
    assert end_after < end_before
    deadline = time.time() + 30
    while time.time() < deadline and sb.is_running():
        time.sleep(0.5)
    assert not sb.is_running()
    # Not paused (lifecycle kill): gone, as in E2B, once the kill that
    # stopped it has also removed it (a moment later on a busy machine).
    while True:
        try:
            Sandbox.get_info(sb.sandbox_id)
        except NotFoundException:
            break
        assert time.time() < deadline, "still there 30 s after its timeout"
        time.sleep(0.5)


# Each count replaces /tmp/n whole, so a read never sees it half-written.
COUNTER = (
    "sh -c 'echo $$ > /tmp/pid; i=0; "
    "while :; do i=$((i+1)); echo $i > /tmp/n.new; mv /tmp/n.new /tmp/n; sleep 0.1; done'"
)


def _counter(sb):
    """Starts the counter in `sb`; its PID once it wrote it."""
    sb.commands.run(COUNTER, background=True)
    deadline = time.time() + 10
    while time.time() < deadline:
        pid = sb.commands.run("cat /tmp/pid 2>/dev/null || true").stdout.strip()
        if pid:
            return pid
        time.sleep(0.1)
    raise AssertionError("the counter never started")


def test_auto_pause_at_timeout_keeps_processes_and_the_next_command_wakes_it(e2b_env, run_id):
    sb = Sandbox.create(
        timeout=600,
        lifecycle={"on_timeout": "pause", "auto_resume": True},
        metadata={"suite": run_id},
    )
    try:
        assert sb.get_info().lifecycle == {"on_timeout": "pause", "auto_resume": True}
        sb.files.write("/workspace/kept.txt", "still here")
        pid = _counter(sb)
        sb.set_timeout(2)
        deadline = time.time() + 30
        while time.time() < deadline and Sandbox.get_info(sb.sandbox_id).state != SandboxState.PAUSED:
            time.sleep(0.5)
        # Paused, not killed.
        assert Sandbox.get_info(sb.sandbox_id).state == SandboxState.PAUSED
        # The next command (the same SDK object, its old token) wakes it,
        # and the process is the same one, still counting.
        assert sb.commands.run(f"kill -0 {pid} && echo same").stdout.strip() == "same"
        assert Sandbox.get_info(sb.sandbox_id).state == SandboxState.RUNNING
        first = int(sb.files.read("/tmp/n").strip())
        time.sleep(0.5)
        assert int(sb.files.read("/tmp/n").strip()) > first
        assert sb.files.read("/workspace/kept.txt") == "still here"
    finally:
        Sandbox.kill(sb.sandbox_id)


def test_list_with_metadata_filter_and_paging(e2b_env, run_id):
    tag = f"list-{run_id}"
    made = [Sandbox.create(timeout=300, metadata={"suite": run_id, "list": tag}) for _ in range(3)]
    try:
        paginator = Sandbox.list(query=SandboxQuery(metadata={"list": tag}), limit=2)
        first = paginator.next_items()
        assert len(first) == 2 and paginator.has_next
        second = paginator.next_items()
        assert len(second) == 1 and not paginator.has_next
        ids = {s.sandbox_id for s in first + second}
        assert ids == {s.sandbox_id for s in made}
        running = Sandbox.list(
            query=SandboxQuery(metadata={"list": tag}, state=[SandboxState.RUNNING])
        ).next_items()
        assert len(running) == 3
        assert not Sandbox.list(query=SandboxQuery(metadata={"list": "other"})).next_items()
    finally:
        for s in made:
            s.kill()


def test_pause_keeps_processes_and_connect_resumes_them(e2b_env, run_id):
    sb = Sandbox.create(timeout=600, metadata={"suite": run_id})
    try:
        sb.files.write("/workspace/state.txt", "before pause")
        pid = _counter(sb)
        assert sb.pause()
        assert not sb.pause()  # already paused
        assert Sandbox.get_info(sb.sandbox_id).state == SandboxState.PAUSED
        paused = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
        assert sb.sandbox_id in {s.sandbox_id for s in paused}
        running = Sandbox.list(query=SandboxQuery(state=[SandboxState.RUNNING])).next_items()
        assert sb.sandbox_id not in {s.sandbox_id for s in running}
        # Without auto-resume, a command does not reach a paused sandbox.
        with pytest.raises(Exception):
            sb.commands.run("true", request_timeout=10)
        assert Sandbox.get_info(sb.sandbox_id).state == SandboxState.PAUSED
        same = Sandbox.connect(sb.sandbox_id, timeout=300)
        assert same.get_info().state == SandboxState.RUNNING
        assert same.files.read("/workspace/state.txt") == "before pause"
        # The process survived the pause: same PID, still counting.
        assert same.commands.run(f"kill -0 {pid} && echo alive").stdout.strip() == "alive"
        first = int(same.files.read("/tmp/n").strip())
        time.sleep(0.5)
        assert int(same.files.read("/tmp/n").strip()) > first
        # A filesystem-only pause keeps the files and ends the processes.
        assert same.pause(mode="filesystem")
        again = Sandbox.connect(sb.sandbox_id, timeout=300)
        assert again.files.read("/workspace/state.txt") == "before pause"
        # (A new container: PIDs are numbered anew, so the counter is what
        # tells: it no longer counts.)
        stopped_at = again.files.read("/tmp/n").strip()
        time.sleep(0.5)
        assert again.files.read("/tmp/n").strip() == stopped_at
    finally:
        Sandbox.kill(sb.sandbox_id)


def test_kill(e2b_env, run_id):
    sb = Sandbox.create(timeout=300, metadata={"suite": run_id})
    assert sb.kill()
    assert not Sandbox.kill(sb.sandbox_id)
    assert not sb.is_running()


def test_metrics(sandbox):
    deadline = time.time() + 15
    metrics = []
    while time.time() < deadline and not metrics:
        metrics = sandbox.get_metrics()
        time.sleep(0.5)
    assert metrics, "no metrics sample"
    m = metrics[-1]
    assert m.cpu_count >= 1 and m.mem_total > 0 and m.mem_used > 0
    assert m.disk_total > 0


def test_snapshot_as_template_and_fork(e2b_env, run_id):
    src = Sandbox.create(timeout=600, metadata={"suite": run_id})
    try:
        src.files.write("/workspace/from-snapshot.txt", "saved")
        snap = src.create_snapshot(name=f"snap-{run_id}")
        assert snap.snapshot_id
        listed = Sandbox.list_snapshots().next_items()
        assert snap.snapshot_id in {s.snapshot_id for s in listed}
        assert snap.snapshot_id in {s.snapshot_id for s in src.list_snapshots().next_items()}
        child = Sandbox.create(template=snap.snapshot_id, timeout=300, metadata={"suite": run_id})
        try:
            assert child.files.read("/workspace/from-snapshot.txt") == "saved"
            assert child.get_info().template_id == snap.snapshot_id
        finally:
            child.kill()
        by_name = Sandbox.create(template=f"snap-{run_id}", timeout=300, metadata={"suite": run_id})
        by_name.kill()
        forks = src.fork(count=2)
        assert len(forks) == 2
        for f in forks:
            assert not isinstance(f, Exception), f
            assert f.files.read("/workspace/from-snapshot.txt") == "saved"
            f.kill()
        assert Sandbox.delete_snapshot(snap.snapshot_id)
        assert not Sandbox.delete_snapshot(snap.snapshot_id)
    finally:
        src.kill()


def test_logs_of_the_main_process(e2b_env):
    key = e2b_env.tokens["tenant-a"]
    status, body = e2b_env.api().request(
        "POST",
        "/api/v1/sandbox",
        {"startCommand": "echo main-process-line; sleep 600", "timeoutMinutes": 10},
    )
    assert status == 201, body
    sid = body["id"]
    try:
        deadline = time.time() + 10
        while True:
            r = httpx.get(f"{e2b_env.base}/e2b/sandboxes/{sid}/logs", headers={"X-API-Key": key})
            assert r.status_code == 200, r.text
            lines = [l["line"] for l in r.json()["logs"]]
            if "main-process-line" in lines or time.time() > deadline:
                break
            time.sleep(0.3)
        assert "main-process-line" in lines
        v2 = httpx.get(f"{e2b_env.base}/e2b/v2/sandboxes/{sid}/logs", headers={"X-API-Key": key})
        assert v2.status_code == 200
        assert any(e["message"] == "main-process-line" for e in v2.json()["logs"])
    finally:
        e2b_env.api().request("DELETE", f"/api/v1/sandbox/{sid}")


def test_errors_have_e2b_bodies(e2b_env):
    key = e2b_env.tokens["tenant-a"]
    for method, path in [
        ("GET", "/e2b/sandboxes/aaaaaaaaaaaa"),
        ("GET", "/e2b/no/such/route"),
        ("POST", "/e2b/sandboxes/aaaaaaaaaaaa/timeout"),
    ]:
        r = httpx.request(method, e2b_env.base + path, headers={"X-API-Key": key}, json={"timeout": 5})
        assert r.status_code == 404, (path, r.text)
        body = r.json()
        assert body["code"] == 404 and body["message"], body
    r = httpx.get(e2b_env.base + "/e2b/sandboxes", headers={"X-API-Key": "stk_wrong"})
    assert r.status_code == 401 and r.json()["code"] == 401
    r = httpx.post(e2b_env.base + "/e2b/v2/sandboxes", headers={"X-API-Key": key}, json={"timeout": 5})
    assert r.status_code == 400 and "templateID" in r.json()["message"]


# --- ports through the proxy (get_host) ---------------------------------------------


def test_get_host_through_the_proxy(sandbox, e2b_env, proxy_domain):
    # A small HTTP server in the sandbox: the agent binary itself, on 8080.
    sandbox.commands.run(
        "/.stockade/agent/stockade-agent --listen 0.0.0.0:8080 --insecure-no-token --main-env /nonexistent",
        background=True,
    )
    host = sandbox.get_host(8080)
    assert host == f"8080-{sandbox.sandbox_id}.{proxy_domain}"
    url = f"http://127.0.0.1:{e2b_env.port}/health"
    deadline = time.time() + 10
    while True:
        r = httpx.get(url, headers={"Host": host, "e2b-traffic-access-token": sandbox.traffic_access_token})
        if r.status_code == 204 or time.time() > deadline:
            break
        time.sleep(0.2)
    assert r.status_code == 204, r.text
    # Safe by default: without the sandbox's traffic token, no way in.
    assert httpx.get(url, headers={"Host": host}).status_code == 401
    # Another sandbox's traffic token is refused.
    other = Sandbox.create(timeout=120)
    try:
        r = httpx.get(url, headers={"Host": host, "e2b-traffic-access-token": other.traffic_access_token})
        assert r.status_code == 403
    finally:
        other.kill()


def test_agent_host_form(sandbox, e2b_env):
    host = sandbox.get_host(49983)
    url = f"http://127.0.0.1:{e2b_env.port}/envs"
    r = httpx.get(url, headers={"Host": host, "X-Access-Token": sandbox._envd_access_token})
    assert r.status_code == 200, r.text
    assert isinstance(r.json(), dict)
    assert httpx.get(url, headers={"Host": host}).status_code == 401
