"""E2B's Template API through the TypeScript SDK (npm `e2b`): ts/templates.cjs
builds a template with every step kind and one from a Dockerfile (their files
uploaded through the signed link as a streamed body), creates sandboxes from
both, checks each step's effect and deletes them."""

import pytest


@pytest.fixture
def context(tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "hello.txt").write_text("hello from the context\n")
    return tmp_path


def test_typescript_sdk_templates(node_script, e2b_env, context, run_id):
    seen = node_script(
        "e2b",
        "templates.cjs",
        f"{run_id}-ts",
        extra={
            "STOCKADE_COMPAT_BASE_IMAGE": e2b_env.debian_image,
            "STOCKADE_COMPAT_CONTEXT": str(context),
        },
        timeout=600,
    )
    assert seen == {"steps": True, "dockerfile": True}
