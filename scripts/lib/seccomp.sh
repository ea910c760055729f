# shellcheck shell=bash
# Docker's default seccomp profile for the tests and the profile generator.
# Source this file, then call `ensure_docker_seccomp_default`: it
# installs Debian's golang-github-docker-docker-dev (which ships the profile
# of the packaged Docker version) when the profile is missing, and exports
# STOCKADE_DOCKER_SECCOMP_DEFAULT with its path. Idempotent; silent on
# success.

STOCKADE_DOCKER_SECCOMP_DEFAULT="${STOCKADE_DOCKER_SECCOMP_DEFAULT:-/usr/share/gocode/src/github.com/docker/docker/profiles/seccomp/default.json}"
export STOCKADE_DOCKER_SECCOMP_DEFAULT

ensure_docker_seccomp_default() {
    if [ -r "$STOCKADE_DOCKER_SECCOMP_DEFAULT" ]; then
        return 0
    fi
    local log
    log="$(mktemp)"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            golang-github-docker-docker-dev >"$log" 2>&1; then
        # The package lists may be missing or stale on a fresh machine.
        if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
               DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                   golang-github-docker-docker-dev; } >>"$log" 2>&1; then
            echo "ensure_docker_seccomp_default: installing golang-github-docker-docker-dev failed:" >&2
            tail -n 20 "$log" >&2
            rm -f "$log"
            return 1
        fi
    fi
    rm -f "$log"
    if [ ! -r "$STOCKADE_DOCKER_SECCOMP_DEFAULT" ]; then
        echo "ensure_docker_seccomp_default: $STOCKADE_DOCKER_SECCOMP_DEFAULT is still missing after the install" >&2
        return 1
    fi
}
