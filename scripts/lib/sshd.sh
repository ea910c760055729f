# shellcheck shell=bash
# An sshd of the tests' own, for Docker hosts reached over ssh.
# Source this file, then:
#
#   ensure_test_sshd            # start it unless it answers
#   test_sshd_host              # ssh://root@127.0.0.1:PORT
#   test_sshd_opts              # the ssh options that reach it (-i …, -o …)
#   stop_test_sshd              # stop it
#
# It listens on 127.0.0.1 only, on STOCKADE_TEST_SSHD_PORT (22122), with a
# configuration, host key, client key and authorized key of its own under
# /var/lib/stockade-test/sshd (mode 0700), and a known_hosts file there that
# holds its host key; keys only, root allowed (root runs `docker system
# dial-stdio` against the main engine). A system sshd (port 22,
# /etc/ssh/sshd_config) is never started, stopped or read.
#
# openssh-server and openssh-client are installed with apt-get when sshd or
# ssh is missing. Idempotent; silent on success; needs root.

STOCKADE_TEST_SSHD_PORT="${STOCKADE_TEST_SSHD_PORT:-22122}"
STOCKADE_TEST_SSHD_DIR="${STOCKADE_TEST_SSHD_DIR:-/var/lib/stockade-test/sshd}"
STOCKADE_TEST_SSHD_RUN="${STOCKADE_TEST_SSHD_RUN:-/run/stockade-test/sshd}"

_stockade_sshd_err() {
    printf 'ensure_test_sshd: %s\n' "$*" >&2
}

_stockade_sshd_bin() {
    if [ -x /usr/sbin/sshd ]; then
        echo /usr/sbin/sshd
    else
        command -v sshd 2>/dev/null
    fi
}

test_sshd_host() {
    printf 'ssh://root@127.0.0.1:%s\n' "$STOCKADE_TEST_SSHD_PORT"
}

test_sshd_opts() {
    local dir="$STOCKADE_TEST_SSHD_DIR"
    printf '%s\n' "-i $dir/id_ed25519 -o IdentitiesOnly=yes -o UserKnownHostsFile=$dir/known_hosts -o StrictHostKeyChecking=yes"
}

_stockade_sshd_answers() {
    # shellcheck disable=SC2046 # the options are words by design
    timeout 15 ssh -o BatchMode=yes -o ConnectTimeout=5 $(test_sshd_opts) \
        -p "$STOCKADE_TEST_SSHD_PORT" -l root -- 127.0.0.1 true >/dev/null 2>&1
}

_stockade_sshd_install() {
    [ -n "$(_stockade_sshd_bin)" ] && command -v ssh >/dev/null 2>&1 &&
        command -v ssh-keygen >/dev/null 2>&1 && return 0
    # The package's own service is not wanted: policy-rc.d keeps it stopped.
    local policy=/usr/sbin/policy-rc.d made_policy=
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=1
    fi
    local ok=0
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        openssh-server openssh-client >/dev/null 2>&1 ||
        { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
              openssh-server openssh-client >/dev/null 2>&1; } || ok=1
    [ -n "$made_policy" ] && rm -f "$policy"
    if [ "$ok" -ne 0 ] || [ -z "$(_stockade_sshd_bin)" ]; then
        _stockade_sshd_err "could not install openssh-server and openssh-client with apt-get"
        return 1
    fi
}

ensure_test_sshd() {
    local dir="$STOCKADE_TEST_SSHD_DIR" run="$STOCKADE_TEST_SSHD_RUN"
    _stockade_sshd_install || return 1
    mkdir -p "$dir" "$run" /run/sshd || return 1
    chmod 700 "$dir"
    if [ ! -s "$dir/ssh_host_ed25519_key" ]; then
        rm -f "$dir/ssh_host_ed25519_key" "$dir/ssh_host_ed25519_key.pub"
        ssh-keygen -q -t ed25519 -N '' -C stockade-test-sshd -f "$dir/ssh_host_ed25519_key" ||
            { _stockade_sshd_err "ssh-keygen could not make the host key"; return 1; }
    fi
    if [ ! -s "$dir/id_ed25519" ]; then
        rm -f "$dir/id_ed25519" "$dir/id_ed25519.pub"
        ssh-keygen -q -t ed25519 -N '' -C stockade-test-client -f "$dir/id_ed25519" ||
            { _stockade_sshd_err "ssh-keygen could not make the client key"; return 1; }
    fi
    cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
    printf '[127.0.0.1]:%s %s\n' "$STOCKADE_TEST_SSHD_PORT" \
        "$(cut -d' ' -f1,2 "$dir/ssh_host_ed25519_key.pub")" >"$dir/known_hosts"
    chmod 600 "$dir/authorized_keys" "$dir/known_hosts"
    # Many connections at once: the runtime opens one ssh per request.
    cat >"$dir/sshd_config" <<EOF
Port $STOCKADE_TEST_SSHD_PORT
ListenAddress 127.0.0.1
HostKey $dir/ssh_host_ed25519_key
PidFile $run/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
X11Forwarding no
AllowTcpForwarding no
PermitTunnel no
MaxStartups 200:30:400
MaxSessions 100
LogLevel ERROR
EOF
    if [ -s "$run/sshd.pid" ] && kill -0 "$(cat "$run/sshd.pid")" 2>/dev/null; then
        _stockade_sshd_answers && return 0
        kill "$(cat "$run/sshd.pid")" 2>/dev/null || true
        sleep 1
    fi
    local sshd log=/var/log/stockade-test-sshd.log
    sshd="$(_stockade_sshd_bin)"
    if ! "$sshd" -t -f "$dir/sshd_config" 2>>"$log"; then
        _stockade_sshd_err "sshd refused its configuration $dir/sshd_config; last lines of $log:"
        tail -n 5 "$log" >&2
        return 1
    fi
    "$sshd" -f "$dir/sshd_config" -E "$log" || {
        _stockade_sshd_err "sshd did not start; last lines of $log:"
        tail -n 5 "$log" >&2
        return 1
    }
    local i=0
    until _stockade_sshd_answers; do
        if [ "$i" -ge 20 ]; then
            _stockade_sshd_err "sshd on 127.0.0.1:$STOCKADE_TEST_SSHD_PORT did not let the test key in within 20 s; last lines of $log:"
            tail -n 10 "$log" >&2
            return 1
        fi
        sleep 1
        i=$((i + 1))
    done
}

stop_test_sshd() {
    local run="$STOCKADE_TEST_SSHD_RUN"
    if [ -s "$run/sshd.pid" ]; then
        kill "$(cat "$run/sshd.pid")" 2>/dev/null || true
        rm -f "$run/sshd.pid"
    fi
}
