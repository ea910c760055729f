# shellcheck shell=bash
# A real S3-protocol server for the object-store tests. Source
# this file, then call
#
#     ensure_moto
#
# It installs moto's standalone server (`pip install 'moto[server]'`) when
# `moto_server` is missing (and python3/pip with apt-get when those are), and
# exports STOCKADE_TEST_MOTO_SERVER with its path. The tests start their own
# moto_server on a free 127.0.0.1 port and stop it when they end, so nothing
# keeps running. Prints nothing on success; says what failed otherwise.

_s3_run() {
    local log=$1 what=$2
    shift 2
    if ! "$@" >"$log" 2>&1; then
        echo "ensure_moto: $what failed: $*" >&2
        sed 's/^/    /' "$log" >&2
        return 1
    fi
}

ensure_moto() {
    local log bin
    log=$(mktemp "${TMPDIR:-/tmp}/ensure_moto.XXXXXX") || return 1
    # shellcheck disable=SC2064 # expand $log now
    trap "rm -f '$log'; trap - RETURN" RETURN

    if ! command -v moto_server >/dev/null 2>&1; then
        if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
            if [ "$(id -u)" != 0 ]; then
                echo "ensure_moto: python3 and pip are needed: run 'sudo apt-get install python3-pip'" >&2
                return 1
            fi
            _s3_run "$log" "apt-get update" env DEBIAN_FRONTEND=noninteractive apt-get update -qq || return 1
            _s3_run "$log" "installing python3-pip" env DEBIAN_FRONTEND=noninteractive \
                apt-get install -y -qq --no-install-recommends python3 python3-pip || return 1
        fi
        # Debian's Python refuses system-wide installs without the flag.
        if ! python3 -m pip install --quiet 'moto[server]' >"$log" 2>&1; then
            _s3_run "$log" "installing moto[server]" \
                python3 -m pip install --quiet --break-system-packages 'moto[server]' || return 1
        fi
        hash -r
    fi
    bin=$(command -v moto_server) || {
        echo "ensure_moto: moto[server] was installed but moto_server is not on PATH ($PATH)" >&2
        return 1
    }
    export STOCKADE_TEST_MOTO_SERVER="$bin"
}
