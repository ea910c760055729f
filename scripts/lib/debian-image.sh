# shellcheck shell=bash
# Builds Stockade's glibc test image without a registry or a mirror: bash,
# dash (as /bin/sh), coreutils, grep, sed and findutils copied from this
# Debian host with the shared libraries they load (found with ldd), laid out
# as a merged-/usr Debian root and imported with `docker import`. Source this
# file, then call:
#
#   build_debian_test_image IMAGE [--force]
#
# The image is labelled with a hash of its recipe (this file's function and
# the host's package versions) and rebuilt only when that changes (or with
# --force). Needs docker; root keeps the files' owners.

# The packages whose programs the image holds (all Essential on Debian).
_STOCKADE_DEBIAN_PACKAGES=(bash dash coreutils grep sed findutils)
_STOCKADE_RECIPE_LABEL=io.stockade.recipe

_stockade_debian_err() {
    printf 'build-test-image (debian): %s\n' "$*" >&2
}

# Copies each file of the list $2 (one a line) into the image root $1, at
# its place under /usr.
_stockade_debian_copy() {
    local root="$1" file dest
    while read -r file; do
        dest="$root$(_stockade_in_usr "$file")"
        mkdir -p "$(dirname "$dest")"
        cp -L "$file" "$dest"
    done <<<"$2"
}

# The path a host file has in the merged-/usr image root.
_stockade_in_usr() {
    case "$1" in
    /usr/*) printf '%s\n' "$1" ;;
    /bin/* | /sbin/* | /lib/* | /lib64/* | /lib32/* | /libx32/*) printf '/usr%s\n' "$1" ;;
    *) printf '%s\n' "$1" ;;
    esac
}

# Executables of the packages, one host path a line.
_stockade_debian_programs() {
    local pkg path
    for pkg in "${_STOCKADE_DEBIAN_PACKAGES[@]}"; do
        if command -v dpkg >/dev/null 2>&1 && dpkg -L "$pkg" >/dev/null 2>&1; then
            dpkg -L "$pkg" | while read -r path; do
                case "$path" in
                */bin/* | */sbin/*) [ -f "$path" ] && [ -x "$path" ] && printf '%s\n' "$path" ;;
                esac
            done
        else
            # No dpkg: the package's main program by name.
            path="$(command -v "$pkg" 2>/dev/null || true)"
            [ -n "$path" ] && printf '%s\n' "$path"
        fi
    done | sort -u
}

# Fills directory $1 with the image's root filesystem.
_stockade_debian_rootfs() {
    local root="$1" prog lib dest
    mkdir -p "$root"/usr/{bin,sbin,lib,lib64} "$root"/{etc,tmp,var/tmp,workspace,root,home/sandbox,proc,sys,dev}
    ln -s usr/bin "$root/bin"
    ln -s usr/sbin "$root/sbin"
    ln -s usr/lib "$root/lib"
    ln -s usr/lib64 "$root/lib64"
    chmod 1777 "$root/tmp" "$root/var/tmp"
    chmod 700 "$root/root"

    local programs libs
    programs="$(_stockade_debian_programs)"
    [ -n "$programs" ] || {
        _stockade_debian_err "none of ${_STOCKADE_DEBIAN_PACKAGES[*]} found on this host"
        return 1
    }
    _stockade_debian_copy "$root" "$programs"
    [ -x "$root/usr/bin/bash" ] || {
        _stockade_debian_err "bash is missing from the image"
        return 1
    }
    # Debian's /bin/sh.
    if [ -x "$root/usr/bin/dash" ]; then
        ln -sf dash "$root/usr/bin/sh"
    else
        ln -sf bash "$root/usr/bin/sh"
    fi

    # Every shared library (and the loader) any program loads.
    # shellcheck disable=SC2086
    libs="$(while read -r prog; do ldd "$prog" 2>/dev/null || true; done <<<"$programs" |
        awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)"
    [ -n "$libs" ] || {
        _stockade_debian_err "ldd found no libraries (is this a glibc host?)"
        return 1
    }
    _stockade_debian_copy "$root" "$libs"

    cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/bash
sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
    cat >"$root/etc/group" <<'EOF'
root:x:0:
sandbox:x:1000:
nogroup:x:65534:
EOF
    printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
    echo 'stockade-test-debian' >"$root/etc/hostname"
    [ -r /etc/debian_version ] && cp /etc/debian_version "$root/etc/debian_version"
    if [ "$(id -u)" -eq 0 ]; then
        chown 1000:1000 "$root/home/sandbox"
    fi
}

# The recipe's hash: this builder's code and what it copies.
_stockade_debian_recipe() {
    {
        declare -f _stockade_in_usr _stockade_debian_copy _stockade_debian_programs \
            _stockade_debian_rootfs
        printf '%s\n' "${_STOCKADE_DEBIAN_PACKAGES[@]}"
        uname -m
        if command -v dpkg-query >/dev/null 2>&1; then
            dpkg-query -W "${_STOCKADE_DEBIAN_PACKAGES[@]}" libc6 2>/dev/null || true
        fi
    } | sha256sum | cut -c1-16
}

build_debian_test_image() {
    local image="$1" force="${2:-}"
    command -v ldd >/dev/null 2>&1 || {
        _stockade_debian_err "ldd is missing (a glibc host is needed)"
        return 1
    }
    local recipe old_id old_recipe
    recipe="$(_stockade_debian_recipe)"
    old_id="$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
    old_recipe="$(docker image inspect --format "{{index .Config.Labels \"$_STOCKADE_RECIPE_LABEL\"}}" "$image" 2>/dev/null || true)"
    if [ "$force" != --force ] && [ -n "$old_id" ] && [ "$old_recipe" = "$recipe" ]; then
        return 0
    fi

    local work status=0
    work="$(mktemp -d)"
    local tar_owner=(--numeric-owner)
    [ "$(id -u)" -eq 0 ] || tar_owner+=(--owner=0 --group=0)
    if _stockade_debian_rootfs "$work/rootfs"; then
        tar "${tar_owner[@]}" -C "$work/rootfs" -c . |
            docker import \
                --change 'CMD ["/bin/bash"]' \
                --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
                --change 'WORKDIR /workspace' \
                --change 'LABEL io.stockade.test=true' \
                --change "LABEL $_STOCKADE_RECIPE_LABEL=$recipe" \
                - "$image" >/dev/null || {
            _stockade_debian_err "docker import failed"
            status=1
        }
    else
        status=1
    fi
    rm -rf "$work"
    [ "$status" -eq 0 ] || return 1

    local new_id
    new_id="$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null)" || {
        _stockade_debian_err "image $image missing after import"
        return 1
    }
    # The replaced image goes unless a container still uses it.
    if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
        docker image rm "$old_id" >/dev/null 2>&1 || true
    fi
}
