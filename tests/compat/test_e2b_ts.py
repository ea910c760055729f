"""E2B's TypeScript SDK (npm `e2b`, Node 20) against Stockade, one smoke test:
ts/smoke.cjs run by node with the same environment variables as
the Python suite. scripts/lib/python.sh installs the package (the version in
ts/package.json) and names its node_modules in STOCKADE_COMPAT_NODE_MODULES;
without node or the package the test is skipped, which the summary shows."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def test_typescript_sdk_smoke(e2b_env, run_id):
    node = shutil.which("node")
    modules = os.environ.get("STOCKADE_COMPAT_NODE_MODULES")
    if not node or not modules or not (Path(modules) / "e2b").is_dir():
        pytest.skip("node or the npm e2b package is not installed (scripts/lib/python.sh)")
    env = dict(os.environ, NODE_PATH=modules, STOCKADE_COMPAT_RUN_ID=f"{run_id}-ts")
    r = subprocess.run(
        [node, str(HERE / "ts" / "smoke.cjs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["stdout"] == "hello from ts\n"
    assert seen["killed"] is True
