# shellcheck shell=bash
# Builds Stockade's code-interpreter image (the code-interpreter-v1 runtime
# preset) without any image registry, from Debian's mirror, PyPI and npm:
#
#  1. a Debian bookworm root made with debootstrap (variant minbase) and
#     imported with `docker import` as the base image
#     ($STOCKADE_CI_BASE_IMAGE, stockade-code-interpreter-base:bookworm);
#  2. images/code-interpreter/install.sh run as root in a container of the
#     base, which is then committed (one layer): Python 3 with ipykernel and
#     the data libraries, Node.js, Deno, their Jupyter kernelspecs, the user
#     `user` and IPython's configuration;
#  3. images/code-interpreter/check.sh run as `user` in the new image; only an
#     image that passes it gets the asked-for name.
#
# Source this file (and lib/docker.sh), then call:
#
#   build_code_interpreter_image IMAGE [--force]
#
# Each image is labelled with a hash of its recipe (this file's functions, the
# files of images/code-interpreter, the mirror) and rebuilt only when that
# changes, or with --force (which rebuilds the base too). Needs docker and
# root (debootstrap); installs debootstrap with apt-get when it is missing.
# STOCKADE_DEBIAN_MIRROR and STOCKADE_DEBIAN_SECURITY_MIRROR pick other
# mirrors; STOCKADE_BUILD_CA_BUNDLE the trust store pip and npm use during the
# build (default: this host's, so a TLS-inspecting proxy the host trusts
# works; it is not kept in the image).

_STOCKADE_CI_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/images/code-interpreter"
_STOCKADE_CI_SUITE=bookworm
_STOCKADE_CI_LABEL=io.stockade.recipe
STOCKADE_CI_BASE_IMAGE="${STOCKADE_CI_BASE_IMAGE:-stockade-code-interpreter-base:bookworm}"
STOCKADE_DEBIAN_MIRROR="${STOCKADE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
STOCKADE_DEBIAN_SECURITY_MIRROR="${STOCKADE_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"

_stockade_ci_err() {
    printf 'build-image (code-interpreter): %s\n' "$*" >&2
}

_stockade_ci_step() {
    printf 'build-image (code-interpreter): %s\n' "$*"
}

# The recipe label of an image, empty when there is no such image.
_stockade_ci_label() {
    docker image inspect --format "{{index .Config.Labels \"$_STOCKADE_CI_LABEL\"}}" "$1" 2>/dev/null || true
}

# debootstrap, installed with apt-get when missing.
_stockade_ci_debootstrap() {
    command -v debootstrap >/dev/null 2>&1 && return 0
    [ -x /usr/sbin/debootstrap ] && return 0
    command -v apt-get >/dev/null 2>&1 || {
        _stockade_ci_err "debootstrap is missing and apt-get is not available to install it"
        return 1
    }
    _stockade_ci_step "installing debootstrap with apt-get"
    local log
    log="$(mktemp)"
    if ! { _stockade_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        _stockade_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap; } >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        rm -f "$log"
        _stockade_ci_err "installing debootstrap with apt-get failed"
        return 1
    fi
    rm -f "$log"
}

# Whether the mirror answers, so that a network that refuses is said as
# such rather than as a failed debootstrap.
_stockade_ci_mirror_answers() {
    local url="$STOCKADE_DEBIAN_MIRROR/dists/$_STOCKADE_CI_SUITE/Release" out
    if command -v curl >/dev/null 2>&1; then
        out="$(curl -sS -o /dev/null --max-time 30 "$url" 2>&1)" || {
            _stockade_ci_err "cannot reach the Debian mirror: $url: $out"
            return 1
        }
    elif command -v wget >/dev/null 2>&1; then
        out="$(wget -q -O /dev/null --timeout=30 "$url" 2>&1)" || {
            _stockade_ci_err "cannot reach the Debian mirror: $url ${out:-(wget failed)}"
            return 1
        }
    fi
    return 0
}

_stockade_ci_base_recipe() {
    {
        declare -f _stockade_ci_base_rootfs
        printf '%s\n' "$_STOCKADE_CI_SUITE" "$STOCKADE_DEBIAN_MIRROR" "$(uname -m)"
    } | sha256sum | cut -c1-16
}

# Fills directory $1 with a minimal Debian root.
_stockade_ci_base_rootfs() {
    local root="$1" log="$2"
    debootstrap --variant=minbase --include=ca-certificates \
        "$_STOCKADE_CI_SUITE" "$root" "$STOCKADE_DEBIAN_MIRROR" >"$log" 2>&1 || return 1
    # Downloaded packages and package lists: the image's apt fetches its own.
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
        "$root"/var/cache/apt/*.bin "$root"/var/log/bootstrap.log
    # No manuals, documentation or translations, now or from packages
    # installed later (about 100 MB in the final image); licences stay.
    cat >"$root/etc/dpkg/dpkg.cfg.d/stockade-slim" <<'EOF'
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
EOF
    rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*/
    find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    echo stockade-code-interpreter >"$root/etc/hostname"
}

# The base image: a debootstrap root, imported. Kept (labelled) so that a
# change of the install recipe does not bootstrap again.
_stockade_ci_build_base() {
    local force="$1" recipe
    recipe="$(_stockade_ci_base_recipe)"
    if [ "$force" != --force ] && [ "$(_stockade_ci_label "$STOCKADE_CI_BASE_IMAGE")" = "$recipe" ]; then
        return 0
    fi
    [ "$(id -u)" -eq 0 ] || {
        _stockade_ci_err "debootstrap needs root: run scripts/build-image as root"
        return 1
    }
    _stockade_ci_debootstrap || return 1
    _stockade_ci_mirror_answers || return 1
    _stockade_ci_step "debootstrap $_STOCKADE_CI_SUITE from $STOCKADE_DEBIAN_MIRROR"
    local work status=0 old_id
    old_id="$(docker image inspect --format '{{.Id}}' "$STOCKADE_CI_BASE_IMAGE" 2>/dev/null || true)"
    work="$(mktemp -d /var/tmp/stockade-ci-base.XXXXXX)"
    _STOCKADE_CI_WORK="$work"
    if ! _stockade_ci_base_rootfs "$work/root" "$work/debootstrap.log"; then
        tail -n 20 "$work/debootstrap.log" >&2
        [ -f "$work/root/debootstrap/debootstrap.log" ] && tail -n 20 "$work/root/debootstrap/debootstrap.log" >&2
        _stockade_ci_err "debootstrap $_STOCKADE_CI_SUITE from $STOCKADE_DEBIAN_MIRROR failed (lines above)"
        status=1
    elif ! tar --numeric-owner -C "$work/root" -c . |
        docker import \
            --change 'CMD ["/bin/bash"]' \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change "LABEL $_STOCKADE_CI_LABEL=$recipe" \
            - "$STOCKADE_CI_BASE_IMAGE" >/dev/null; then
        _stockade_ci_err "docker import of the debootstrap root failed"
        status=1
    fi
    _stockade_ci_remove_work
    [ "$status" -eq 0 ] || return 1
    _stockade_ci_drop_replaced "$old_id" "$STOCKADE_CI_BASE_IMAGE"
}

# Removes image $1 when $2 is now another one, unless a container uses it.
_stockade_ci_drop_replaced() {
    local old_id="$1" new_id
    new_id="$(docker image inspect --format '{{.Id}}' "$2" 2>/dev/null || true)"
    if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
        docker image rm "$old_id" >/dev/null 2>&1 || true
    fi
}

# The image's recipe: the base's, this file's building functions and every
# file of images/code-interpreter (names and contents).
_stockade_ci_recipe() {
    {
        _stockade_ci_base_recipe
        declare -f _stockade_ci_build_image _stockade_ci_check
        printf '%s\n' "$STOCKADE_DEBIAN_SECURITY_MIRROR"
        (cd "$_STOCKADE_CI_DIR" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    } | sha256sum | cut -c1-16
}

# Runs check.sh as `user` in image $1.
_stockade_ci_check() {
    docker run --rm --network none --user user --workdir /home/user \
        --label io.stockade.build=code-interpreter \
        -v "$_STOCKADE_CI_DIR:/stockade-recipe:ro" \
        "$1" bash /stockade-recipe/check.sh
}

# The trust store pip and npm use in the build container.
_stockade_ci_ca_bundle() {
    local b
    for b in "${STOCKADE_BUILD_CA_BUNDLE:-}" /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
        if [ -n "$b" ] && [ -s "$b" ]; then
            printf '%s\n' "$b"
            return 0
        fi
    done
}

# Builds image $1 with recipe hash $2 from the base: install.sh in a
# container, committed as $1 once check.sh passes in it.
_stockade_ci_build_image() {
    local image="$1" recipe="$2" container candidate log status=0 ca
    candidate="$image-candidate-$recipe"
    # No label on the container: docker commit would give it to the image,
    # and so to every sandbox made from it.
    container="$(docker create \
        "$STOCKADE_CI_BASE_IMAGE" bash /tmp/stockade-build/install.sh \
        "$STOCKADE_DEBIAN_MIRROR" "$STOCKADE_DEBIAN_SECURITY_MIRROR")" || {
        _stockade_ci_err "docker create from $STOCKADE_CI_BASE_IMAGE failed"
        return 1
    }
    _STOCKADE_CI_CONTAINER="$container"
    docker cp "$_STOCKADE_CI_DIR/." "$container:/tmp/stockade-build" || status=1
    ca="$(_stockade_ci_ca_bundle)"
    if [ "$status" -eq 0 ] && [ -n "$ca" ]; then
        docker cp -L "$ca" "$container:/tmp/stockade-build/ca-certificates.crt" || status=1
    fi
    if [ "$status" -ne 0 ]; then
        _stockade_ci_err "copying images/code-interpreter into the build container failed"
    else
        _stockade_ci_step "installing packages in a container (apt-get, pip, npm: a few minutes)"
        log="$(mktemp)"
        if ! docker start --attach "$container" >"$log" 2>&1; then
            grep -- '^-- ' "$log" | tail -n 1 | sed 's/^-- /last step: /' >&2
            tail -n 30 "$log" | grep -v -- '^-- ' >&2
            _stockade_ci_err "images/code-interpreter/install.sh failed in the build container (lines above)"
            status=1
        fi
        rm -f "$log"
    fi
    if [ "$status" -eq 0 ]; then
        docker commit \
            --change 'CMD ["/bin/bash"]' \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'ENV LANG=C.UTF-8' \
            --change 'ENV DENO_NO_UPDATE_CHECK=1' \
            --change 'WORKDIR /home/user' \
            --change 'USER root' \
            --change 'LABEL io.stockade.image=code-interpreter' \
            --change "LABEL $_STOCKADE_CI_LABEL=$recipe" \
            "$container" "$candidate" >/dev/null || {
            _stockade_ci_err "docker commit of the build container failed"
            status=1
        }
    fi
    docker rm -f "$container" >/dev/null 2>&1 || true
    _STOCKADE_CI_CONTAINER=
    [ "$status" -eq 0 ] || return 1

    _stockade_ci_step "checking the image (kernels, formatters, user)"
    if ! _stockade_ci_check "$candidate"; then
        docker image rm "$candidate" >/dev/null 2>&1 || true
        _stockade_ci_err "the new image failed its checks (images/code-interpreter/check.sh); $image is left as it was"
        return 1
    fi
    docker tag "$candidate" "$image" && docker image rm "$candidate" >/dev/null
}

# Removes the debootstrap directory, unmounting first what an interrupted
# debootstrap left mounted in it (/proc, /sys).
_stockade_ci_remove_work() {
    local work="${_STOCKADE_CI_WORK:-}" mnt
    [ -n "$work" ] && [ -d "$work" ] || return 0
    awk -v w="$work/" 'index($2, w) == 1 { print $2 }' /proc/mounts 2>/dev/null | sort -r |
        while read -r mnt; do umount -l "$mnt" 2>/dev/null || true; done
    rm -rf "$work"
    _STOCKADE_CI_WORK=
}

# Removes what an interrupted build left: its debootstrap directory and
# its container.
stockade_ci_cleanup() {
    _stockade_ci_remove_work
    if [ -n "${_STOCKADE_CI_CONTAINER:-}" ]; then
        docker rm -f "$_STOCKADE_CI_CONTAINER" >/dev/null 2>&1 || true
        _STOCKADE_CI_CONTAINER=
    fi
}

build_code_interpreter_image() {
    local image="$1" force="${2:-}"
    [ -f "$_STOCKADE_CI_DIR/install.sh" ] || {
        _stockade_ci_err "$_STOCKADE_CI_DIR/install.sh is missing"
        return 1
    }
    _stockade_ci_build_base "$force" || return 1
    local recipe old_id
    recipe="$(_stockade_ci_recipe)"
    if [ "$force" != --force ] && [ "$(_stockade_ci_label "$image")" = "$recipe" ]; then
        return 0
    fi
    old_id="$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
    _stockade_ci_build_image "$image" "$recipe" || return 1
    _stockade_ci_drop_replaced "$old_id" "$image"
    _stockade_ci_step "$image is ready ($(docker image inspect --format '{{.Size}}' "$image" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
}
