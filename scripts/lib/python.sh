# shellcheck shell=bash
# Python virtualenvs for the compatibility suites and their run.
# Source this file, then call
#
#     ensure_compat_venvs          # the four virtualenvs (and npm e2b), made or reused
#     run_compat_suites [ARGS...]  # tests/compat/run.py over them
#
# The virtualenvs live under $STOCKADE_PY_CACHE (default /var/cache/stockade-py):
# e2b-pinned, prime-pinned (the versions in tests/compat/requirements/*-pinned.txt)
# and e2b-newest, prime-newest (the newest releases on PyPI). The e2b ones also
# hold E2B's code-interpreter SDK (e2b-code-interpreter), which builds on e2b. e2b and
# prime-sandboxes pin incompatible versions of connectrpc, so each SDK has a
# virtualenv of its own. A virtualenv is reused while its requirements file is
# unchanged; the newest ones are upgraded once a day. Without network access an
# existing virtualenv is used as it is. It never changes the caller's shell
# options.
#
# Python itself is installed when it is missing, the way scripts/lib/docker.sh
# installs Docker: Debian/Ubuntu packages through apt-get (quiet), as root or
# through `sudo -n` — python3 when there is no interpreter, python3-venv when
# `python3 -m venv` cannot make a virtualenv with pip in it (Debian splits
# venv's ensurepip out of python3). python3-pip is not needed: every
# virtualenv gets its own pip from ensurepip. Without apt-get or root the
# error names the package to install. STOCKADE_PYTHON picks another
# interpreter (then nothing is installed for it but its -venv package).
# node and npm (the TypeScript smoke tests) are optional and never
# installed: without them those tests are skipped and the summary says so.

STOCKADE_PY_CACHE=${STOCKADE_PY_CACHE:-/var/cache/stockade-py}

_py_err() {
    printf 'python.sh: %s\n' "$*" >&2
}

# _py_as_root CMD... — runs CMD as root: directly when we are root, else
# through passwordless sudo; fails (without asking for a password) otherwise.
_py_as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        return 1
    fi
}

# _py_apt_install WHY PACKAGE... — installs Debian packages with apt-get,
# quietly; on failure says WHY they are needed and how to install them.
_py_apt_install() {
    local why=$1 log
    shift
    if ! command -v apt-get >/dev/null 2>&1; then
        _py_err "$why: install $* (no apt-get here to do it)"
        return 1
    fi
    if [ "$(id -u)" -ne 0 ] && ! sudo -n true >/dev/null 2>&1; then
        _py_err "$why: install $* as root (apt-get install $*); neither root nor passwordless sudo here"
        return 1
    fi
    log=$(mktemp)
    if _py_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$log" 2>&1 &&
        _py_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >>"$log" 2>&1; then
        rm -f "$log"
        return 0
    fi
    _py_err "$why: apt-get install $* failed:"
    tail -n 20 "$log" | sed 's/^/    /' >&2
    rm -f "$log"
    return 1
}

# _py_can_venv PYTHON — whether PYTHON can make a virtualenv with pip in it
# (the venv module and ensurepip, which Debian ships in python3-venv).
_py_can_venv() {
    "$1" -c 'import venv, ensurepip' >/dev/null 2>&1
}

# ensure_python — an interpreter ($STOCKADE_PYTHON, default python3) of
# version 3.10 or later that can make virtualenvs; installs python3 and
# python3-venv with apt-get when they are missing.
ensure_python() {
    local python=${STOCKADE_PYTHON:-python3} version
    if ! command -v "$python" >/dev/null 2>&1; then
        if [ "$python" != python3 ]; then
            _py_err "STOCKADE_PYTHON=$python not found"
            return 1
        fi
        _py_apt_install "python3 not found" python3 python3-venv || return 1
    fi
    version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || {
        _py_err "$python does not run"
        return 1
    }
    if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
        _py_err "$python is Python $version; the SDKs need 3.10 or later (set STOCKADE_PYTHON)"
        return 1
    fi
    if _py_can_venv "$python"; then
        return 0
    fi
    # Debian: python3-venv for the default python3, pythonX.Y-venv for another.
    local pkg=python3-venv
    [ "$python" = python3 ] || pkg="python$version-venv"
    _py_apt_install "$python -m venv cannot make virtualenvs (no ensurepip)" "$pkg" || return 1
    if ! _py_can_venv "$python"; then
        _py_err "$python -m venv still cannot make virtualenvs after installing $pkg (is $python not Debian's Python $version?): set STOCKADE_PYTHON to a Python with the venv and ensurepip modules"
        return 1
    fi
}

# _py_venv NAME REQUIREMENTS UPGRADE_AFTER_SECONDS — makes or refreshes one
# virtualenv; 0 for UPGRADE_AFTER_SECONDS means never (pinned).
_py_venv() {
    local name=$1 req=$2 max_age=$3
    local dir="$STOCKADE_PY_CACHE/$name" stamp want now age
    want=$(sha256sum "$req" | cut -d' ' -f1)
    stamp="$dir/.stockade-requirements"
    if [ -x "$dir/bin/python" ] && [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$want" ]; then
        if [ "$max_age" -eq 0 ]; then
            return 0
        fi
        now=$(date +%s)
        age=$((now - $(stat -c %Y "$stamp")))
        if [ "$age" -lt "$max_age" ]; then
            return 0
        fi
    fi
    local python=${STOCKADE_PYTHON:-python3}
    mkdir -p "$STOCKADE_PY_CACHE" || return 1
    # A virtualenv without pip is what `python3 -m venv` leaves behind when
    # ensurepip was missing: made anew.
    if [ -x "$dir/bin/python" ] && ! "$dir/bin/python" -m pip --version >/dev/null 2>&1; then
        _py_err "$dir has no pip (made without ensurepip?): making it anew"
        rm -rf "$dir"
    fi
    if [ ! -x "$dir/bin/python" ]; then
        ensure_python || return 1
        "$python" -m venv "$dir" || {
            _py_err "could not make the virtualenv $dir with $python -m venv"
            rm -rf "$dir"
            return 1
        }
    fi
    local log
    log=$(mktemp)
    local upgrade=()
    [ "$max_age" -ne 0 ] && upgrade=(--upgrade)
    if "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "${upgrade[@]}" -r "$req" >"$log" 2>&1; then
        printf '%s\n' "$want" >"$stamp"
        rm -f "$log"
        return 0
    fi
    if [ -f "$stamp" ]; then
        _py_err "could not update $name (no network?); using it as it is:"
        sed 's/^/    /' "$log" | tail -n 5 >&2
        rm -f "$log"
        return 0
    fi
    _py_err "pip install -r $req failed:"
    sed 's/^/    /' "$log" >&2
    rm -f "$log"
    return 1
}

# ensure_compat_venvs — the pinned and the newest virtualenv of each SDK.
# Fails if a pinned one cannot be made; a newest one that cannot is reported.
ensure_compat_venvs() {
    local reqs
    reqs="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tests/compat/requirements"
    _py_venv e2b-pinned "$reqs/e2b-pinned.txt" 0 || return 1
    _py_venv prime-pinned "$reqs/prime-pinned.txt" 0 || return 1
    _py_venv e2b-newest "$reqs/e2b-newest.txt" 86400 ||
        _py_err "no virtualenv with the newest e2b: that run is left out"
    _py_venv prime-newest "$reqs/prime-newest.txt" 86400 ||
        _py_err "no virtualenv with the newest prime-sandboxes: that run is left out"
    ensure_compat_node
    return 0
}

# ensure_kernel_venv — a virtualenv with ipykernel and bash_kernel (and
# bash_kernel's kernelspec inside it) for the agent's code-interpreter tests,
# which start real kernels outside any container; prints its python.
ensure_kernel_venv() {
    local req dir
    req="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/crates/stockade-agent/tests/kernel-requirements.txt"
    dir="$STOCKADE_PY_CACHE/kernel"
    _py_venv kernel "$req" 0 >&2 || return 1
    if [ ! -f "$dir/share/jupyter/kernels/bash/kernel.json" ]; then
        "$dir/bin/python" -m bash_kernel.install --sys-prefix >/dev/null 2>&1 || {
            _py_err "could not install bash_kernel's kernelspec into $dir"
            return 1
        }
    fi
    printf '%s\n' "$dir/bin/python"
}

# ensure_compat_node — E2B's TypeScript SDKs (npm `e2b` and
# `@e2b/code-interpreter`, the versions in tests/compat/ts/package.json) under
# $STOCKADE_PY_CACHE/node-e2b for the TypeScript smoke tests, installed once
# and reused. Optional: without node and npm, or without network on the first
# run, those tests are skipped.
ensure_compat_node() {
    local pkg dir want stamp log
    pkg="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tests/compat/ts/package.json"
    dir="$STOCKADE_PY_CACHE/node-e2b"
    stamp="$dir/.stockade-package"
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        _py_err "node or npm not found: the TypeScript smoke tests are skipped"
        return 0
    fi
    want=$(sha256sum "$pkg" | cut -d' ' -f1)
    if [ -d "$dir/node_modules/e2b" ] && [ -d "$dir/node_modules/@e2b/code-interpreter" ] &&
        [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return 0
    fi
    mkdir -p "$dir" || return 0
    cp "$pkg" "$dir/package.json" || return 0
    log=$(mktemp)
    if (cd "$dir" && npm install --no-audit --no-fund --no-package-lock >"$log" 2>&1); then
        printf '%s\n' "$want" >"$stamp"
    else
        _py_err "npm install of E2B's TypeScript SDKs failed; the TypeScript smoke tests are skipped:"
        sed 's/^/    /' "$log" | tail -n 5 >&2
    fi
    rm -f "$log"
    return 0
}

# run_compat_suites [ARGS...] — runs tests/compat/run.py (ARGS go to it).
run_compat_suites() {
    local root
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    STOCKADE_COMPAT_NODE_MODULES="$STOCKADE_PY_CACHE/node-e2b/node_modules" \
        "$STOCKADE_PY_CACHE/e2b-pinned/bin/python" "$root/tests/compat/run.py" \
        --venvs "$STOCKADE_PY_CACHE" "$@"
}
