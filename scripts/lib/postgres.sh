# shellcheck shell=bash
# A local PostgreSQL for the tests. Source this file, then call
#
#     ensure_postgres
#
# As root on Debian (bookworm) it installs PostgreSQL if it is missing, makes
# sure a cluster exists and runs, creates the role `stockade` (password
# `stockade`, CREATEDB, not a superuser) and its database `stockade`, and
# exports STOCKADE_TEST_DATABASE_URL. Every step is idempotent; it prints
# nothing on success and says what failed (with the command's output) otherwise.
# It never changes the caller's shell options.

STOCKADE_PG_ROLE=stockade
STOCKADE_PG_PASSWORD=stockade
STOCKADE_PG_DATABASE=stockade

# _pg_run LOG DESCRIPTION COMMAND... — runs COMMAND with its output in LOG;
# on failure prints DESCRIPTION and the output, and returns non-zero.
_pg_run() {
    local log=$1 what=$2
    shift 2
    if ! "$@" >"$log" 2>&1; then
        echo "ensure_postgres: $what failed: $*" >&2
        sed 's/^/    /' "$log" >&2
        return 1
    fi
}

# _pg_psql PORT SQL — runs SQL as the postgres superuser, prints the result
# unaligned (-tA) on stdout.
_pg_psql() {
    local port=$1 sql=$2
    local -a cmd=(psql -X -q -tA -v ON_ERROR_STOP=1 -h /var/run/postgresql -p "$port" -d postgres -c "$sql")
    if [ "$(id -un)" = postgres ]; then
        "${cmd[@]}"
    elif command -v runuser >/dev/null 2>&1; then
        (cd / && runuser -u postgres -- "${cmd[@]}")
    else
        (cd / && su postgres -s /bin/sh -c "$(printf '%q ' "${cmd[@]}")")
    fi
}

# _pg_server_installed — whether the cluster tools and a server binary exist.
_pg_server_installed() {
    command -v pg_ctlcluster >/dev/null 2>&1 &&
        command -v pg_lsclusters >/dev/null 2>&1 &&
        command -v pg_isready >/dev/null 2>&1 &&
        compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null
}

ensure_postgres() {
    local log
    log=$(mktemp "${TMPDIR:-/tmp}/ensure_postgres.XXXXXX") || {
        echo "ensure_postgres: cannot create a temporary file" >&2
        return 1
    }
    # shellcheck disable=SC2064 # expand $log now
    trap "rm -f '$log'; trap - RETURN" RETURN

    # 1. The server software.
    if ! _pg_server_installed; then
        if [ "$(id -u)" != 0 ]; then
            echo "ensure_postgres: PostgreSQL is not installed and installing it needs root: run 'sudo apt-get install postgresql'" >&2
            return 1
        fi
        _pg_run "$log" "apt-get update" env DEBIAN_FRONTEND=noninteractive apt-get update -qq || return 1
        _pg_run "$log" "installing PostgreSQL" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends postgresql || return 1
        if ! _pg_server_installed; then
            echo "ensure_postgres: 'apt-get install postgresql' succeeded but pg_ctlcluster or the server binary is still missing" >&2
            return 1
        fi
    fi

    # 2. A cluster: the first one listed, or a new "main" of the newest installed version.
    local version name port status
    read -r version name port status _ < <(pg_lsclusters -h 2>/dev/null | head -n 1)
    if [ -z "${version:-}" ]; then
        version=$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -n 1)
        _pg_run "$log" "creating cluster $version/main" pg_createcluster "$version" main || return 1
        read -r version name port status _ < <(pg_lsclusters -h 2>/dev/null | head -n 1)
        if [ -z "${version:-}" ]; then
            echo "ensure_postgres: pg_createcluster ran but pg_lsclusters lists no cluster" >&2
            return 1
        fi
    fi

    # 3. Running and answering.
    if [[ "$status" != online* ]]; then
        _pg_run "$log" "starting cluster $version/$name" pg_ctlcluster "$version" "$name" start || {
            echo "    (server log: /var/log/postgresql/postgresql-$version-$name.log)" >&2
            return 1
        }
    fi
    local tries=0
    until pg_isready -q -h 127.0.0.1 -p "$port"; do
        tries=$((tries + 1))
        if [ "$tries" -ge 60 ]; then
            echo "ensure_postgres: cluster $version/$name does not answer on 127.0.0.1:$port after 30 s (see /var/log/postgresql/postgresql-$version-$name.log)" >&2
            return 1
        fi
        sleep 0.5
    done

    # 4. The role and its database.
    _pg_run "$log" "creating role $STOCKADE_PG_ROLE" _pg_psql "$port" "
        DO \$\$ BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$STOCKADE_PG_ROLE') THEN
                CREATE ROLE $STOCKADE_PG_ROLE LOGIN;
            END IF;
        END \$\$;
        ALTER ROLE $STOCKADE_PG_ROLE LOGIN NOSUPERUSER CREATEDB PASSWORD '$STOCKADE_PG_PASSWORD';" || return 1
    _pg_run "$log" "looking up database $STOCKADE_PG_DATABASE" _pg_psql "$port" \
        "SELECT 1 FROM pg_database WHERE datname = '$STOCKADE_PG_DATABASE'" || return 1
    if [ "$(cat "$log")" != 1 ]; then
        _pg_run "$log" "creating database $STOCKADE_PG_DATABASE" _pg_psql "$port" \
            "CREATE DATABASE $STOCKADE_PG_DATABASE OWNER $STOCKADE_PG_ROLE" || return 1
    fi

    export STOCKADE_TEST_DATABASE_URL="postgres://$STOCKADE_PG_ROLE:$STOCKADE_PG_PASSWORD@127.0.0.1:$port/$STOCKADE_PG_DATABASE"

    # 5. The URL works with a password over TCP, as the tests will use it.
    _pg_run "$log" "connecting as $STOCKADE_PG_ROLE" \
        psql -X -q -tA -v ON_ERROR_STOP=1 "$STOCKADE_TEST_DATABASE_URL" -c "SELECT 1" || return 1
}
