# shellcheck shell=bash
# The fast tier of scripts/test (`scripts/test --fast`): every test of the
# workspace that needs neither a Docker Engine nor PostgreSQL, chosen by test
# target rather than skipped at run time, so that it runs the same tests on
# any machine. Source this file, then call
#
#     run_fast_tests [test-binary args]
#
# (the arguments go to every test binary: a name filter, `--nocapture`, …).
# It prints cargo's output, then one line with the counts and the wall time,
# and returns non-zero when a test failed.

# Integration-test targets that need no Docker Engine, by package. Left out:
# stockade-runtime's tests (DockerRuntime against real engines), the API
# suite of stockade-server (`tests/api`: a real server on real Docker),
# stockade-sdk's suite and stockade-bench's quick run (both through such a
# server), and the binary's tests that start a server and create sandboxes
# (cli, crash, firstrun, flood, instances, proxy_flags, terminal,
# warm_pool_flags).
FAST_PACKAGES=(stockade-store stockade-service stockade-blob stockade-egress stockade-server stockade-agent stockade)
FAST_TESTS=(
    # stockade-store, on SQLite (durability mounts a tmpfs as root, and says
    # so and does nothing otherwise)
    durability hosts leases quotas sessions settings snapshots story tokens
    # stockade-service on the fake runtime (hosts: the service's own)
    admission hosts operations
    # stockade-blob: a local directory, and moto's S3 server when installed
    blob
    # stockade-egress: loopback sockets, and a network namespace as root
    egress
    # stockade-server: the HTTP tier, the router on the fake runtime
    http
    # stockade-agent: the agent binary as real processes (its `docker`
    # module is left out by name below)
    agent
    # stockade: flags refused before the server touches Docker
    security_flags
)

run_fast_tests() {
    local started=$SECONDS log status=0 pkg t
    log=$(mktemp)
    # Whatever the environment says: no engine, no PostgreSQL. A test that
    # still reached for either fails here instead of passing only on a
    # developer's machine.
    (
        export DOCKER_HOST=unix:///nonexistent
        unset STOCKADE_TEST_DATABASE_URL
        local args=()
        for pkg in "${FAST_PACKAGES[@]}"; do args+=(-p "$pkg"); done
        for t in "${FAST_TESTS[@]}"; do args+=(--test "$t"); done
        local rc=0
        # Unit tests of every crate (libraries and binaries: core, api, store,
        # runtime, service, server, agent, CLI, bench, …); none needs Docker.
        cargo test --locked --no-fail-fast --workspace --lib --bins -- "$@" || rc=1
        cargo test --locked --no-fail-fast "${args[@]}" -- --skip docker:: "$@" || rc=1
        exit "$rc"
    ) 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    local passed failed ignored
    read -r passed failed ignored < <(awk '
      /^test result:/ { for (i = 1; i <= NF; i++) {
          if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) g += $i } }
      END { print p + 0, f + 0, g + 0 }' "$log")
    rm -f "$log"
    echo
    echo "${passed} passed, ${failed} failed, ${ignored} ignored (fast tier, without Docker or PostgreSQL) in $((SECONDS - started)) s"
    if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
        echo "cargo failed before every test ran (a build error?): see its output above" >&2
    fi
    return "$status"
}
