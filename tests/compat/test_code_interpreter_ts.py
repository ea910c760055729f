"""E2B's code-interpreter TypeScript SDK (npm `@e2b/code-interpreter`,
Node 20) against Stockade, one smoke test: ts/code_interpreter.cjs run by
node with the same environment variables as the Python suites.
scripts/lib/python.sh installs the package (the version in ts/package.json)
next to npm `e2b` and names their node_modules in
STOCKADE_COMPAT_NODE_MODULES; without node or the package the test is
skipped, which the summary shows."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def test_code_interpreter_typescript_sdk_smoke(e2b_env, run_id, request):
    node = shutil.which("node")
    modules = os.environ.get("STOCKADE_COMPAT_NODE_MODULES")
    if not node or not modules or not (Path(modules) / "@e2b" / "code-interpreter").is_dir():
        pytest.skip(
            "node or the npm @e2b/code-interpreter package is not installed (scripts/lib/python.sh)"
        )
    # Only now: without node the test is skipped whatever the image.
    request.getfixturevalue("code_interpreter_image")
    env = dict(os.environ, NODE_PATH=modules, STOCKADE_COMPAT_RUN_ID=f"{run_id}-ts-code")
    r = subprocess.run(
        [node, str(HERE / "ts" / "code_interpreter.cjs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen == {
        "sandboxId": seen["sandboxId"],
        "text": "2",
        "stdout": "one\ntwo\n",
        "error": "ZeroDivisionError",
        "chart": "line",
        "contextCwd": "/tmp",
        "javascript": "2",
        "killed": True,
    }
