"""A real Stockade server for the compatibility suites: the built
binary, a fresh data directory, a free port, an admin and two tenant
accounts. Everything the suites create is removed when the server stops."""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROXY_DOMAIN = "sandboxes.localhost"
# The image of the runtime preset `code-interpreter-v1`, which E2B's
# code-interpreter SDKs create by default (scripts/build-image code-interpreter).
CODE_INTERPRETER_IMAGE = "stockade-code-interpreter:latest"


def _binary() -> Path:
    explicit = os.environ.get("STOCKADE_BIN")
    if explicit:
        return Path(explicit)
    target = os.environ.get("CARGO_TARGET_DIR") or str(REPO / "target")
    return Path(target) / "debug" / "stockade"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    """Stockade's own HTTP API with one token (for set-up and checks)."""

    def __init__(self, base: str, token: str):
        self.base = base
        self.token = token

    def request(self, method: str, path: str, body=None, headers=None, raw=False):
        data = None if body is None else json.dumps(body).encode()
        h = {"Authorization": f"Bearer {self.token}"}
        if data is not None:
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                payload = r.read()
                status = r.status
        except urllib.error.HTTPError as e:
            payload = e.read()
            status = e.code
        if raw:
            return status, payload
        return status, (json.loads(payload) if payload else None)


class StockadeServer:
    """`stockade server` in a process of its own."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.admin_token = "stk_" + secrets.token_hex(20)
        self.debian_image = os.environ.get(
            "STOCKADE_TEST_IMAGE_DEBIAN", "stockade-test-debian:latest"
        )
        self.busybox_image = os.environ.get("STOCKADE_TEST_IMAGE", "stockade-test-base:latest")
        self.proc = None
        self.tokens = {}
        self.account_ids = []

    def start(self) -> "StockadeServer":
        binary = _binary()
        if not binary.exists():
            raise RuntimeError(
                f"{binary} does not exist: build it with `cargo build -p stockade` "
                "or set STOCKADE_BIN"
            )
        env = dict(os.environ, STOCKADE_ADMIN_TOKEN=self.admin_token, RUST_LOG="warn")
        self.log = open(self.workdir / "server.log", "wb")
        self.proc = subprocess.Popen(
            [
                str(binary),
                "server",
                "--listen",
                f"127.0.0.1:{self.port}",
                "--data-dir",
                str(self.workdir / "data"),
                "--default-image",
                self.debian_image,
                "--proxy-domain",
                PROXY_DOMAIN,
                "--rate-limit",
                "off",
                "--server-name",
                "compat",
                # The lifecycle webhooks' receivers listen on loopback, and
                # retries come quickly.
                "--allow-internal-addresses",
                "127.0.0.1/32",
                "--webhook-retry-seconds",
                "1",
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"stockade server exited: {self.log_text()}")
            try:
                with urllib.request.urlopen(self.base + "/api/v1/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.time() > deadline:
                raise RuntimeError(f"stockade server did not answer: {self.log_text()}")
            time.sleep(0.2)
        admin = Api(self.base, self.admin_token)
        self.tokens["admin"] = self.admin_token
        for name in ("tenant-a", "tenant-b"):
            status, body = admin.request("POST", "/api/v1/accounts", {"name": name})
            if status != 201:
                raise RuntimeError(f"could not create account {name}: {status} {body}")
            self.tokens[name] = body["token"]
            self.account_ids.append(body["account"]["id"])
        status, body = admin.request("GET", "/api/v1/me")
        if status == 200:
            self.account_ids.append(body["account"]["id"])
        return self

    def api(self, who: str = "tenant-a") -> Api:
        return Api(self.base, self.tokens[who])

    def log_text(self) -> str:
        try:
            return (self.workdir / "server.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def cleanup(self) -> None:
        """Removes every snapshot, sandbox and shared volume the suites made
        (snapshots first: deleting a sandbox collects the deleted snapshots'
        images)."""
        for who in self.tokens:
            api = self.api(who)
            status, body = api.request("GET", "/api/v1/snapshots")
            for snap in (body or {}).get("snapshots", []) if status == 200 else []:
                api.request("DELETE", f"/api/v1/snapshots/{snap['id']}")
        for who in self.tokens:
            api = self.api(who)
            status, body = api.request("GET", "/api/v1/sandbox?per_page=1000")
            for sb in (body or {}).get("sandboxes", []) if status == 200 else []:
                api.request("DELETE", f"/api/v1/sandbox/{sb['id']}")
        # Templates once their sandboxes are gone: a template's image stays
        # while a sandbox uses it.
        for who in self.tokens:
            api = self.api(who)
            status, body = api.request("GET", "/api/v1/templates")
            for t in (body or {}).get("templates", []) if status == 200 else []:
                if not t.get("shared"):
                    api.request("DELETE", f"/api/v1/templates/{t['templateId']}")
        # Shared volumes last: a volume still mounted cannot be deleted.
        for who in self.tokens:
            api = self.api(who)
            status, body = api.request("GET", "/api/v1/shared-volumes")
            for vol in (body or {}).get("volumes", []) if status == 200 else []:
                api.request("DELETE", f"/api/v1/shared-volumes/{vol['id']}")

    def sweep_docker(self) -> None:
        """Removes what is left in Docker of this run's accounts (labelled by
        Stockade with the owner's account id), also after a failed run.
        Images go again while a pass removes some: a template layer is
        refused while an image built on it is left."""
        for account in self.account_ids:
            label = f"label=io.stockade.account-id={account}"
            for kind, list_cmd, rm_cmd in (
                ("containers", ["docker", "ps", "-aq", "--filter", label], ["docker", "rm", "-f"]),
                ("volumes", ["docker", "volume", "ls", "-q", "--filter", label], ["docker", "volume", "rm", "-f"]),
                ("images", ["docker", "images", "-q", "--filter", label], ["docker", "rmi", "-f"]),
            ):
                left = None
                try:
                    while True:
                        ids = set(subprocess.run(
                            list_cmd, capture_output=True, text=True, timeout=60
                        ).stdout.split())
                        if not ids or (left is not None and len(ids) >= len(left)):
                            break
                        subprocess.run(rm_cmd + sorted(ids), capture_output=True, timeout=120)
                        left = ids
                except (OSError, subprocess.SubprocessError):
                    pass

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            self.cleanup()
        finally:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.log.close()
            self.sweep_docker()


def start_server() -> StockadeServer:
    workdir = Path(tempfile.mkdtemp(prefix="stockade-compat-"))
    try:
        return StockadeServer(workdir).start()
    except Exception:
        shutil.rmtree(workdir, ignore_errors=True)
        raise


def stop_server(server: StockadeServer) -> None:
    try:
        server.stop()
    finally:
        shutil.rmtree(server.workdir, ignore_errors=True)
