"""E2B's code-interpreter TypeScript SDK (npm `@e2b/code-interpreter`,
Node 20) against Stockade, one smoke test: ts/code_interpreter.cjs run by
node with the same environment variables as the Python suites.
scripts/lib/python.sh installs the package (the version in ts/package.json)
next to npm `e2b` and names their node_modules in
STOCKADE_COMPAT_NODE_MODULES; without node or the package the test is
skipped, which the summary shows."""


def test_code_interpreter_typescript_sdk_smoke(node_script, run_id, request):
    # The image only once node and the package are known to be there:
    # without them the test is skipped whatever the image.
    seen = node_script(
        "@e2b/code-interpreter",
        "code_interpreter.cjs",
        f"{run_id}-ts-code",
        before=lambda: request.getfixturevalue("code_interpreter_image"),
        timeout=300,
    )
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
