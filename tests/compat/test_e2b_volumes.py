"""E2B's Volume API through the real `e2b` SDK, unchanged: E2B_VOLUME_API_URL
points at the same /e2b as E2B_API_URL. A volume is created, written through
the content API, mounted in two sandboxes (one read-write through
`Sandbox.create(volume_mounts=…)`, one read-only through Stockade's
`readOnly` addition to the same create body, reached with `Sandbox.connect`),
each sees the other's writes, the read-only one cannot write, another account
gets 404 from every route, and the volume is destroyed."""

import httpx
import pytest

e2b = pytest.importorskip("e2b")

from e2b import (  # noqa: E402
    CommandExitException,
    Sandbox,
    Volume,
    VolumeFileType,
    VolumeNotFoundException,
)

pytestmark = pytest.mark.usefixtures("e2b_volume_env")


@pytest.fixture(scope="module")
def e2b_volume_env(e2b_env, monkeypatch_module):
    monkeypatch_module.setenv("E2B_VOLUME_API_URL", f"{e2b_env.base}/e2b")
    return e2b_env


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def volume(e2b_volume_env, run_id):
    vol = Volume.create(f"e2b-vol-{run_id}")
    yield vol
    # Already destroyed by the last test when it got that far.
    try:
        Volume.destroy(vol.volume_id)
    except Exception:
        pass


def _read_only_sandbox(env, name, run_id):
    """A sandbox mounting `name` read-only at /data. E2B's SDK has no
    read-only mount, so the create is Stockade's readOnly in E2B's own body;
    the sandbox is then reached with the SDK's connect."""
    r = httpx.post(
        f"{env.base}/e2b/sandboxes",
        headers={"X-API-Key": env.tokens["tenant-a"]},
        json={
            "templateID": "base",
            "timeout": 300,
            "metadata": {"suite": run_id, "role": "volume-ro"},
            "volumeMounts": [{"name": name, "path": "/data", "readOnly": True}],
        },
        timeout=120,
    )
    assert r.status_code == 201, r.text
    return Sandbox.connect(r.json()["sandboxID"])


def test_volume_create_connect_list_info(volume, run_id):
    assert volume.name == f"e2b-vol-{run_id}"
    assert volume.token, "the create answer carries the content token"
    again = Volume.connect(volume.volume_id)
    assert again.volume_id == volume.volume_id and again.token == volume.token
    info = Volume.get_info(volume.volume_id)
    assert info.name == volume.name and info.token == volume.token
    assert volume.volume_id in [v.volume_id for v in Volume.list()]
    # A second volume of the same name is refused.
    with pytest.raises(Exception) as e:
        Volume.create(volume.name)
    assert "409" in str(e.value) or "exists" in str(e.value).lower()


def test_content_api_without_a_sandbox(volume):
    written = volume.write_file("/seed/input.txt", "prepared once\n")
    assert written.type == VolumeFileType.FILE
    assert written.size == len("prepared once\n")
    assert volume.read_file("/seed/input.txt") == "prepared once\n"
    assert volume.read_file("/seed/input.txt", format="bytes") == b"prepared once\n"
    assert volume.exists("/seed/input.txt")
    assert not volume.exists("/seed/missing.txt")

    made = volume.make_dir("/results/a/b", force=True)
    assert made.type == VolumeFileType.DIRECTORY
    names = sorted(e.name for e in volume.list("/"))
    assert names == ["results", "seed"]
    deep = {e.path for e in volume.list("/results", depth=3)}
    assert {"/results/a", "/results/a/b"} <= deep

    stat = volume.get_info("/seed/input.txt")
    assert stat.name == "input.txt" and stat.path == "/seed/input.txt"
    changed = volume.update_metadata("/seed/input.txt", mode=0o600)
    assert changed.mode & 0o777 == 0o600

    volume.write_file("/scratch.bin", bytes(range(256)) * 64)
    assert volume.read_file("/scratch.bin", format="bytes") == bytes(range(256)) * 64
    volume.remove("/scratch.bin")
    assert not volume.exists("/scratch.bin")

    # Out of the volume: refused, never read.
    for bad in ("/../etc/passwd", "/seed/../../etc/passwd"):
        with pytest.raises(Exception):
            volume.read_file(bad)


def test_two_sandboxes_share_the_volume_one_read_only(e2b_volume_env, volume, run_id):
    rw = Sandbox.create(
        timeout=300,
        metadata={"suite": run_id, "role": "volume-rw"},
        volume_mounts={"/data": volume},
    )
    try:
        ro = _read_only_sandbox(e2b_volume_env, volume.name, run_id)
        try:
            # Both see what the content API wrote.
            for sb in (rw, ro):
                out = sb.commands.run("cat /data/seed/input.txt")
                assert out.stdout == "prepared once\n"

            # The read-write sandbox writes; the other sandbox and the
            # content API see it.
            rw.commands.run("echo from-rw > /data/results/rw.txt")
            assert ro.commands.run("cat /data/results/rw.txt").stdout == "from-rw\n"
            assert volume.read_file("/results/rw.txt") == "from-rw\n"

            # The content API writes; both sandboxes see it.
            volume.write_file("/results/from-api.txt", "from the API")
            for sb in (rw, ro):
                assert sb.commands.run("cat /data/results/from-api.txt").stdout == "from the API"

            # The read-only mount refuses writes.
            with pytest.raises(CommandExitException) as e:
                ro.commands.run("echo nope > /data/results/ro.txt")
            assert "Read-only" in e.value.stderr or "read-only" in e.value.stderr.lower()
            assert not volume.exists("/results/ro.txt")

            # A mounted volume cannot be destroyed.
            with pytest.raises(Exception):
                Volume.destroy(volume.volume_id)
            assert volume.read_file("/seed/input.txt") == "prepared once\n"
        finally:
            ro.kill()
    finally:
        rw.kill()


def test_another_account_gets_404_everywhere(e2b_volume_env, volume):
    b_key = e2b_volume_env.tokens["tenant-b"]
    with pytest.raises(VolumeNotFoundException):
        Volume.get_info(volume.volume_id, api_key=b_key)
    with pytest.raises(VolumeNotFoundException):
        Volume.connect(volume.volume_id, api_key=b_key)
    assert volume.volume_id not in [v.volume_id for v in Volume.list(api_key=b_key)]
    assert Volume.destroy(volume.volume_id, api_key=b_key) is False

    base = e2b_volume_env.base + "/e2b"
    vid = volume.volume_id
    control = [
        ("GET", f"/volumes/{vid}"),
        ("DELETE", f"/volumes/{vid}"),
    ]
    content = [
        ("GET", f"/volumecontent/{vid}/path?path=/seed/input.txt"),
        ("DELETE", f"/volumecontent/{vid}/path?path=/seed/input.txt"),
        ("GET", f"/volumecontent/{vid}/dir?path=/"),
        ("POST", f"/volumecontent/{vid}/dir?path=/stolen"),
        ("GET", f"/volumecontent/{vid}/file?path=/seed/input.txt"),
        ("PUT", f"/volumecontent/{vid}/file?path=/stolen.txt"),
    ]
    for method, path in control:
        r = httpx.request(method, base + path, headers={"X-API-Key": b_key}, timeout=60)
        assert r.status_code == 404, (method, path, r.status_code, r.text)
    # B's own volume token opens only B's volume.
    b_vol = Volume.create(f"{volume.name}", api_key=b_key)
    try:
        for method, path in content:
            for auth in (b_key, b_vol.token):
                r = httpx.request(
                    method,
                    base + path,
                    headers={"Authorization": f"Bearer {auth}"},
                    content=b"x",
                    timeout=60,
                )
                assert r.status_code in (401, 403, 404), (method, path, r.status_code, r.text)
    finally:
        assert Volume.destroy(b_vol.volume_id, api_key=b_key)
    # And B's sandbox cannot mount A's volume by its id or name: B's name
    # space has no such volume now.
    with pytest.raises(Exception) as e:
        Sandbox.create(timeout=60, api_key=b_key, volume_mounts={"/data": volume.name})
    assert "404" in str(e.value) or "not found" in str(e.value).lower()
    # A's content is untouched.
    assert volume.read_file("/seed/input.txt") == "prepared once\n"
    assert not volume.exists("/stolen.txt") and not volume.exists("/stolen")


def test_destroy_frees_everything(e2b_volume_env, volume):
    token = volume.token
    assert Volume.destroy(volume.volume_id) is True
    with pytest.raises(VolumeNotFoundException):
        Volume.get_info(volume.volume_id)
    assert Volume.destroy(volume.volume_id) is False
    r = httpx.get(
        f"{e2b_volume_env.base}/e2b/volumecontent/{volume.volume_id}/file",
        params={"path": "/seed/input.txt"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    assert r.status_code == 404, r.text
    # The name is free again.
    again = Volume.create(volume.name)
    assert again.volume_id != volume.volume_id
    assert Volume.destroy(again.volume_id)
