#!/bin/bash
# Installs Stockade's code-interpreter image into a Debian bookworm root. Runs
# as root in a container of the debootstrap base image, with this directory
# copied to /tmp/stockade-build (scripts/lib/code-interpreter-image.sh does
# that, then commits the container):
#
#   bash /tmp/stockade-build/install.sh DEBIAN_MIRROR SECURITY_MIRROR
#
# /tmp/stockade-build/ca-certificates.crt, when there, is the build host's
# trust store: pip and npm use it for their downloads (a host behind a
# TLS-inspecting proxy trusts that proxy), and it goes with this directory
# at the end, so the image keeps Debian's own trust store.
set -euo pipefail

mirror="${1:?the Debian mirror}"
security="${2:?the Debian security mirror}"
here=/tmp/stockade-build
share=/usr/local/share/stockade
kernels=/usr/local/share/jupyter/kernels
export DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 HOME=/root

fail() {
    echo "install: $*" >&2
    exit 1
}
step() {
    echo "-- $*"
}
# Runs a command quietly; on failure shows its last lines and says what
# failed and why that may be.
quiet() {
    local what="$1" log
    shift
    log="$(mktemp)"
    if ! "$@" >"$log" 2>&1; then
        tail -n 25 "$log" >&2
        fail "$what"
    fi
    rm -f "$log"
}

if [ -s "$here/ca-certificates.crt" ]; then
    export PIP_CERT="$here/ca-certificates.crt" npm_config_cafile="$here/ca-certificates.crt"
fi

step "Debian packages (python3, nodejs, npm, tools) from $mirror"
cat >/etc/apt/sources.list <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
SOURCES
quiet "apt-get update failed: can containers reach $mirror and $security? (docker run --rm ... apt-get update)" \
    apt-get update
quiet "apt-get install failed" \
    apt-get install -y --no-install-recommends \
    python3 python3-pip python3-venv python-is-python3 nodejs npm \
    bash coreutils procps ca-certificates curl wget git less sudo
quiet "apt-get upgrade failed" apt-get upgrade -y --no-install-recommends
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin

step "the user 'user' (uid 1000, home /home/user) with passwordless sudo"
groupadd --gid 1000 user
useradd --uid 1000 --gid 1000 --create-home --home-dir /home/user --shell /bin/bash user
printf 'user ALL=(ALL:ALL) NOPASSWD: ALL\n' >/etc/sudoers.d/user
chmod 0440 /etc/sudoers.d/user

step "Python packages from PyPI"
# Debian marks its Python as externally managed; the sandbox is a machine
# of its own, so pip installs into it (as root into /usr/local, as a user
# into ~/.local) without --break-system-packages.
printf '[global]\nbreak-system-packages = true\n' >/etc/pip.conf
quiet "pip install failed: can containers reach PyPI (pypi.org, files.pythonhosted.org)?" \
    python3 -m pip install --no-cache-dir --disable-pip-version-check --root-user-action=ignore \
    -r "$here/requirements.txt"
mkdir -p "$share"
python3 -m pip freeze --disable-pip-version-check --all >"$share/python-packages.txt"

step "Deno from npm"
quiet "npm install -g deno failed: can containers reach registry.npmjs.org?" \
    npm install --global --no-audit --no-fund --no-update-notifier deno
deno="$(command -v deno)" || fail "npm installed no deno command"
"$deno" --version >/dev/null || fail "$deno does not run"
if [ "$(readlink -f "$deno")" != "$(readlink -f /usr/local/bin/deno)" ]; then
    fail "deno is at $deno, not /usr/local/bin/deno where its kernelspec points"
fi
npm cache clean --force >/dev/null 2>&1

step "Jupyter kernelspecs (python3, deno, bash) in $kernels"
# ipykernel's wheel installs a python3 kernelspec that runs `python`; ours
# runs python3, Debian's name for it.
rm -rf "$kernels/python3"
mkdir -p "$kernels/python3" "$kernels/deno"
cp "$here/kernels/python3/kernel.json" "$kernels/python3/"
cp "$here/kernels/deno/kernel.json" "$kernels/deno/"
cp /usr/local/lib/python3*/dist-packages/ipykernel/resources/logo-* "$kernels/python3/" 2>/dev/null || true
quiet "python3 -m bash_kernel.install failed" python3 -m bash_kernel.install --prefix /usr/local

step "IPython configuration for every kernel"
mkdir -p /etc/ipython
cp "$here/ipython_kernel_config.py" /etc/ipython/ipython_kernel_config.py
cp "$here/ipython_startup.py" "$share/ipython_startup.py"
chmod 0644 /etc/ipython/ipython_kernel_config.py "$share/ipython_startup.py"

step "versions"
{
    echo "debian $(cat /etc/debian_version)"
    echo "python $(python3 -c 'import platform; print(platform.python_version())')"
    echo "node $(node --version)"
    echo "npm $(npm --version)"
    "$deno" --version | head -n 1
} >"$share/versions.txt"

step "caches each user would otherwise build at a first start"
# matplotlib's font list (seconds on a first import) for root and the user,
# and the user's Deno directory.
warm='import matplotlib; matplotlib.use("agg"); import matplotlib.pyplot'
quiet "importing matplotlib failed" python3 -c "$warm"
quiet "importing matplotlib as user failed" su user -s /bin/bash -c "cd && python3 -c '$warm'"
quiet "deno eval failed as user" su user -s /bin/bash -c "cd && DENO_NO_UPDATE_CHECK=1 deno eval 'Deno.exit(0)'"

step "clean-up"
rm -rf /root/.cache/pip /root/.npm /tmp/* /var/tmp/* /var/log/apt/* /var/log/*.log
