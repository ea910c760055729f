"""Fixtures of the compatibility suites: one real Stockade server per test
session (see stockade_server.py) and the SDKs configured as their users
would configure them, through environment variables."""

import contextlib
import importlib.metadata
import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest

from stockade_server import CODE_INTERPRETER_IMAGE, PROXY_DOMAIN, start_server, stop_server


def pytest_report_header(config):
    versions = []
    for dist in ("e2b", "e2b-code-interpreter", "prime-sandboxes"):
        try:
            versions.append(f"{dist}=={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return "SDKs under test: " + (", ".join(versions) or "none installed")


@pytest.fixture(scope="session")
def stockade():
    server = start_server()
    try:
        yield server
    finally:
        stop_server(server)


@pytest.fixture(scope="session")
def run_id():
    """Marks what one run creates (metadata, labels), so filters see only it."""
    return secrets.token_hex(4)


@contextlib.contextmanager
def _environment(**values):
    """Sets the environment variables `values` (None: unset) for the block,
    then puts back what was there before."""
    saved = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def e2b_env(stockade):
    """E2B's SDK pointed at Stockade the documented way: E2B_API_URL and
    E2B_SANDBOX_URL at /e2b, a Stockade token (tenant A's) as E2B_API_KEY."""
    with _environment(
        E2B_API_URL=f"{stockade.base}/e2b",
        E2B_SANDBOX_URL=f"{stockade.base}/e2b",
        E2B_API_KEY=stockade.tokens["tenant-a"],
    ):
        yield stockade


@pytest.fixture(scope="session")
def prime_env(stockade, tmp_path_factory):
    """prime-sandboxes pointed at Stockade: PRIME_API_BASE_URL and a Stockade
    token (tenant A's) as PRIME_API_KEY; its caches in a fresh home."""
    with _environment(
        PRIME_API_BASE_URL=stockade.base,
        PRIME_API_KEY=stockade.tokens["tenant-a"],
        HOME=str(tmp_path_factory.mktemp("prime-home")),
        PRIME_TEAM_ID=None,
    ):
        yield stockade


@pytest.fixture(scope="session")
def proxy_domain(stockade):
    return f"{PROXY_DOMAIN}:{stockade.port}"


@pytest.fixture(scope="session")
def code_interpreter_image():
    """The image of the runtime preset `code-interpreter-v1` (the
    code-interpreter SDKs' default template) must be in Docker: no registry
    has it, so without it those sandboxes cannot start."""
    r = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", CODE_INTERPRETER_IMAGE],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.fail(
            f"{CODE_INTERPRETER_IMAGE} is not in Docker: build it with "
            f"`scripts/build-image code-interpreter` ({r.stderr.strip()})"
        )
    return CODE_INTERPRETER_IMAGE


@pytest.fixture
def node_script(e2b_env):
    """Runs ts/SCRIPT with node and the npm package PACKAGE (installed by
    scripts/lib/python.sh, named in STOCKADE_COMPAT_NODE_MODULES), with the
    suites' environment and `extra`; returns the JSON of its last line of
    output. Skips the test without node or the package; `before` runs once
    they are known to be there."""

    def run(package, script, run_id, extra=None, before=None, timeout=180):
        node = shutil.which("node")
        modules = os.environ.get("STOCKADE_COMPAT_NODE_MODULES")
        if not node or not modules or not (Path(modules) / package).is_dir():
            pytest.skip(f"node or the npm {package} package is not installed (scripts/lib/python.sh)")
        if before is not None:
            before()
        env = dict(os.environ, NODE_PATH=modules, STOCKADE_COMPAT_RUN_ID=run_id, **(extra or {}))
        r = subprocess.run(
            [node, str(Path(__file__).resolve().parent / "ts" / script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
        return json.loads(r.stdout.strip().splitlines()[-1])

    return run
