# shellcheck shell=bash
# Docker helpers for Stockade's scripts. Source this file, then call
# `ensure_docker`:
#
#   . "$(dirname "$0")/lib/docker.sh"
#   ensure_docker
#
# ensure_docker makes `docker info` work: it installs docker.io (Debian/Ubuntu,
# apt-get) when dockerd is missing, starts dockerd in the background when it is
# not running (Debian's dockerd starts and supervises its own containerd when
# none is configured), and waits up to STOCKADE_DOCKER_WAIT seconds (60) for
# the daemon to answer. Idempotent; silent when Docker already works.
#
# stockade_docker_state prints what stands between this user and a working
# Docker, without changing anything: `ok`, `missing` (no docker command),
# `denied` (the daemon answers, but not to this user) or `stopped` (no
# answer). stockade_docker_socket prints where the client connects.

STOCKADE_DOCKERD_LOG="${STOCKADE_DOCKERD_LOG:-/var/log/stockade-dockerd.log}"

_stockade_docker_err() {
    printf 'ensure_docker: %s\n' "$*" >&2
}

# Runs a command as root: directly when we are root, else through sudo.
_stockade_as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        _stockade_docker_err "need root (or passwordless sudo) to run: $*"
        return 1
    fi
}

_stockade_docker_ok() {
    docker info >/dev/null 2>&1
}

# dockerd lives in /usr/sbin (or /usr/bin), not always on a user's PATH.
_stockade_have_dockerd() {
    command -v dockerd >/dev/null 2>&1 || [ -x /usr/sbin/dockerd ] || [ -x /usr/bin/dockerd ]
}

_stockade_dockerd_running() {
    if command -v pgrep >/dev/null 2>&1; then
        pgrep -x dockerd >/dev/null 2>&1
    else
        grep -qx dockerd /proc/[0-9]*/comm 2>/dev/null
    fi
}

stockade_docker_socket() {
    if [ -n "${DOCKER_HOST:-}" ]; then
        printf '%s\n' "$DOCKER_HOST"
    else
        printf '%s\n' unix:///var/run/docker.sock
    fi
}

stockade_docker_state() {
    if ! command -v docker >/dev/null 2>&1; then
        echo missing
        return 0
    fi
    local out
    if out="$(docker info 2>&1 >/dev/null)"; then
        echo ok
    elif printf '%s' "$out" | grep -qi 'permission denied'; then
        echo denied
    else
        echo stopped
    fi
}

ensure_docker() {
    if command -v docker >/dev/null 2>&1 && _stockade_docker_ok; then
        return 0
    fi

    if ! _stockade_have_dockerd || ! command -v docker >/dev/null 2>&1; then
        if ! command -v apt-get >/dev/null 2>&1; then
            _stockade_docker_err "dockerd is not installed and apt-get is not available; install Docker Engine (https://docs.docker.com/engine/install/)"
            return 1
        fi
        local apt_log
        apt_log="$(mktemp)"
        if ! _stockade_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$apt_log" 2>&1 ||
            ! _stockade_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >>"$apt_log" 2>&1; then
            _stockade_docker_err "installing docker.io with apt-get failed:"
            tail -n 20 "$apt_log" >&2
            rm -f "$apt_log"
            return 1
        fi
        rm -f "$apt_log"
    fi

    # A daemon may be running but not answering us (permissions, DOCKER_HOST).
    if _stockade_dockerd_running; then
        :
    elif command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        _stockade_as_root systemctl start docker >/dev/null 2>&1 ||
            _stockade_as_root sh -c "PATH=\$PATH:/usr/sbin:/sbin nohup dockerd >>'$STOCKADE_DOCKERD_LOG' 2>&1 </dev/null &"
    else
        # No systemd (containers, CI): run dockerd in the background. It starts
        # its own containerd when none is configured.
        _stockade_as_root sh -c "PATH=\$PATH:/usr/sbin:/sbin nohup dockerd >>'$STOCKADE_DOCKERD_LOG' 2>&1 </dev/null &"
    fi

    local wait_s="${STOCKADE_DOCKER_WAIT:-60}" i=0
    while [ "$i" -lt "$wait_s" ]; do
        if _stockade_docker_ok; then
            return 0
        fi
        sleep 1
        i=$((i + 1))
    done

    _stockade_docker_err "Docker did not answer within ${wait_s}s."
    if _stockade_dockerd_running; then
        _stockade_docker_err "dockerd is running: check DOCKER_HOST (${DOCKER_HOST:-unset}) and the permissions of /var/run/docker.sock (is your user in the 'docker' group?)"
    else
        _stockade_docker_err "dockerd is not running; last lines of $STOCKADE_DOCKERD_LOG:"
        tail -n 20 "$STOCKADE_DOCKERD_LOG" >&2 2>/dev/null || true
    fi
    docker info 2>&1 | grep -iE 'error|cannot|denied' | head -n 3 >&2 || true
    return 1
}

# Removes the file systems of their own (<data root>/stockade-disks/<volume>,
# an ext4 image mounted at fs/) whose volume is gone: the server deletes the
# ones of the volumes it removes, not of those removed with `docker volume
# rm` (as test clean-ups do). Prints how many went.
stockade_collect_volume_disks() {
    local root dir name n=0
    root="$(docker info -f '{{.DockerRootDir}}' 2>/dev/null)" || return 0
    [ -d "$root/stockade-disks" ] || { echo "0 removed"; return 0; }
    for dir in "$root"/stockade-disks/*/; do
        [ -d "$dir" ] || continue
        name="$(basename "$dir")"
        docker volume inspect "$name" >/dev/null 2>&1 && continue
        if mountpoint -q "$dir/fs" 2>/dev/null; then
            _stockade_as_root umount "$dir/fs" 2>/dev/null || _stockade_as_root umount -l "$dir/fs" || continue
        fi
        _stockade_as_root rm -rf "$dir" && n=$((n + 1))
    done
    echo "$n removed"
}
