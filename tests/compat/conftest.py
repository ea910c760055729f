"""Fixtures of the compatibility suites: one real Stockade server per test
session (see stockade_server.py) and the SDKs configured as their users
would configure them, through environment variables."""

import importlib.metadata
import os
import secrets

import pytest

from stockade_server import PROXY_DOMAIN, start_server, stop_server


def pytest_report_header(config):
    versions = []
    for dist in ("e2b", "prime-sandboxes"):
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


@pytest.fixture(scope="session")
def e2b_env(stockade):
    """E2B's SDK pointed at Stockade the documented way: E2B_API_URL and
    E2B_SANDBOX_URL at /e2b, a Stockade token (tenant A's) as E2B_API_KEY."""
    saved = {k: os.environ.get(k) for k in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY")}
    os.environ["E2B_API_URL"] = f"{stockade.base}/e2b"
    os.environ["E2B_SANDBOX_URL"] = f"{stockade.base}/e2b"
    os.environ["E2B_API_KEY"] = stockade.tokens["tenant-a"]
    yield stockade
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def prime_env(stockade, tmp_path_factory):
    """prime-sandboxes pointed at Stockade: PRIME_API_BASE_URL and a Stockade
    token (tenant A's) as PRIME_API_KEY; its caches in a fresh home."""
    keys = ("PRIME_API_BASE_URL", "PRIME_API_KEY", "HOME", "PRIME_TEAM_ID")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ["PRIME_API_BASE_URL"] = stockade.base
    os.environ["PRIME_API_KEY"] = stockade.tokens["tenant-a"]
    os.environ["HOME"] = str(tmp_path_factory.mktemp("prime-home"))
    os.environ.pop("PRIME_TEAM_ID", None)
    yield stockade
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def proxy_domain(stockade):
    return f"{PROXY_DOMAIN}:{stockade.port}"
