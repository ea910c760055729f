"""Tenant B against tenant A's sandbox through every E2B route and through
the in-sandbox routing: 403 or 404 everywhere,
and A's sandbox untouched. Also Stockade's credentials never reach the
sandbox."""

import time

import httpx
import pytest

e2b = pytest.importorskip("e2b")

from e2b import Sandbox, SandboxException  # noqa: E402

pytestmark = pytest.mark.usefixtures("e2b_env")


@pytest.fixture(scope="module")
def a_sandbox(e2b_env, run_id):
    sb = Sandbox.create(timeout=600, metadata={"suite": run_id, "owner": "a"})
    sb.files.write("/workspace/secret.txt", "tenant A's secret")
    yield sb
    sb.kill()


@pytest.fixture(scope="module")
def b_sandbox(e2b_env, run_id):
    sb = Sandbox.create(timeout=600, metadata={"suite": run_id}, api_key=e2b_env.tokens["tenant-b"])
    yield sb
    sb.kill()


def _routes(sid):
    return [
        ("GET", f"/e2b/sandboxes/{sid}", None),
        ("DELETE", f"/e2b/sandboxes/{sid}", None),
        ("POST", f"/e2b/sandboxes/{sid}/timeout", {"timeout": 1}),
        ("POST", f"/e2b/sandboxes/{sid}/refreshes", {"duration": 1}),
        ("POST", f"/e2b/sandboxes/{sid}/connect", {"timeout": 10}),
        ("POST", f"/e2b/v2/sandboxes/{sid}/connect", {"timeout": 10}),
        ("POST", f"/e2b/sandboxes/{sid}/resume", {}),
        ("POST", f"/e2b/sandboxes/{sid}/pause", {}),
        ("POST", f"/e2b/sandboxes/{sid}/fork", {"count": 1}),
        ("POST", f"/e2b/sandboxes/{sid}/snapshots", {"name": "stolen"}),
        ("GET", f"/e2b/sandboxes/{sid}/logs", None),
        ("GET", f"/e2b/v2/sandboxes/{sid}/logs", None),
        ("GET", f"/e2b/sandboxes/{sid}/metrics", None),
        ("PUT", f"/e2b/sandboxes/{sid}/network", {"allowOut": []}),
    ]


def test_every_control_plane_route_refuses_another_tenant(e2b_env, a_sandbox):
    b_key = e2b_env.tokens["tenant-b"]
    for auth in ({"X-API-Key": b_key}, {"Authorization": f"Bearer {b_key}"}):
        for method, path, body in _routes(a_sandbox.sandbox_id):
            r = httpx.request(method, e2b_env.base + path, headers=auth, json=body, timeout=60)
            assert r.status_code in (403, 404), (method, path, r.status_code, r.text)
            assert r.json()["code"] == r.status_code
    # Nothing happened to A's sandbox: still running, same end, no forks or snapshots.
    info = Sandbox.get_info(a_sandbox.sandbox_id)
    assert info.state.value == "running"
    assert a_sandbox.files.read("/workspace/secret.txt") == "tenant A's secret"
    assert not Sandbox.list_snapshots(api_key=b_key).next_items()
    listed = Sandbox.list(api_key=b_key).next_items()
    assert a_sandbox.sandbox_id not in {s.sandbox_id for s in listed}


def test_the_sdk_with_another_tenants_key(e2b_env, a_sandbox):
    b_key = e2b_env.tokens["tenant-b"]
    with pytest.raises(SandboxException):
        Sandbox.connect(a_sandbox.sandbox_id, api_key=b_key)
    with pytest.raises(SandboxException):
        Sandbox.kill(a_sandbox.sandbox_id, api_key=b_key)
    with pytest.raises(SandboxException):
        Sandbox.get_info(a_sandbox.sandbox_id, api_key=b_key)
    assert a_sandbox.is_running()


def test_in_sandbox_routing_refuses_another_tenant(e2b_env, a_sandbox, b_sandbox):
    base = e2b_env.base
    a_id = a_sandbox.sandbox_id
    url = f"{base}/e2b/files?path=/workspace/secret.txt"
    hdr = {"E2b-Sandbox-Id": a_id, "E2b-Sandbox-Port": "49983"}
    # A's own token reads it (the control).
    ok = httpx.get(url, headers={**hdr, "X-Access-Token": a_sandbox._envd_access_token})
    assert ok.status_code == 200 and ok.text == "tenant A's secret"
    attempts = {
        "B's API key": {"X-API-Key": e2b_env.tokens["tenant-b"]},
        "B's API key as bearer": {"Authorization": f"Bearer {e2b_env.tokens['tenant-b']}"},
        "B's sandbox token": {"X-Access-Token": b_sandbox._envd_access_token},
        "B's key and B's token": {
            "X-API-Key": e2b_env.tokens["tenant-b"],
            "X-Access-Token": b_sandbox._envd_access_token,
        },
        "no credentials": {},
        "a forged token": {"X-Access-Token": "0" * 64},
    }
    for what, creds in attempts.items():
        r = httpx.get(url, headers={**hdr, **creds})
        assert r.status_code in (401, 403, 404), (what, r.status_code, r.text)
        assert "secret" not in r.text, what
    # Connect RPCs too: B cannot run a command in A's sandbox.
    rpc = httpx.post(
        f"{base}/e2b/process.Process/List",
        headers={
            **hdr,
            "X-Access-Token": b_sandbox._envd_access_token,
            "Content-Type": "application/json",
        },
        content=b"{}",
    )
    assert rpc.status_code == 401, rpc.text
    # The host forms: the agent (49983) and a port, with B's tokens.
    for host, creds in [
        (f"49983-{a_id}.sandboxes.localhost:{e2b_env.port}", {"X-Access-Token": b_sandbox._envd_access_token}),
        (f"8080-{a_id}.sandboxes.localhost:{e2b_env.port}", {"e2b-traffic-access-token": b_sandbox.traffic_access_token}),
    ]:
        r = httpx.get(f"http://127.0.0.1:{e2b_env.port}/files?path=/workspace/secret.txt", headers={"Host": host, **creds})
        assert r.status_code in (401, 403), (host, r.status_code, r.text)


def test_stockade_credentials_never_reach_the_sandbox(e2b_env, run_id):
    """What a sandbox's port receives through the host form, captured raw
    by `nc` in the sandbox: none of Stockade's credentials."""
    api = e2b_env.api("tenant-a")
    status, body = api.request(
        "POST",
        "/api/v1/sandbox",
        {
            "name": f"capture-{run_id}",
            "dockerImage": e2b_env.busybox_image,
            "startCommand": "sleep 60 | nc -l -p 8081 > /workspace/request.txt; exec sleep 600",
        },
    )
    assert status == 201, body
    sid = body["id"]
    try:
        sb = Sandbox.connect(sid, timeout=300)
        key = e2b_env.tokens["tenant-a"]
        host = f"8081-{sid}.sandboxes.localhost:{e2b_env.port}"
        try:
            httpx.get(
                f"http://127.0.0.1:{e2b_env.port}/probe",
                headers={
                    "Host": host,
                    "e2b-traffic-access-token": sb.traffic_access_token,
                    "X-API-Key": key,
                    "Authorization": f"Bearer {key}",
                    "Cookie": f"stockade_session={key}; theirs=1",
                    "X-Kept": "yes",
                },
                timeout=3,
            )
        except httpx.HTTPError:
            pass  # nc never answers; the request is what counts
        request = ""
        for _ in range(50):
            request = sb.files.read("/workspace/request.txt")
            if "x-kept" in request.lower():
                break
            time.sleep(0.1)
        assert "GET /probe" in request, request
        assert "x-kept: yes" in request.lower(), request
        assert key not in request, request
        assert sb.traffic_access_token not in request, request
        assert "stockade_session" not in request, request
    finally:
        api.request("DELETE", f"/api/v1/sandbox/{sid}")


def test_prime_gateway_refuses_another_tenant(e2b_env, a_sandbox, b_sandbox):
    a_id = a_sandbox.sandbox_id
    b_api = e2b_env.api("tenant-b")
    status, body = b_api.request("POST", f"/api/v1/sandbox/{a_id}/auth")
    assert status == 403, body
    status, auth = b_api.request("POST", f"/api/v1/sandbox/{b_sandbox.sandbox_id}/auth")
    assert status == 200, auth
    a_owner = e2b_env.api("tenant-a").request("GET", f"/api/v1/sandbox/{a_id}")[1]["accountId"]
    for ns, job in [(a_owner, a_id), (auth["user_ns"], a_id), (a_owner, b_sandbox.sandbox_id)]:
        r = httpx.get(
            f"{auth['gateway_url']}/{ns}/{job}/read-file",
            params={"path": "/workspace/secret.txt"},
            headers={"Authorization": f"Bearer {auth['token']}"},
        )
        assert r.status_code == 403, (ns, job, r.status_code, r.text)
        assert "secret" not in r.text
    # A gateway token opens nothing else: not the port proxy, not the API.
    r = httpx.get(
        f"http://127.0.0.1:{e2b_env.port}/health",
        headers={"Host": f"8080-{b_sandbox.sandbox_id}.sandboxes.localhost:{e2b_env.port}",
                 "X-Stockade-Token": auth["token"]},
    )
    assert r.status_code == 401
    r = httpx.get(f"{e2b_env.base}/api/v1/sandbox", headers={"Authorization": f"Bearer {auth['token']}"})
    assert r.status_code == 401
