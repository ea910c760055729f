# shellcheck shell=bash
# Python virtualenvs for the compatibility suites (COMPAT-4) and their run.
# Source this file, then call
#
#     ensure_compat_venvs          # the four virtualenvs (and npm e2b), made or reused
#     run_compat_suites [ARGS...]  # tests/compat/run.py over them
#
# The virtualenvs live under $STOCKADE_PY_CACHE (default /var/cache/stockade-py):
# e2b-pinned, prime-pinned (the versions in tests/compat/requirements/*-pinned.txt)
# and e2b-newest, prime-newest (the newest releases on PyPI). e2b and
# prime-sandboxes pin incompatible versions of connectrpc, so each SDK has a
# virtualenv of its own. A virtualenv is reused while its requirements file is
# unchanged; the newest ones are upgraded once a day. Without network access an
# existing virtualenv is used as it is. It never changes the caller's shell
# options.

STOCKADE_PY_CACHE=${STOCKADE_PY_CACHE:-/var/cache/stockade-py}

_py_err() {
    printf 'python.sh: %s\n' "$*" >&2
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
    if ! command -v "$python" >/dev/null 2>&1; then
        _py_err "$python not found: install Python 3.10 or later"
        return 1
    fi
    mkdir -p "$STOCKADE_PY_CACHE" || return 1
    if [ ! -x "$dir/bin/python" ]; then
        "$python" -m venv "$dir" || { _py_err "could not make the virtualenv $dir"; return 1; }
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

# ensure_compat_node — E2B's TypeScript SDK (npm `e2b`, the version in
# tests/compat/ts/package.json) under $STOCKADE_PY_CACHE/node-e2b for the one
# TypeScript smoke test, installed once and reused. Optional: without node
# and npm, or without network on the first run, that test is skipped.
ensure_compat_node() {
    local pkg dir want stamp log
    pkg="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tests/compat/ts/package.json"
    dir="$STOCKADE_PY_CACHE/node-e2b"
    stamp="$dir/.stockade-package"
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        _py_err "node or npm not found: the TypeScript smoke test is skipped"
        return 0
    fi
    want=$(sha256sum "$pkg" | cut -d' ' -f1)
    if [ -d "$dir/node_modules/e2b" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return 0
    fi
    mkdir -p "$dir" || return 0
    cp "$pkg" "$dir/package.json" || return 0
    log=$(mktemp)
    if (cd "$dir" && npm install --no-audit --no-fund --no-package-lock >"$log" 2>&1); then
        printf '%s\n' "$want" >"$stamp"
    else
        _py_err "npm install of E2B's TypeScript SDK failed; the TypeScript smoke test is skipped:"
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
