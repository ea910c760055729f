# shellcheck shell=bash
# gVisor (runsc) for the tests. Source this file, then call
# `ensure_runsc`: it installs Debian's runsc package when absent and
# registers it with the Docker Engine the tests use as the OCI runtime
# `runsc` — merged into /etc/docker/daemon.json's "runtimes" without
# touching the file's other settings — then sends dockerd SIGHUP, which
# reloads its runtimes without a restart (a Docker Engine this script did
# not start is never restarted). Idempotent; silent on success.
#
# Flags (runtimeArgs), found on Debian bookworm's runsc 0.0~20221219:
#   --platform=ptrace  no KVM needed (the release's other platform is kvm);
#   --network=host     gVisor's own network stack refuses to start on
#                      kernels where net.core.rmem_default is visible in
#                      every network namespace (6.x): it takes the
#                      container's namespace for the host's ("cannot run
#                      with network enabled in root network namespace").
#                      With host networking gVisor uses the network
#                      namespace Docker made for the container, so the
#                      sandbox still sits on its own veth on Stockade's
#                      bridge, under the same isolation rules;
#   --oci-seccomp      apply the container's seccomp profile inside gVisor
#                      too (no io_uring for the main process).
# cgroup v1 needs no flag. STOCKADE_RUNSC_ARGS overrides them (one
# argument per word), e.g. "--platform=kvm --oci-seccomp".
#
# After registering, a trial container runs under runsc. When runsc cannot
# be installed or registered, it says why and returns non-zero. When it is
# registered but cannot run a container here, STOCKADE_RUNSC_UNUSABLE is
# exported with the reason (the runsc test suite then skips, saying so)
# and it returns 0; when it works, STOCKADE_RUNSC_REQUIRED=1 is exported (a
# missing runsc then fails that suite instead of skipping it).

STOCKADE_DOCKER_DAEMON_JSON="${STOCKADE_DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}"

_stockade_runsc_err() {
    printf 'ensure_runsc: %s\n' "$*" >&2
}

ensure_runsc() {
    local runsc_path
    runsc_path="$(command -v runsc 2>/dev/null || true)"
    if [ -z "$runsc_path" ]; then
        local log
        log="$(mktemp)"
        if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends runsc ||
               { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
                 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends runsc; }; } \
                >"$log" 2>&1; then
            _stockade_runsc_err "installing runsc with apt-get failed:"
            tail -n 20 "$log" >&2
            rm -f "$log"
            return 1
        fi
        rm -f "$log"
        runsc_path="$(command -v runsc)"
    fi

    local args="${STOCKADE_RUNSC_ARGS:---platform=ptrace --network=host --oci-seccomp}"
    # Merge {"runtimes": {"runsc": {...}}} into the daemon's configuration.
    local changed
    if ! changed="$(python3 - "$STOCKADE_DOCKER_DAEMON_JSON" "$runsc_path" "$args" <<'PY'
import json
import os
import sys

path, runsc, args = sys.argv[1], sys.argv[2], sys.argv[3].split()
config = {}
if os.path.exists(path):
    with open(path) as f:
        text = f.read().strip()
    if text:
        config = json.loads(text)
wanted = {"path": runsc}
if args:
    wanted["runtimeArgs"] = args
runtimes = config.setdefault("runtimes", {})
if runtimes.get("runsc") == wanted:
    print("unchanged")
    sys.exit(0)
runtimes["runsc"] = wanted
os.makedirs(os.path.dirname(path), exist_ok=True)
tmp = path + ".stockade-tmp"
with open(tmp, "w") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
os.replace(tmp, path)
print("changed")
PY
)"; then
        _stockade_runsc_err "could not update $STOCKADE_DOCKER_DAEMON_JSON"
        return 1
    fi

    if [ "$changed" = "changed" ] || ! _stockade_runsc_registered "$args"; then
        local pid
        pid="$(pgrep -xo dockerd 2>/dev/null || true)"
        if [ -z "$pid" ]; then
            _stockade_runsc_err "dockerd is not running here; register runsc in $STOCKADE_DOCKER_DAEMON_JSON of the engine the tests use"
            return 1
        fi
        # SIGHUP: dockerd reloads daemon.json (runtimes included) in place.
        kill -HUP "$pid"
        local i=0
        until _stockade_runsc_registered "$args"; do
            if [ "$i" -ge 20 ]; then
                _stockade_runsc_err "dockerd did not pick up the runsc runtime after SIGHUP (see its log)"
                return 1
            fi
            sleep 0.5
            i=$((i + 1))
        done
    fi

    # A trial run: registered is not the same as working on this host.
    local image="${STOCKADE_TEST_IMAGE:-stockade-test-base:latest}" trial
    if ! docker image inspect "$image" >/dev/null 2>&1; then
        image=""
    fi
    if [ -n "$image" ]; then
        if trial="$(docker run --rm --runtime runsc --label io.stockade.test=runsc-trial \
                "$image" sh -c 'echo runsc-works' 2>&1)" && [ "$trial" = "runsc-works" ]; then
            unset STOCKADE_RUNSC_UNUSABLE
            export STOCKADE_RUNSC_REQUIRED=1
        else
            export STOCKADE_RUNSC_UNUSABLE="a container under runsc ($args) fails: $(printf '%s' "$trial" | tail -n 2 | tr '\n' ' ')"
            unset STOCKADE_RUNSC_REQUIRED
            _stockade_runsc_err "$STOCKADE_RUNSC_UNUSABLE"
        fi
    fi
}

# Whether the engine lists runsc with exactly these runtime arguments.
_stockade_runsc_registered() {
    local want
    # shellcheck disable=SC2086 # one runtime argument per word
    want="$(printf '%s\n' $1 | python3 -c 'import json,sys; print(json.dumps([l.strip() for l in sys.stdin if l.strip()]))')"
    docker info --format '{{json .Runtimes.runsc}}' 2>/dev/null |
        python3 -c 'import json,sys; r=json.loads(sys.stdin.read() or "null") or {}; sys.exit(0 if json.dumps(r.get("runtimeArgs") or []) == sys.argv[1] else 1)' "$want"
}
