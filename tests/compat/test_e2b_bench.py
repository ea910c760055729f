"""The cost of the compatibility layer: `commands.run("true")` through the
e2b SDK against Stockade (/e2b, routed by E2b-Sandbox-Id), the same SDK
straight to the sandbox's agent (no Stockade in between), and Stockade's own
exec route with the same command, in one run on one server, taking turns.
Prints p50 and p99 of each; the layer's cost is the first minus the second."""

import json
import os
import statistics
import subprocess
import time

import httpx
import pytest

e2b = pytest.importorskip("e2b")

from e2b import Sandbox  # noqa: E402
from e2b.connection_config import ConnectionConfig  # noqa: E402

pytestmark = pytest.mark.usefixtures("e2b_env")

RUNS = int(os.environ.get("STOCKADE_COMPAT_BENCH_RUNS", "200"))
WARMUP = 20


def _percentiles(samples):
    s = sorted(samples)
    return {
        "p50_ms": round(statistics.median(s) * 1000, 3),
        "p99_ms": round(s[min(len(s) - 1, int(len(s) * 0.99))] * 1000, 3),
        "runs": len(s),
    }


def _time_interleaved(fns, runs):
    """Times each of `fns` `runs` times, taking turns, so that a machine
    that gets busier or quieter during the run weighs on all of them alike."""
    for _ in range(WARMUP):
        for fn in fns.values():
            fn()
    out = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            out[name].append(time.perf_counter() - t)
    return out


def _agent_token(sandbox_id):
    """The sandbox's agent's own token, from its container: only the server
    holds it (the SDK's envdAccessToken is a token of Stockade's, which the
    server checks and replaces with this one on the way to the agent)."""
    r = subprocess.run(
        ["docker", "inspect", "-f", "{{range .Config.Env}}{{println .}}{{end}}", f"stockade-{sandbox_id}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    for line in r.stdout.splitlines():
        if line.startswith("STOCKADE_AGENT_TOKEN="):
            return line.split("=", 1)[1]
    return None


def _straight_to_the_agent(sb, ip):
    """The same sandbox as an SDK object that talks to its agent directly,
    with the agent's own token: the baseline without Stockade's layer."""
    token = _agent_token(sb.sandbox_id)
    assert token, "the agent's token could not be read from the container"
    params = Sandbox._resolve_api_params(sandbox_url=f"http://{ip}:49983")
    headers = {
        "X-Access-Token": token,
        "E2b-Sandbox-Id": sb.sandbox_id,
        "E2b-Sandbox-Port": str(ConnectionConfig.envd_port),
    }
    return Sandbox(
        sandbox_id=sb.sandbox_id,
        sandbox_domain=sb.sandbox_domain,
        envd_version=sb._envd_version,
        envd_access_token=token,
        traffic_access_token=sb.traffic_access_token,
        connection_config=ConnectionConfig(extra_sandbox_headers=headers, **params),
    )


def _container_ip(sandbox_id):
    r = subprocess.run(
        [
            "docker",
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}",
            f"stockade-{sandbox_id}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    ips = r.stdout.split()
    return ips[0] if ips else None


def test_commands_run_round_trip(e2b_env, run_id, capsys):
    sb = Sandbox.create(timeout=900, metadata={"suite": run_id, "role": "bench"})
    try:
        ip = _container_ip(sb.sandbox_id)
        assert ip, "the sandbox's address could not be found for the direct measurement"
        direct = _straight_to_the_agent(sb, ip)
        token = e2b_env.tokens["tenant-a"]
        url = f"{e2b_env.base}/api/v1/sandbox/{sb.sandbox_id}/exec"
        with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:

            def own_exec():
                r = http.post(url, json={"cmd": ["/bin/bash", "-l", "-c", "true"]})
                assert r.status_code == 200 and r.json()["exitCode"] == 0, r.text

            samples = _time_interleaved(
                {
                    "e2b SDK via Stockade (/e2b)": lambda: sb.commands.run("true"),
                    "e2b SDK straight to the agent": lambda: direct.commands.run("true"),
                    "Stockade exec route (same command)": own_exec,
                },
                RUNS,
            )
        results = {name: _percentiles(s) for name, s in samples.items()}

        overhead = round(
            results["e2b SDK via Stockade (/e2b)"]["p50_ms"]
            - results["e2b SDK straight to the agent"]["p50_ms"],
            3,
        )
        report = {"commands_run_true": results, "compat_layer_p50_overhead_ms": overhead}
        path = os.environ.get("STOCKADE_COMPAT_BENCH_OUT")
        if path:
            with open(path, "w") as f:
                json.dump(report, f, indent=2)
        with capsys.disabled():
            print("\n== commands.run(\"true\") round trip ==")
            for name, r in results.items():
                print(f"  {name:40s} p50 {r['p50_ms']:8.3f} ms   p99 {r['p99_ms']:8.3f} ms   ({r['runs']} runs)")
            print(f"  compatibility layer (p50 difference): {overhead:.3f} ms")
        # The target (<= 1 ms added) is reported, not enforced: timings on a
        # shared machine are noisy. Only a gross regression fails, e.g. a
        # 40 ms delayed-ACK stall on every call.
        via = results["e2b SDK via Stockade (/e2b)"]["p50_ms"]
        direct = results["e2b SDK straight to the agent"]["p50_ms"]
        assert via <= 3 * direct + 5.0, report
    finally:
        sb.kill()


LIFECYCLE_RUNS = int(os.environ.get("STOCKADE_COMPAT_LIFECYCLE_RUNS", "8"))


def test_lifecycle_calls_next_to_the_native_api(e2b_env, run_id, capsys):
    """Create, pause, resume and kill through the e2b SDK and through
    Stockade's own API, taking turns: what the E2B layer adds to each."""
    token = e2b_env.tokens["tenant-a"]
    base = e2b_env.base
    samples = {}

    def timed(name, fn):
        t = time.perf_counter()
        out = fn()
        samples.setdefault(name, []).append(time.perf_counter() - t)
        return out

    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:

        def native(method, path, **kw):
            r = http.request(method, f"{base}/api/v1{path}", **kw)
            assert r.status_code in (200, 201), r.text
            return r.json()

        for i in range(LIFECYCLE_RUNS + 1):
            sb = timed("create (e2b SDK)", lambda: Sandbox.create(timeout=300, metadata={"suite": run_id}))
            own = timed(
                "create (native)",
                lambda: native("POST", "/sandbox", json={"name": f"lc-{run_id}-{i}", "timeoutMinutes": 5}),
            )
            timed("pause (e2b SDK)", sb.pause)
            timed("pause (native)", lambda: native("POST", f"/sandbox/{own['id']}/pause"))
            timed("resume (e2b SDK connect)", lambda: Sandbox.connect(sb.sandbox_id, timeout=300))
            timed("resume (native)", lambda: native("POST", f"/sandbox/{own['id']}/resume"))
            timed("kill (e2b SDK)", sb.kill)
            timed("kill (native)", lambda: native("DELETE", f"/sandbox/{own['id']}"))
            if i == 0:
                samples.clear()  # the first round warms both paths up
    results = {name: _percentiles(s) for name, s in samples.items()}
    added = {
        what: round(results[f"{what} (e2b SDK)" if what != "resume" else "resume (e2b SDK connect)"]["p50_ms"]
                    - results[f"{what} (native)"]["p50_ms"], 1)
        for what in ("create", "pause", "resume", "kill")
    }
    path = os.environ.get("STOCKADE_COMPAT_BENCH_LIFECYCLE_OUT")
    if path:
        with open(path, "w") as f:
            json.dump({"lifecycle": results, "e2b_added_p50_ms": added}, f, indent=2)
    with capsys.disabled():
        print("\n== sandbox lifecycle: the e2b SDK next to Stockade's API ==")
        for name, r in results.items():
            print(f"  {name:28s} p50 {r['p50_ms']:9.1f} ms   p99 {r['p99_ms']:9.1f} ms   ({r['runs']} runs)")
        for what, ms in added.items():
            print(f"  the E2B layer adds to {what}: {ms:.1f} ms (p50 difference)")
    # Reported, not enforced (a shared machine is noisy); a gross
    # regression — the SDK path several times the native one — fails.
    for what in ("create", "kill"):
        assert results[f"{what} (e2b SDK)"]["p50_ms"] <= 3 * results[f"{what} (native)"]["p50_ms"] + 200, results
