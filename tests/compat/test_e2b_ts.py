"""E2B's TypeScript SDK (npm `e2b`, Node 20) against Stockade, one smoke test:
ts/smoke.cjs run by node with the same environment variables as
the Python suite. scripts/lib/python.sh installs the package (the version in
ts/package.json) and names its node_modules in STOCKADE_COMPAT_NODE_MODULES;
without node or the package the test is skipped, which the summary shows."""


def test_typescript_sdk_smoke(node_script, run_id):
    seen = node_script("e2b", "smoke.cjs", f"{run_id}-ts")
    assert seen["stdout"] == "hello from ts\n"
    assert seen["killed"] is True
