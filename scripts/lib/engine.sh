# shellcheck shell=bash
# Extra Docker Engines for the tests, running beside the main one on the same
# host, each with a name and settings of its own. Source this file, then:
#
#   ensure_test_engine NAME [SETTING=VALUE ...]   # start it unless it answers
#   test_engine_host NAME                         # unix:///run/stockade-test/NAME/docker.sock
#   test_engine_fs NAME                           # xfs, btrfs or dir
#   test_engine_tls_dir NAME                      # its client files {ca,cert,key}.pem
#   test_engine_load NAME IMAGE...                # copy images from the main engine
#   stop_test_engine NAME [--purge]               # stop it (--purge: and delete its disk)
#
# NAME is 1 to 10 of [a-z0-9]. Each engine has its own socket, pidfile,
# exec root and configuration under /run/stockade-test/NAME/, its own data
# root /var/lib/stockade-test/NAME/root and its own bridge `stkt-NAME`
# (the default bridge of the main engine, docker0, is never shared).
#
# Settings:
#   fs=auto     the data root's filesystem, made in a sparse loop file
#               (/var/lib/stockade-test/NAME/disk.img) and mounted with
#               `discard`, so deleted data gives its space back to the host:
#                 xfs    XFS mounted with pquota: overlay2 enforces a
#                        container's `size` storage option and the `local`
#                        volume driver its `size` option;
#                 btrfs  btrfs with the btrfs storage driver: a container's
#                        `size` becomes a qgroup limit; volumes get none from
#                        Docker (Stockade limits them itself, see
#                        docs in stockade-runtime's docker/disk.rs);
#                 auto   xfs when the kernel supports XFS quotas, else btrfs;
#                 dir    no file system of its own (no quotas at all).
#   size=4G     the loop file's size (sparse: it uses what is written).
#   bip=10.213.0.1/24   the address and range of its default bridge.
#   pool=10.214.0.0/16  where its other networks get their /24s.
#   iptables=true       let the engine manage iptables (MASQUERADE, ICC).
#   tcp=PORT            listen on tcp://127.0.0.1:PORT too.
#   tls=true            with tcp=: require TLS client certificates there
#                       (dockerd --tlsverify). A CA, a server certificate for
#                       127.0.0.1/localhost and a client certificate are made
#                       with openssl once, in /var/lib/stockade-test/NAME/tls;
#                       the client's files are ca.pem, cert.pem and key.pem
#                       there (test_engine_tls_dir), as `docker --tlsverify`
#                       and Stockade's TLS hosts take them.
#
# iptables: every dockerd flushes Docker's shared chains (DOCKER,
# DOCKER-ISOLATION-STAGE-1/2, nat DOCKER) when it starts, which would drop
# the main engine's rules for its networks (isolation between networks,
# published ports). With iptables=true the rules of those chains are read
# before the start and whatever went missing is put back once the new
# engine answers. (The main engine does the same to this one's rules when it
# restarts: restart this one after it.)
#
# runsc: registered exactly as on the main engine (the "runtimes" of
# STOCKADE_DOCKER_DAEMON_JSON, /etc/docker/daemon.json, copied into this
# engine's own configuration file), when the main engine has it.
#
# docker0: a dockerd given address pools deletes the interface named
# docker0 when it starts with a default bridge network left in its store
# (any restart of an engine here), whatever its own --bridge is: the main
# engine's containers then fail to start ("could not find bridge docker0").
# While an engine starts, docker0 is therefore renamed out of its way
# (stkt-docker0) and given its name back once the engine answers; a rename
# left over by an interrupted start is undone first.
#
# Idempotent; silent on success; needs root, losetup/mount, and mkfs.xfs or
# mkfs.btrfs (installed with apt-get when missing).

# The loop file systems (stockade_quota_mkfs) come from the main library.
if ! command -v stockade_quota_mkfs >/dev/null 2>&1; then
    # shellcheck source=scripts/lib/docker.sh
    source "$(dirname "${BASH_SOURCE[0]}")/docker.sh"
fi

STOCKADE_TEST_ENGINE_STATE="${STOCKADE_TEST_ENGINE_STATE:-/var/lib/stockade-test}"
STOCKADE_TEST_ENGINE_RUN="${STOCKADE_TEST_ENGINE_RUN:-/run/stockade-test}"

_stockade_engine_err() {
    printf 'ensure_test_engine: %s\n' "$*" >&2
}

test_engine_host() {
    printf 'unix://%s/%s/docker.sock\n' "$STOCKADE_TEST_ENGINE_RUN" "$1"
}

test_engine_fs() {
    cat "$STOCKADE_TEST_ENGINE_STATE/$1/fs" 2>/dev/null || echo none
}

test_engine_tls_dir() {
    printf '%s/%s/tls\n' "$STOCKADE_TEST_ENGINE_STATE" "$1"
}

_stockade_engine_answers() {
    timeout 10 docker -H "$(test_engine_host "$1")" info >/dev/null 2>&1
}

# Whether engine $1 answers on tcp://127.0.0.1:$2 (with its client
# certificate when $3 is true).
_stockade_engine_answers_tcp() {
    local name="$1" port="$2" tls="$3" dir
    if [ "$tls" = true ]; then
        dir="$(test_engine_tls_dir "$name")"
        timeout 10 docker -H "tcp://127.0.0.1:$port" --tlsverify \
            --tlscacert "$dir/ca.pem" --tlscert "$dir/cert.pem" --tlskey "$dir/key.pem" \
            info >/dev/null 2>&1
    else
        timeout 10 docker -H "tcp://127.0.0.1:$port" info >/dev/null 2>&1
    fi
}

# A CA, a server certificate for 127.0.0.1/localhost and a client
# certificate in $1, unless all are there already.
_stockade_engine_tls_files() {
    local dir="$1" name="$2" f
    for f in ca.pem cert.pem key.pem server-cert.pem server-key.pem; do
        [ -s "$dir/$f" ] || break
    done
    [ -s "$dir/$f" ] && return 0
    if ! command -v openssl >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssl >/dev/null 2>&1 ||
            { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
              DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssl >/dev/null 2>&1; } ||
            { _stockade_engine_err "could not install openssl"; return 1; }
    fi
    rm -rf "$dir" && mkdir -p "$dir" && chmod 700 "$dir" || return 1
    local key=(genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256)
    if ! (
        set -e
        cd "$dir"
        openssl "${key[@]}" -out ca-key.pem 2>/dev/null
        openssl req -x509 -new -key ca-key.pem -sha256 -days 3650 \
            -subj "/CN=stockade-test-ca-$name" \
            -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign" -out ca.pem 2>/dev/null
        openssl "${key[@]}" -out server-key.pem 2>/dev/null
        openssl req -new -key server-key.pem -subj "/CN=localhost" -out server.csr 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' >server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
            -days 3650 -sha256 -extfile server.ext -out server-cert.pem 2>/dev/null
        openssl "${key[@]}" -out key.pem 2>/dev/null
        openssl req -new -key key.pem -subj "/CN=stockade-test-client" -out client.csr 2>/dev/null
        printf 'extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n' >client.ext
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
            -days 3650 -sha256 -extfile client.ext -out cert.pem 2>/dev/null
        rm -f server.csr client.csr server.ext client.ext ca.srl
        chmod 600 ./*-key.pem key.pem
    ); then
        _stockade_engine_err "openssl could not make the TLS files in $dir"
        rm -rf "$dir"
        return 1
    fi
}

# The rules of Docker's shared chains, one `-t TABLE -A CHAIN ...` per line.
_stockade_docker_chain_rules() {
    local chain
    for chain in DOCKER DOCKER-ISOLATION-STAGE-1 DOCKER-ISOLATION-STAGE-2; do
        iptables -w -S "$chain" 2>/dev/null | sed -n "s/^-A /-t filter -A /p"
    done
    iptables -w -t nat -S DOCKER 2>/dev/null | sed -n "s/^-A /-t nat -A /p"
}

# Puts back the rules of $1 (a file of _stockade_docker_chain_rules lines)
# that are gone, at the top of their chains (none of them depends on its
# place but the catch-all RETURNs, which the engine made again).
_stockade_restore_docker_chain_rules() {
    local saved="$1" now line table chain
    now="$(_stockade_docker_chain_rules)"
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        if printf '%s\n' "$now" | grep -qxF -- "$line"; then
            continue
        fi
        # shellcheck disable=SC2086 # iptables -S quotes what needs quoting
        eval "set -- $line"
        table="$2" chain="$4"
        shift 4
        [ "$#" -gt 0 ] || continue
        if [ "$*" = "-j RETURN" ]; then
            continue
        fi
        iptables -w -t "$table" -N "$chain" 2>/dev/null || true
        iptables -w -t "$table" -I "$chain" 1 "$@" ||
            _stockade_engine_err "could not put back the rule: $line"
    done <"$saved"
}

_stockade_docker0_hidden=stkt-docker0

# Puts docker0 back under its name (after an engine started, or after an
# interrupted start left it renamed).
_stockade_docker0_restore() {
    ip link show "$_stockade_docker0_hidden" >/dev/null 2>&1 || return 0
    if ip link show docker0 >/dev/null 2>&1; then
        _stockade_engine_err "both docker0 and $_stockade_docker0_hidden exist; leaving them as they are"
        return 1
    fi
    if ! { ip link set "$_stockade_docker0_hidden" down &&
        ip link set "$_stockade_docker0_hidden" name docker0 &&
        ip link set docker0 up; }; then
        _stockade_engine_err "could not give docker0 its name back (ip link set $_stockade_docker0_hidden name docker0)"
        return 1
    fi
}

# Makes docker0 again when an engine started without the rename below
# deleted it while the main engine runs: a bridge with the gateway address
# of the main engine's default network.
_stockade_docker0_repair() {
    ip link show docker0 >/dev/null 2>&1 && return 0
    ip link show "$_stockade_docker0_hidden" >/dev/null 2>&1 && return 0
    local gateway prefix
    gateway="$(docker network inspect bridge -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}' 2>/dev/null)" || return 0
    prefix="$(docker network inspect bridge -f '{{range .IPAM.Config}}{{.Subnet}}{{end}}' 2>/dev/null)"
    prefix="${prefix#*/}"
    [ -n "$gateway" ] && [ -n "$prefix" ] || return 0
    if ! { ip link add docker0 type bridge &&
        ip addr add "$gateway/$prefix" dev docker0 &&
        ip link set docker0 up; }; then
        _stockade_engine_err "docker0 is gone and could not be made again"
        return 1
    fi
}

# Renames docker0 out of the way of an engine that is starting (an
# interface must be down to be renamed; it is down for that moment only).
_stockade_docker0_hide() {
    _stockade_docker0_restore || return 1
    ip link show docker0 >/dev/null 2>&1 || return 0
    if ! { ip link set docker0 down &&
        ip link set docker0 name "$_stockade_docker0_hidden" &&
        ip link set "$_stockade_docker0_hidden" up; }; then
        _stockade_engine_err "could not rename docker0 while an engine starts"
        return 1
    fi
}

ensure_test_engine() {
    local name="$1"
    shift || true
    if ! printf '%s' "$name" | grep -qxE '[a-z0-9]{1,10}'; then
        _stockade_engine_err "NAME must be 1 to 10 of [a-z0-9], not '$name'"
        return 1
    fi
    local fs=auto size=4G bip=10.213.0.1/24 pool=10.214.0.0/16 iptables=true tcp='' tls=false kv
    for kv in "$@"; do
        case "$kv" in
            fs=*) fs="${kv#fs=}" ;;
            size=*) size="${kv#size=}" ;;
            bip=*) bip="${kv#bip=}" ;;
            pool=*) pool="${kv#pool=}" ;;
            iptables=*) iptables="${kv#iptables=}" ;;
            tcp=*) tcp="${kv#tcp=}" ;;
            tls=*) tls="${kv#tls=}" ;;
            *) _stockade_engine_err "unknown setting '$kv' (fs, size, bip, pool, iptables, tcp, tls)"; return 1 ;;
        esac
    done
    if [ -n "$tcp" ] && ! printf '%s' "$tcp" | grep -qxE '[1-9][0-9]{0,4}'; then
        _stockade_engine_err "tcp must be a port number, not '$tcp'"
        return 1
    fi
    case "$tls" in
        true) [ -n "$tcp" ] || { _stockade_engine_err "tls=true needs tcp=PORT"; return 1; } ;;
        false) ;;
        *) _stockade_engine_err "tls must be true or false, not '$tls'"; return 1 ;;
    esac
    local listen=(-H "$(test_engine_host "$name")")
    if [ -n "$tcp" ]; then
        listen+=(-H "tcp://127.0.0.1:$tcp")
    fi
    if [ "$tls" = true ]; then
        local tlsdir
        tlsdir="$(test_engine_tls_dir "$name")"
        _stockade_engine_tls_files "$tlsdir" "$name" || return 1
        listen+=(--tlsverify --tlscacert "$tlsdir/ca.pem"
            --tlscert "$tlsdir/server-cert.pem" --tlskey "$tlsdir/server-key.pem")
    fi
    _stockade_docker0_restore && _stockade_docker0_repair || return 1
    # Running, but not listening as asked (started with other settings):
    # stopped here and started again below.
    if [ -n "$tcp" ] && _stockade_engine_answers "$name" &&
        ! _stockade_engine_answers_tcp "$name" "$tcp" "$tls"; then
        stop_test_engine "$name"
    fi
    if _stockade_engine_answers "$name"; then
        if [ "$(test_engine_fs "$name")" = btrfs ]; then
            stockade_btrfs_qgroups "$STOCKADE_TEST_ENGINE_STATE/$name/root" || return 1
        fi
        return 0
    fi

    local state="$STOCKADE_TEST_ENGINE_STATE/$name" run="$STOCKADE_TEST_ENGINE_RUN/$name"
    local img="$state/disk.img" root="$state/root" bridge="stkt-$name"
    mkdir -p "$state" "$root" "$run" || return 1

    # A daemon of ours that is still starting (or stuck): give it a moment,
    # then end it (only the process of our own pidfile).
    if [ -s "$run/docker.pid" ] && kill -0 "$(cat "$run/docker.pid")" 2>/dev/null; then
        local i=0
        while [ "$i" -lt 20 ]; do
            _stockade_engine_answers "$name" && return 0
            sleep 1
            i=$((i + 1))
        done
        kill "$(cat "$run/docker.pid")" 2>/dev/null || true
        sleep 3
    fi

    # The data root's file system.
    if ! mountpoint -q "$root"; then
        local made
        made="$(cat "$state/fs" 2>/dev/null || true)"
        if [ -n "$made" ] && [ "$made" != dir ] && [ -f "$img" ] &&
            { [ "$fs" = auto ] || [ "$fs" = "$made" ]; } &&
            stockade_quota_mount "$made" "$img" "$root"; then
            :
        elif [ "$made" = dir ] && [ "$fs" = dir ]; then
            : # a data root of its own on the host's disk: kept as it is
        else
            rm -rf "${root:?}"/* 2>/dev/null || true
            case "$fs" in
                xfs | btrfs)
                    stockade_quota_mkfs "$fs" "$img" "$root" "$size" ||
                        { _stockade_engine_err "could not make and mount $fs in $img (dmesg: $(dmesg 2>/dev/null | tail -n 1))"; return 1; }
                    made="$fs"
                    ;;
                auto)
                    if stockade_quota_mkfs xfs "$img" "$root" "$size"; then
                        made=xfs
                    elif stockade_quota_mkfs btrfs "$img" "$root" "$size"; then
                        made=btrfs
                    else
                        _stockade_engine_err "neither XFS with pquota nor btrfs could be mounted (dmesg: $(dmesg 2>/dev/null | tail -n 1))"
                        return 1
                    fi
                    ;;
                dir) rm -f "$img"; made=dir ;;
                *) _stockade_engine_err "fs must be auto, xfs, btrfs or dir, not '$fs'"; return 1 ;;
            esac
            echo "$made" >"$state/fs"
        fi
    fi
    local driver=()
    if [ "$(test_engine_fs "$name")" = btrfs ]; then
        driver=(--storage-driver btrfs)
        stockade_btrfs_qgroups "$root" || return 1
    fi

    # Its own bridge (dockerd -b takes an existing one; --bip would change docker0).
    if ! ip link show "$bridge" >/dev/null 2>&1; then
        ip link add name "$bridge" type bridge || return 1
    fi
    if ! ip -4 addr show dev "$bridge" | grep -qF "inet $bip "; then
        ip addr flush dev "$bridge"
        ip addr add "$bip" dev "$bridge" || return 1
    fi
    ip link set "$bridge" up

    # Its configuration: the main engine's OCI runtimes (runsc), nothing else.
    python3 - "${STOCKADE_DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}" "$run/daemon.json" <<'PY' || return 1
import json, os, sys
main, mine = sys.argv[1], sys.argv[2]
runtimes = {}
if os.path.exists(main):
    with open(main) as f:
        text = f.read().strip()
    if text:
        runtimes = json.loads(text).get("runtimes", {})
with open(mine, "w") as f:
    json.dump({"runtimes": runtimes} if runtimes else {}, f, indent=2)
    f.write("\n")
PY

    local saved
    saved="$(mktemp)"
    [ "$iptables" = true ] && _stockade_docker_chain_rules >"$saved"
    local log="/var/log/stockade-test-engine-$name.log"
    _stockade_docker0_hide || return 1
    setsid nohup dockerd \
        --config-file "$run/daemon.json" \
        "${listen[@]}" \
        --data-root "$root" \
        --exec-root "$run/exec" \
        --pidfile "$run/docker.pid" \
        --bridge "$bridge" \
        --default-address-pool "base=$pool,size=24" \
        --iptables="$iptables" \
        "${driver[@]}" \
        >>"$log" 2>&1 </dev/null &

    local i=0
    until _stockade_engine_answers "$name"; do
        if [ "$i" -ge 60 ]; then
            _stockade_docker0_restore
            _stockade_engine_err "the engine '$name' did not answer within 60 s; last lines of $log:"
            tail -n 15 "$log" >&2
            rm -f "$saved"
            return 1
        fi
        sleep 1
        i=$((i + 1))
    done
    _stockade_docker0_restore || return 1
    [ "$iptables" = true ] && _stockade_restore_docker_chain_rules "$saved"
    rm -f "$saved"
    if [ -n "$tcp" ] && ! _stockade_engine_answers_tcp "$name" "$tcp" "$tls"; then
        _stockade_engine_err "the engine '$name' answers on its socket but not on tcp://127.0.0.1:$tcp (tls=$tls); last lines of $log:"
        tail -n 15 "$log" >&2
        return 1
    fi
    return 0
}

# Copies images from the main engine into engine NAME when it lacks them or
# has other contents under the same name.
test_engine_load() {
    local name="$1" image mine theirs
    shift
    for image in "$@"; do
        theirs="$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null)" || {
            _stockade_engine_err "image $image is not on the main engine"
            return 1
        }
        mine="$(docker -H "$(test_engine_host "$name")" image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)"
        if [ "$mine" != "$theirs" ]; then
            docker save "$image" | docker -H "$(test_engine_host "$name")" load -q >/dev/null || return 1
        fi
    done
}

stop_test_engine() {
    local name="$1" purge="${2:-}"
    local state="$STOCKADE_TEST_ENGINE_STATE/$name" run="$STOCKADE_TEST_ENGINE_RUN/$name"
    if [ -s "$run/docker.pid" ]; then
        local pid i=0
        pid="$(cat "$run/docker.pid")"
        kill "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 30 ]; do
            sleep 1
            i=$((i + 1))
        done
    fi
    if [ "$purge" = --purge ]; then
        umount "$state/root" 2>/dev/null || true
        ip link del "stkt-$name" 2>/dev/null || true
        rm -rf "$state" "$run"
    fi
}
