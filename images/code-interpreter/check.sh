#!/bin/bash
# Checks a built code-interpreter image from inside: run as the user `user`
# in a container of it, with this directory mounted at /stockade-recipe
# (scripts/lib/code-interpreter-image.sh does that after each build). Names
# every check that fails and exits 1 then.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
failed=0
fail() {
    echo "image check failed: $*" >&2
    failed=1
}

[ "$(id -un):$(id -u):$(id -g)" = "user:1000:1000" ] || fail "running as $(id -un) ($(id -u):$(id -g)), not user (1000:1000)"
[ "$HOME" = /home/user ] || fail "HOME is $HOME, not /home/user"
[ "$(pwd)" = /home/user ] || fail "the working directory is $(pwd), not /home/user"
[ -w /home/user ] || fail "/home/user is not writable by user"
[ "$(getent passwd user | cut -d: -f7)" = /bin/bash ] || fail "user's shell is not /bin/bash"

for cmd in bash python3 python pip node npm deno curl wget git ps sudo jupyter; do
    command -v "$cmd" >/dev/null || fail "no $cmd command"
done
python3 -c 'import ipykernel, IPython, numpy, pandas, matplotlib, PIL, orjson, e2b_charts, bash_kernel' ||
    fail "a Python package does not import"
deno --version >/dev/null || fail "deno --version failed"
node -e 'process.exit(0)' || fail "node does not run"

specs="$(jupyter kernelspec list --json)" || fail "jupyter kernelspec list failed"
for name in python3 deno bash; do
    printf '%s' "$specs" | python3 -c "import json, sys; sys.exit('$name' not in json.load(sys.stdin)['kernelspecs'])" ||
        fail "no $name kernelspec in jupyter kernelspec list"
done
for f in /etc/ipython/ipython_kernel_config.py /usr/local/share/stockade/ipython_startup.py \
    /usr/local/share/stockade/python-packages.txt /usr/local/share/stockade/versions.txt; do
    [ -r "$f" ] || fail "$f is missing"
done

python3 "$here/check_kernels.py" 2> >(grep -v -e 'WARNING | Kernel is running over TCP' -e 'is unstable' >&2) ||
    fail "a kernel check (above)"

# The user's pip installs into ~/.local (Debian's Python is externally managed).
pip install --quiet --no-index --dry-run pip >/dev/null 2>&1 ||
    fail "pip refuses to install for user (externally managed environment?)"

exit "$failed"
