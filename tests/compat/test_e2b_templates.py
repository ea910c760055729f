"""E2B's Template API through the real `e2b` SDK, unchanged: templates
built from a local base image (and from another template) with every step kind (`copy`, `run_cmd` as
the image's user and as root, `set_envs`, `set_workdir`, `set_user`,
`set_start_cmd`/`set_ready_cmd`) and from a Dockerfile, their files
uploaded through the signed link the API hands out, logs streamed, the
cache used on a rebuild, tags and aliases, sandboxes created from them
seeing every step's effect, a failing step's exit code and output in the
exception, another account seeing nothing, and deletion."""

import time

import httpx
import pytest

e2b = pytest.importorskip("e2b")

from e2b import BuildException, Sandbox, Template  # noqa: E402

pytestmark = pytest.mark.usefixtures("e2b_env")


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    """A build context: files for `copy` and a Dockerfile."""
    root = tmp_path_factory.mktemp("template-context")
    (root / "app").mkdir()
    (root / "app" / "hello.txt").write_text("hello from the context\n")
    (root / "app" / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (root / "notes.md").write_text("level notes\n")
    return root


def _api(env, who="tenant-a"):
    return httpx.Client(
        base_url=f"{env.base}/e2b",
        headers={"X-API-Key": env.tokens[who]},
        timeout=60,
    )


def _delete(env, name):
    with _api(env) as api:
        api.delete(f"/templates/{name}")


def _run(sb, cmd, **kw):
    return sb.commands.run(cmd, **kw).stdout.strip()


def _sees(sb, expected):
    """Each command's output in the sandbox is what `expected` says."""
    for cmd, output in expected.items():
        assert _run(sb, cmd) == output, cmd


def test_a_template_of_every_step_kind_builds_caches_and_runs(e2b_env, context, run_id):
    name = f"steps-{run_id}"
    template = (
        Template(file_context_path=str(context))
        .from_image(e2b_env.debian_image)
        .set_envs({"GREETING": "hello", "LEVEL": "3"})
        .set_workdir("/opt/app")
        .copy("app", "/opt/app/", mode=0o755)
        .run_cmd("echo built > /opt/app/built.txt")
        .run_cmd("id -un > /root/who.txt", user="root")
        .set_user("user")
        .run_cmd("id -un > /home/user/who.txt && echo $GREETING-$LEVEL > /home/user/env.txt")
        .set_start_cmd("echo started > /tmp/started && sleep 100000", "test -f /tmp/started")
    )
    logs = []
    try:
        info = Template.build(template, name, tags=["v1"], on_build_logs=logs.append)
        assert info.template_id and info.build_id
        text = "\n".join(str(getattr(entry, "message", entry)) for entry in logs)
        assert "RUN echo built" in text, text
        assert Template.alias_exists(name)
        assert not Template.alias_exists(f"none-{run_id}")

        sb = Sandbox.create(template=name, timeout=300)
        try:
            assert _run(sb, "pwd") == "/opt/app"
            assert _run(sb, "id -un") == "user"
            assert _run(sb, "echo $GREETING") == "hello"
            assert _run(sb, "cat /opt/app/hello.txt") == "hello from the context"
            assert _run(sb, "stat -c %a /opt/app/run.sh") == "755"
            assert _run(sb, "cat /opt/app/built.txt") == "built"
            assert _run(sb, "cat /root/who.txt", user="root") == "root"
            assert _run(sb, "cat /home/user/who.txt") == "user"
            assert _run(sb, "cat /home/user/env.txt") == "hello-3"
            # The start command ran at the sandbox's start.
            assert _run(sb, "cat /tmp/started") == "started"
            assert sb.get_info().template_id == info.template_id
        finally:
            sb.kill()

        # The same template again: every step that changes files comes from
        # the cache.
        again = []
        Template.build(template, name, on_build_logs=again.append)
        text = "\n".join(str(getattr(entry, "message", entry)) for entry in again)
        assert text.count("CACHED") >= 4, text

        # Tags: the first build is v1, `stable` is given to it, then taken.
        tags = {t.tag: t.build_id for t in Template.get_tags(name)}
        assert tags["v1"] == info.build_id, tags
        Template.assign_tags(f"{name}:v1", "stable")
        assert {t.tag for t in Template.get_tags(name)} >= {"v1", "stable"}
        sb = Sandbox.create(template=f"{name}:stable", timeout=120)
        try:
            assert _run(sb, "cat /opt/app/built.txt") == "built"
        finally:
            sb.kill()
        Template.remove_tags(name, "stable")
        assert "stable" not in {t.tag for t in Template.get_tags(name)}
        with pytest.raises(Exception):
            Sandbox.create(template=f"{name}:stable", timeout=60)
    finally:
        _delete(e2b_env, name)
    assert not Template.alias_exists(name)


def test_a_dockerfile_template_builds_in_the_background(e2b_env, context, run_id):
    name = f"dockerfile-{run_id}"
    dockerfile = (
        f"FROM {e2b_env.debian_image}\n"
        "ARG LEVEL=7\n"
        "ENV MODE=fast\n"
        "WORKDIR /srv\n"
        "COPY notes.md ./\n"
        'RUN echo "level $LEVEL" > level.txt\n'
    )
    template = Template(file_context_path=str(context)).from_dockerfile(dockerfile)
    try:
        info = Template.build_in_background(template, name)
        # Polled the way the SDK polls: the log by offset until the build
        # ends, then the rest of the log.
        offset, lines, deadline = 0, [], time.monotonic() + 300
        while True:
            status = Template.get_build_status(info, logs_offset=offset)
            assert status.status.value in ("waiting", "building", "ready"), (status, lines)
            offset += len(status.log_entries)
            lines += [e.message for e in status.log_entries]
            if status.status.value == "ready" and not status.log_entries:
                break
            assert time.monotonic() < deadline, "the build did not finish"
            time.sleep(0.5)
        assert status.status.value == "ready", (status, lines)
        assert any("RUN" in line and "level.txt" in line for line in lines), lines

        sb = Sandbox.create(template=name, timeout=120)
        try:
            # from_dockerfile leaves E2B's user when the file names none.
            _sees(sb, {
                "pwd": "/srv",
                "id -un": "user",
                "cat /srv/level.txt": "level 7",
                "cat /srv/notes.md": "level notes",
                "echo $MODE": "fast",
            })
        finally:
            sb.kill()

        # A template on top of it keeps its files, workdir, user and env.
        child = f"child-{run_id}"
        try:
            Template.build(
                Template()
                .from_template(name)
                .run_cmd("cat /srv/level.txt > /srv/child.txt", user="root"),
                child,
            )
            sb = Sandbox.create(template=child, timeout=120)
            try:
                _sees(sb, {
                    "cat /srv/child.txt": "level 7",
                    "pwd": "/srv",
                    "id -un": "user",
                    "echo $MODE": "fast",
                })
            finally:
                sb.kill()
        finally:
            _delete(e2b_env, child)
    finally:
        _delete(e2b_env, name)


def test_a_failing_step_names_its_exit_code_and_output(e2b_env, run_id):
    name = f"failing-{run_id}"
    template = (
        Template()
        .from_image(e2b_env.debian_image)
        .run_cmd("echo fine")
        .run_cmd("echo boom-output >&2; exit 7")
    )
    try:
        with pytest.raises(BuildException) as failed:
            Template.build(template, name)
        message = str(failed.value)
        assert "exit code 7" in message and "boom-output" in message, message
    finally:
        _delete(e2b_env, name)


def test_bad_builds_are_400s_naming_the_field(e2b_env, run_id):
    name = f"bad-{run_id}"
    with _api(e2b_env) as api:
        made = api.post("/v3/templates", json={"name": name})
        assert made.status_code == 202, made.text
        tid, bid = made.json()["templateID"], made.json()["buildID"]
        try:
            for body, field in [
                ({"fromImage": e2b_env.debian_image, "steps": [{"type": "SHELL", "args": ["x"]}]}, "steps[0].type"),
                ({"fromImage": e2b_env.debian_image, "steps": [{"type": "ENV", "args": ["A"]}]}, "steps[0].args"),
                ({"fromImage": e2b_env.debian_image, "steps": [{"type": "COPY", "args": ["a", "/b"]}]}, "steps[0].filesHash"),
                ({"fromImage": e2b_env.debian_image, "steps": [{"type": "COPY", "args": ["a", "/b", "", "9x"], "filesHash": "0" * 64}]}, "steps[0].args[3]"),
                ({"fromImage": e2b_env.debian_image, "steps": [{"type": "COPY", "args": ["a", "/b"], "filesHash": "0" * 64}]}, "steps[0].filesHash"),
                ({"fromImage": e2b_env.debian_image, "fromImageRegistry": {"type": "registry", "username": "u", "password": "p"}}, "fromImageRegistry"),
                ({"steps": []}, "fromImage"),
            ]:
                r = api.post(f"/v2/templates/{tid}/builds/{bid}", json=body)
                assert r.status_code == 400, (body, r.text)
                assert r.json()["code"] == 400 and field in r.json()["message"], (field, r.text)
            assert api.post("/v3/templates", json={"name": "Not A Name"}).status_code == 400
            r = api.get(f"/templates/{tid}/files/{'z' * 64}")
            assert r.status_code == 400 and "hash" in r.json()["message"], r.text
        finally:
            api.delete(f"/templates/{tid}")


def test_another_account_sees_nothing_and_links_cannot_be_forged(e2b_env, run_id):
    name = f"private-{run_id}"
    with _api(e2b_env) as api, _api(e2b_env, "tenant-b") as other:
        made = api.post("/v3/templates", json={"name": name})
        assert made.status_code == 202, made.text
        tid, bid = made.json()["templateID"], made.json()["buildID"]
        try:
            digest = "ab" * 32
            link = api.get(f"/templates/{tid}/files/{digest}")
            assert link.status_code == 201, link.text
            url = link.json()["url"]
            assert link.json()["present"] is False and url.startswith("http")
            for path in [
                f"/templates/{tid}",
                f"/templates/{name}",
                f"/templates/aliases/{name}",
                f"/templates/{tid}/files/{digest}",
                f"/templates/{tid}/builds/{bid}/status",
                f"/templates/{tid}/tags",
            ]:
                r = other.get(path)
                assert r.status_code == 404, (path, r.status_code, r.text)
            r = other.post(f"/v2/templates/{tid}/builds/{bid}", json={"fromImage": e2b_env.debian_image})
            assert r.status_code == 404, r.text
            assert other.delete(f"/templates/{tid}").status_code == 404
            # For the other account the name is no template: an image
            # reference no host has.
            r = other.post("/sandboxes", json={"templateID": name})
            assert r.status_code in (404, 422), r.text
            # The link takes the files with no API key, but a changed one
            # (another hash, a later expiry) takes nothing.
            forged = url.replace(digest, "cd" * 32)
            assert httpx.put(forged, content=b"x").status_code == 403
            account, template, hash_, expiry, sig = url.rsplit("/", 1)[1].split(".")
            later = url.replace(f".{expiry}.", f".{int(expiry) + 3600}.")
            assert httpx.put(later, content=b"x").status_code == 403
            assert httpx.put(url + "0", content=b"x").status_code == 403
        finally:
            api.delete(f"/templates/{tid}")

