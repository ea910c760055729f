"""E2B's Volume API through the TypeScript SDK (npm `e2b`): ts/volumes.cjs
creates a volume, writes through the content API, mounts it in two sandboxes
(one read-only), checks another account gets nothing and destroys it."""


def test_typescript_sdk_volumes(node_script, e2b_env, run_id):
    seen = node_script(
        "e2b",
        "volumes.cjs",
        f"{run_id}-ts",
        extra={
            "E2B_VOLUME_API_URL": f"{e2b_env.base}/e2b",
            "STOCKADE_COMPAT_OTHER_KEY": e2b_env.tokens["tenant-b"],
        },
        timeout=300,
    )
    assert seen == {
        "volumeId": seen["volumeId"],
        "shared": True,
        "isolated": True,
        "destroyed": True,
    }
