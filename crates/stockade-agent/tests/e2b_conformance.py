"""Conformance of stockade-agent with the real `e2b` Python SDK (2.63.0).

Builds the SDK's own `Sandbox` object around an agent URL (debug mode, so no
E2B API is involved), with the agent's token as `X-Access-Token`, and drives
commands, PTYs and files through the SDK's envd clients unchanged.

    python e2b_conformance.py http://127.0.0.1:PORT TOKEN WORKDIR [HTTP_VERSION]

Prints one line per check and a final 'N passed, 0 failed'; exits non-zero on
the first failure.
"""

import sys
import time
import threading

from packaging.version import Version

from e2b import CommandExitException, Sandbox
from e2b.connection_config import ConnectionConfig
from e2b.sandbox.commands.command_handle import PtySize
from e2b.exceptions import NotFoundException

url, token, workdir = sys.argv[1], sys.argv[2], sys.argv[3]
http_version = sys.argv[4] if len(sys.argv) > 4 else "1.1"

config = ConnectionConfig(
    debug=True,
    sandbox_url=url,
    extra_sandbox_headers={"X-Access-Token": token},
    http_version=http_version,
)
sbx = Sandbox(
    sandbox_id="stockade-conformance",
    envd_version=Version("0.6.4"),
    envd_access_token=token,
    sandbox_domain=None,
    connection_config=config,
)

passed = 0


def check(name, fn):
    global passed
    fn()
    passed += 1
    print(f"ok {name}", flush=True)


def commands_run():
    r = sbx.commands.run("echo hello; echo oops >&2", cwd=workdir)
    assert r.exit_code == 0, r
    assert r.stdout == "hello\n", repr(r.stdout)
    assert r.stderr == "oops\n", repr(r.stderr)
    try:
        sbx.commands.run("exit 3")
        raise AssertionError("expected CommandExitException")
    except CommandExitException as e:
        assert e.exit_code == 3, e
    r = sbx.commands.run("echo $FOO-$PWD", envs={"FOO": "bar"}, cwd="/")
    assert r.stdout == "bar-/\n", repr(r.stdout)


def commands_background_stdin_connect_kill():
    h = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "piped\n")
    sbx.commands.close_stdin(h.pid)
    r = h.wait()
    assert r.stdout == "piped\n", repr(r.stdout)

    h = sbx.commands.run("sleep 0.3; echo later", background=True)
    again = sbx.commands.connect(h.pid)
    r = again.wait()
    assert r.stdout == "later\n", repr(r.stdout)

    h = sbx.commands.run("sleep 60", background=True)
    pids = [p.pid for p in sbx.commands.list()]
    assert h.pid in pids, pids
    assert sbx.commands.kill(h.pid) is True
    try:
        h.wait()
        raise AssertionError("a killed command must not exit 0")
    except CommandExitException:
        pass
    assert sbx.commands.kill(h.pid) is False


def pty_session():
    out = bytearray()
    done = threading.Event()

    def on_data(data):
        out.extend(data)
        if b"50 120" in out:
            done.set()

    h = sbx.pty.create(PtySize(rows=24, cols=80), cwd=workdir)
    t = threading.Thread(target=lambda: h.wait(on_pty=on_data), daemon=True)
    t.start()
    sbx.pty.send_stdin(h.pid, b"stty size\n")
    deadline = time.time() + 10
    while b"24 80" not in out and time.time() < deadline:
        time.sleep(0.02)
    assert b"24 80" in out, bytes(out)
    sbx.pty.resize(h.pid, PtySize(rows=50, cols=120))
    sbx.pty.send_stdin(h.pid, b"stty size\n")
    assert done.wait(10), bytes(out)
    sbx.pty.send_stdin(h.pid, b"exit\n")
    t.join(10)


def files():
    base = f"{workdir}/sdk"
    info = sbx.files.write(f"{base}/a.txt", "first")
    assert info.path == f"{base}/a.txt", info
    assert sbx.files.read(f"{base}/a.txt") == "first"
    sbx.files.write_files(
        [
            {"path": f"{base}/b.bin", "data": b"\x00\x01\x02"},
            {"path": f"{base}/c.txt", "data": "c"},
        ]
    )
    assert sbx.files.read(f"{base}/b.bin", format="bytes") == bytearray(b"\x00\x01\x02")
    names = sorted(e.name for e in sbx.files.list(base))
    assert names == ["a.txt", "b.bin", "c.txt"], names
    assert sbx.files.exists(f"{base}/a.txt")
    assert not sbx.files.exists(f"{base}/nope")
    st = sbx.files.get_info(f"{base}/a.txt")
    assert st.size == 5 and st.type.value == "file", st
    assert sbx.files.make_dir(f"{base}/d/e") is True
    assert sbx.files.make_dir(f"{base}/d/e") is False
    moved = sbx.files.rename(f"{base}/c.txt", f"{base}/d/e/c2.txt")
    assert moved.name == "c2.txt", moved
    sbx.files.remove(f"{base}/d")
    assert not sbx.files.exists(f"{base}/d")
    try:
        sbx.files.read(f"{base}/missing")
        raise AssertionError("expected NotFoundException")
    except NotFoundException:
        pass


def watch():
    base = f"{workdir}/watched"
    sbx.files.make_dir(base)
    events = []
    handle = sbx.files.watch_dir(base)
    sbx.files.write(f"{base}/x.txt", "1")
    deadline = time.time() + 10
    while time.time() < deadline and not any(e.name == "x.txt" for e in events):
        events.extend(handle.get_new_events())
        time.sleep(0.05)
    handle.stop()
    assert any(e.name == "x.txt" and e.type.value == "create" for e in events), events


check("commands.run", commands_run)
check("commands background/stdin/connect/kill", commands_background_stdin_connect_kill)
check("pty create/send_stdin/resize", pty_session)
check("files write/read/list/info/mkdir/rename/remove", files)
check("files.watch_dir", watch)
print(f"{passed} passed, 0 failed")
