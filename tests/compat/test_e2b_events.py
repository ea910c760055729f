"""E2B's lifecycle events against Stockade, as E2B documents them: webhooks
registered with plain HTTP and `X-API-Key` under E2B_API_URL
(`/events/webhooks`), deliveries verified with E2B's own verification code,
the polling routes `/events/sandboxes[/{id}]`, and sandboxes driven by the
real e2b SDK. Another tenant sees none of it."""

import base64
import hashlib
import http.server
import json
import os
import threading
import time

import httpx
import pytest

e2b = pytest.importorskip("e2b")

from e2b import Sandbox  # noqa: E402

pytestmark = pytest.mark.usefixtures("e2b_env")

SECRET = "secret-for-event-signature-verification"


def verify_webhook_signature(secret: str, payload: str, payload_signature: str) -> bool:
    """E2B's documented verification, as its users write it."""
    hash_bytes = hashlib.sha256((secret + payload).encode("utf-8")).digest()
    expected_signature = base64.b64encode(hash_bytes).decode("utf-8")
    expected_signature = expected_signature.replace("+", "-").replace("/", "_").rstrip("=")
    return expected_signature == payload_signature


class Receiver:
    """An HTTP server on loopback that records every delivery."""

    def __init__(self):
        self.got = []
        received = self.got

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"])).decode()
                received.append((dict(self.headers.items()), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/webhook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events_of(self, sandbox_id):
        return [json.loads(b) for _, b in self.got if json.loads(b)["sandboxId"] == sandbox_id]

    def wait_for(self, sandbox_id, kinds, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            seen = [e["type"] for e in self.events_of(sandbox_id)]
            if all(k in seen for k in kinds):
                return seen
            time.sleep(0.2)
        raise AssertionError(f"{sandbox_id}: wanted {kinds}, got {seen}")

    def close(self):
        self.server.shutdown()


def api(path, key=None):
    return f"{os.environ['E2B_API_URL']}{path}", {"X-API-Key": key or os.environ["E2B_API_KEY"]}


def call(method, path, key=None, **kwargs):
    url, headers = api(path, key)
    return httpx.request(method, url, headers=headers, **kwargs)


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def webhook(receiver):
    url, headers = api("/events/webhooks")
    resp = httpx.post(
        url,
        headers={**headers, "Content-Type": "application/json"},
        json={
            "name": "My Sandbox Webhook",
            "url": receiver.url,
            "enabled": True,
            "events": [
                "sandbox.lifecycle.created",
                "sandbox.lifecycle.updated",
                "sandbox.lifecycle.paused",
                "sandbox.lifecycle.resumed",
                "sandbox.lifecycle.killed",
            ],
            "signatureSecret": SECRET,
        },
    )
    assert resp.status_code == 201, resp.text
    hook = resp.json()
    yield hook
    url, headers = api(f"/events/webhooks/{hook['id']}")
    httpx.delete(url, headers=headers)


def test_lifecycle_webhooks_are_delivered_signed_as_e2b_documents(webhook, receiver, run_id):
    assert set(webhook) >= {"id", "teamID", "name", "createdAt", "enabled", "url", "events"}
    assert "signatureSecret" not in webhook
    sbx = Sandbox.create(timeout=300, metadata={"suite": run_id, "job": "events"})
    sbx.set_timeout(600)
    assert sbx.pause()
    Sandbox.connect(sbx.sandbox_id, timeout=300)
    sbx.kill()
    seen = receiver.wait_for(
        sbx.sandbox_id,
        [
            "sandbox.lifecycle.created",
            "sandbox.lifecycle.updated",
            "sandbox.lifecycle.paused",
            "sandbox.lifecycle.resumed",
            "sandbox.lifecycle.killed",
        ],
    )
    # In the order they happened.
    assert seen.index("sandbox.lifecycle.created") < seen.index("sandbox.lifecycle.paused")
    assert seen.index("sandbox.lifecycle.paused") < seen.index("sandbox.lifecycle.resumed")
    assert seen[-1] == "sandbox.lifecycle.killed"
    for headers, body in receiver.got:
        headers = {k.lower(): v for k, v in headers.items()}
        assert verify_webhook_signature(SECRET, body, headers["e2b-signature"])
        assert headers["e2b-signature-version"] == "v1"
        assert headers["e2b-webhook-id"] == webhook["id"]
        assert headers["e2b-delivery-id"]
    events = receiver.events_of(sbx.sandbox_id)
    for e in events:
        assert set(e) >= {
            "version", "id", "type", "eventData", "sandboxBuildId", "sandboxExecutionId",
            "sandboxId", "sandboxTeamId", "sandboxTemplateId", "timestamp",
        }
        assert e["version"] == "v1"
    created = next(e for e in events if e["type"] == "sandbox.lifecycle.created")
    assert created["eventData"]["sandbox_metadata"]["job"] == "events"
    assert created["sandboxTemplateId"]
    updated = next(e for e in events if e["type"] == "sandbox.lifecycle.updated")
    assert "set_timeout" in updated["eventData"]

    # The polling routes: newest first, or oldest first when asked.
    url, headers = api(f"/events/sandboxes/{sbx.sandbox_id}")
    polled = httpx.get(url, headers=headers, params={"limit": 100}).json()
    assert polled[0]["type"] == "sandbox.lifecycle.killed"
    assert [e["timestamp"] for e in polled] == sorted((e["timestamp"] for e in polled), reverse=True)
    # Every delivered event is there, with the same id.
    assert {e["id"] for e in events} <= {e["id"] for e in polled}
    url, headers = api("/events/sandboxes")
    oldest = httpx.get(url, headers=headers, params={"orderAsc": "true", "limit": 1}).json()
    assert len(oldest) == 1


def test_webhook_management_and_another_tenant(webhook, e2b_env):
    url, headers = api(f"/events/webhooks/{webhook['id']}")
    got = httpx.get(url, headers=headers)
    assert got.status_code == 200 and "signatureSecret" not in got.json()
    patched = httpx.patch(url, headers=headers, json={"enabled": False, "events": ["sandbox.lifecycle.created"]})
    assert patched.status_code == 200, patched.text
    assert patched.json()["enabled"] is False
    assert patched.json()["events"] == ["sandbox.lifecycle.created"]
    assert patched.json()["name"] == "My Sandbox Webhook"
    listed = call("GET", "/events/webhooks")
    assert webhook["id"] in {w["id"] for w in listed.json()}
    bad = call(
        "POST",
        "/events/webhooks",
        json={"name": "x", "url": "ftp://example.com", "enabled": True, "events": [], "signatureSecret": SECRET},
    )
    assert bad.status_code == 400
    assert bad.json()["code"] == 400
    assert httpx.get(api("/events/webhooks")[0]).status_code == 401

    # Tenant B: not found, and an empty list.
    other = e2b_env.tokens["tenant-b"]
    url_b, headers_b = api(f"/events/webhooks/{webhook['id']}", key=other)
    assert httpx.get(url_b, headers=headers_b).status_code == 404
    assert httpx.delete(url_b, headers=headers_b).status_code == 404
    assert call("GET", "/events/webhooks", key=other).json() == []
    sbx = Sandbox.create(timeout=120)
    try:
        url_b, headers_b = api(f"/events/sandboxes/{sbx.sandbox_id}", key=other)
        assert httpx.get(url_b, headers=headers_b).status_code == 404
        url_b, headers_b = api("/events/sandboxes", key=other)
        theirs = httpx.get(url_b, headers=headers_b, params={"limit": 100}).json()
        assert sbx.sandbox_id not in {e["sandboxId"] for e in theirs}
    finally:
        sbx.kill()
    deleted = httpx.delete(url, headers=headers)
    assert deleted.status_code == 200
    assert httpx.get(url, headers=headers).status_code == 404
