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
# the daemon to answer. With STOCKADE_DOCKER_QUOTA_ROOT=1 (scripts/run), as
# root, an engine that never ran gets a data root that enforces disk quotas
# first (stockade_docker_quota_root). Idempotent; silent when Docker already
# works.
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
    # Asked for (scripts/run), as root, for an engine about to be installed
    # or started for the first time: a data root that enforces diskSizeGB.
    if [ "${STOCKADE_DOCKER_QUOTA_ROOT:-}" = 1 ] && [ "$(id -u)" -eq 0 ] && ! _stockade_dockerd_running; then
        stockade_docker_quota_root || return 1
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

# stockade_quota_mkfs FS IMG DIR SIZE: a new FS (xfs or btrfs) in the sparse
# file IMG of SIZE (truncate's units), mounted on DIR with `discard`, so
# deleted data gives its space back to the host; XFS with project quotas
# (pquota), which overlay2 and the local volume driver need for their
# `size` options. Installs xfsprogs or btrfs-progs with apt-get when
# missing. Needs root.
stockade_quota_mkfs() {
    local fs="$1" img="$2" dir="$3" size="$4"
    local tool="mkfs.$fs" pkg
    case "$fs" in xfs) pkg=xfsprogs ;; btrfs) pkg=btrfs-progs ;; *) return 1 ;; esac
    if ! command -v "$tool" >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null 2>&1 ||
            { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
              DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null 2>&1; } ||
            { printf 'could not install %s\n' "$pkg" >&2; return 1; }
    fi
    rm -f "$img"
    truncate -s "$size" "$img" || return 1
    "$tool" -q -f "$img" >/dev/null 2>&1 || { printf '%s failed\n' "$tool" >&2; return 1; }
    stockade_quota_mount "$fs" "$img" "$dir"
}

# stockade_quota_mount FS IMG DIR: mounts an image stockade_quota_mkfs made.
stockade_quota_mount() {
    local fs="$1" img="$2" dir="$3" opts
    opts="$(stockade_quota_mount_options "$fs")"
    mount -o "$opts" "$img" "$dir" 2>/dev/null
}

stockade_quota_mount_options() {
    if [ "$1" = xfs ]; then echo loop,discard,pquota; else echo loop,discard; fi
}

# btrfs qgroups (the limits of `size`) go wrong once the accounting is
# marked inconsistent, which the kernel does when it deletes a subvolume
# whose tree is at least drop_subtree_threshold levels deep (3 by default
# on recent kernels: containers and volumes are deleted all the time here).
# Tracing every deletion (the maximum, 8) keeps them exact; an inconsistent
# state left from before is rescanned.
stockade_btrfs_qgroups() {
    local root="$1" uuid sysfs
    btrfs quota enable "$root" 2>/dev/null || true
    uuid="$(btrfs filesystem show "$root" 2>/dev/null | sed -n 's/.*uuid: *\([0-9a-f-]*\).*/\1/p' | head -n 1)"
    sysfs="/sys/fs/btrfs/$uuid/qgroups"
    if [ -z "$uuid" ] || [ ! -d "$sysfs" ]; then
        printf '%s\n' "btrfs quotas could not be switched on for $root" >&2
        return 1
    fi
    if [ -w "$sysfs/drop_subtree_threshold" ]; then
        echo 8 >"$sysfs/drop_subtree_threshold"
    fi
    if [ "$(cat "$sysfs/inconsistent" 2>/dev/null)" = 1 ]; then
        btrfs quota rescan -w "$root" >/dev/null 2>&1 || true
    fi
}

# stockade_docker_quota_root [ROOT [IMG [SIZE]]]: gives a Docker Engine that
# has not run yet a data root that enforces diskSizeGB. When ROOT
# (/var/lib/docker) holds nothing yet and its file system has no project
# quotas, a file system in the sparse file IMG (/var/lib/stockade-docker.img)
# of SIZE (default: 80% of the free space) is mounted on it and listed in
# /etc/fstab (STOCKADE_FSTAB) for reboots: XFS with pquota (overlay2 caps
# containers, the local volume driver volumes), or btrfs where the kernel
# lacks XFS quotas (the engine picks its btrfs storage driver; qgroups cap
# both). A data root on XFS with quotas or on btrfs, or one that holds data
# already, is left as it is (the latter said on stderr: Stockade then caps
# /workspace with loop files and watches the root filesystems). Prints the
# file system made. Needs root.
stockade_docker_quota_root() {
    local root="${1:-/var/lib/docker}" img="${2:-/var/lib/stockade-docker.img}" size="${3:-}"
    local fstab="${STOCKADE_FSTAB:-/etc/fstab}" parent fstype options avail
    parent="$root"
    while [ ! -d "$parent" ]; do parent="$(dirname "$parent")"; done
    fstype="$(stat -f -c %T "$parent" 2>/dev/null)"
    options="$(findmnt -n -o OPTIONS -T "$parent" 2>/dev/null)"
    case "$fstype" in
    xfs) case ",$options," in *,prjquota,* | *,pquota,*) return 0 ;; esac ;;
    btrfs) return 0 ;;
    esac
    if [ -d "$root" ] && [ -n "$(ls -A "$root" 2>/dev/null)" ]; then
        printf '%s\n' "the Docker data root $root holds data already and is kept on $fstype, whose containers cannot be capped; Stockade caps /workspace with loop files and stops a sandbox whose root filesystem passes its diskSizeGB" >&2
        return 0
    fi
    if [ -z "$size" ]; then
        avail="$(df -B1 --output=avail "$parent" 2>/dev/null | tail -n 1 | tr -d ' ')"
        size=$((${avail:-0} / 10 * 8))
        if [ "$size" -lt $((4 << 30)) ]; then
            printf '%s\n' "too little free space on $parent for a Docker data root of its own; kept on $fstype" >&2
            return 0
        fi
    fi
    mkdir -p "$root" "$(dirname "$img")" || return 1
    local made
    if stockade_quota_mkfs xfs "$img" "$root" "$size"; then
        made=xfs
    elif stockade_quota_mkfs btrfs "$img" "$root" "$size" && stockade_btrfs_qgroups "$root"; then
        made=btrfs
    else
        printf '%s\n' "could not make a data root with quotas (XFS or btrfs) in $img (dmesg: $(dmesg 2>/dev/null | tail -n 1))" >&2
        mountpoint -q "$root" && umount "$root"
        rm -f "$img"
        return 1
    fi
    if ! grep -qs "^$img " "$fstab"; then
        printf '%s %s %s %s 0 0\n' "$img" "$root" "$made" "$(stockade_quota_mount_options "$made")" >>"$fstab"
    fi
    echo "$made"
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
