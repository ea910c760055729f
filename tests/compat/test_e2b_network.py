"""E2B's egress settings through the SDK: `network=`
on create and `update_network` become Stockade's `networkPolicy` (read back
through Stockade's own API), and the sandbox's DNS shows it is enforced —
Stockade's DNS forwarder answers REFUSED for a name outside an allow list
and any other answer (NOERROR, or SERVFAIL without an upstream) for a name
in it, so no outside host is needed."""

import time

import pytest

e2b = pytest.importorskip("e2b")

from e2b import ALL_TRAFFIC, Sandbox, SandboxException  # noqa: E402

pytestmark = pytest.mark.usefixtures("e2b_env")

REFUSED = 5

# One DNS question (A record) sent over UDP with bash's /dev/udp to the
# sandbox's resolver; prints the answer's response code, or "none" when
# nothing answers within 3 s. The image has bash and coreutils only.
DNS_RCODE = r"""
q='\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00'
IFS=. read -ra labels <<< "$1"
for l in "${labels[@]}"; do q+=$(printf '\\x%02x' "${#l}")$l; done
q+='\x00\x00\x01\x00\x01'
ns=$(sed -n 's/^nameserver[[:space:]]*//p' /etc/resolv.conf | head -n1)
exec 3<>"/dev/udp/$ns/53" || { echo none; exit; }
printf "$q" >&3
reply=$(timeout 3 dd bs=512 count=1 <&3 2>/dev/null | od -An -tu1 -N4)
set -- $reply
[ -n "$4" ] && echo $(( $4 & 15 )) || echo none
"""


def rcode(sbx, name):
    out = sbx.commands.run(f"bash -c {quote(DNS_RCODE)} _ {quote(name)}", timeout=20).stdout.strip()
    return None if out == "none" else int(out)


def quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def policy(e2b_env, sbx):
    status, body = e2b_env.api().request("GET", f"/api/v1/sandbox/{sbx.sandbox_id}")
    assert status == 200, body
    return body["networkPolicy"]


@pytest.fixture
def kill_after():
    made = []
    yield made.append
    for sbx in made:
        sbx.kill()


def test_deny_all_traffic_is_deny_all(e2b_env, kill_after):
    sbx = Sandbox.create(timeout=300, network={"deny_out": [ALL_TRAFFIC]})
    kill_after(sbx)
    assert policy(e2b_env, sbx) == "deny-all"
    # No DNS answer at all (an allow list's names are answered, see below),
    # and no connection out (packets are dropped: it fails at the timeout).
    assert rcode(sbx, "example.com") is None
    r = sbx.commands.run("timeout 3 bash -c 'exec 3<>/dev/tcp/192.0.2.1/80' 2>&1; echo rc=$?")
    assert "rc=0" not in r.stdout, r.stdout


def test_allow_out_under_all_traffic_is_an_allow_list(e2b_env, kill_after):
    sbx = Sandbox.create(
        timeout=300, network={"allow_out": ["example.com"], "deny_out": [ALL_TRAFFIC]}
    )
    kill_after(sbx)
    assert policy(e2b_env, sbx) == {"allow": ["example.com"]}
    assert rcode(sbx, "example.org") == REFUSED
    answered = rcode(sbx, "example.com")
    assert answered is not None and answered != REFUSED


def test_update_network_applies_live(e2b_env, kill_after):
    sbx = Sandbox.create(
        timeout=300, network={"allow_out": ["example.com"], "deny_out": [ALL_TRAFFIC]}
    )
    kill_after(sbx)
    assert rcode(sbx, "example.org") == REFUSED
    # A deny list with an exception: 10.0.0.0/22 less 10.0.1.0/24.
    sbx.update_network({"deny_out": ["10.0.0.0/22"], "allow_out": ["10.0.1.0/24"]})
    assert policy(e2b_env, sbx) == {"deny": ["10.0.0.0/24", "10.0.2.0/23"]}
    deadline = time.monotonic() + 5
    while rcode(sbx, "example.org") == REFUSED and time.monotonic() < deadline:
        time.sleep(0.2)
    assert rcode(sbx, "example.org") != REFUSED  # no allow list: names are answered


def test_inexpressible_rules_are_refused_with_the_field(e2b_env):
    with pytest.raises(SandboxException) as e:
        Sandbox.create(
            timeout=60, network={"allow_out": ["example.com"], "deny_out": ["10.0.0.0/8"]}
        )
    assert "network.allowOut[0]" in str(e.value) and "400" in str(e.value)
