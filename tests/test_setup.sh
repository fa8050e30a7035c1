#!/usr/bin/env bash
# tests/test_setup.sh — scripts/setup.sh's wait for the package manager lock
# (scripts/apt_lock.sh), on a lock file of the test's own (never apt's): free,
# it returns at once; held by a process that lets go, it waits, says who holds
# what, and returns 0; held past APT_LOCK_WAIT, it gives up with a message that
# names the lock, the holder and what to do. Then setup.sh itself on this
# machine, where everything is installed: it says so, and how long it took.
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d /tmp/llm3d_setup_XXXXXX)
holder=""
trap '[ -n "$holder" ] && kill "$holder" 2>/dev/null; rm -rf "$T"' EXIT
passed=0; failed=0
check() {   # check "what" command...
    local what=$1; shift
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $what"; fi
}
lock=$T/lock-frontend
touch "$lock"
export APT_LOCKS="$T/missing $lock"
source scripts/apt_lock.sh

APT_LOCK_WAIT=5 wait_for_apt_lock >"$T/out" 2>&1; rc=$?
check "a free lock: returns 0 at once, silently (rc $rc): $(cat "$T/out")" test "$rc" -eq 0 -a ! -s "$T/out"

# the holder: flock --no-fork becomes `sleep` holding the lock (one process, killed by its id; its
# output goes nowhere, so no orphan keeps the test runner's pipe open)
hold() {
    flock --no-fork "$lock" sleep "$1" >/dev/null 2>&1 & holder=$!
    for _ in $(seq 100); do [ -n "$(apt_lock_holder)" ] && break; sleep 0.05; done   # until it holds the lock
}
hold 2
held=$(apt_lock_holder)
check "the holder is found in /proc/locks: '$held'" test "${held% *}" = "$lock"
t0=$SECONDS
APT_LOCK_WAIT=20 wait_for_apt_lock >"$T/out" 2>&1; rc=$?
check "a lock let go after ~2 s: waits, then returns 0 (rc $rc, $((SECONDS - t0)) s)" test "$rc" -eq 0 -a $((SECONDS - t0)) -ge 1
check "while waiting it names the lock and the holder: $(cat "$T/out")" grep -q "waiting for the package manager: $lock is held by pid [0-9]* (.*sleep 2" "$T/out"
check "and says when the lock is free" grep -q "lock is free after" "$T/out"
wait "$holder" 2>/dev/null

hold 30
t0=$SECONDS
APT_LOCK_WAIT=2 wait_for_apt_lock >"$T/out" 2>&1; rc=$?
check "a lock held past APT_LOCK_WAIT=2: returns 1 after ~2 s (rc $rc, $((SECONDS - t0)) s)" test "$rc" -eq 1 -a $((SECONDS - t0)) -ge 2 -a $((SECONDS - t0)) -le 10
check "gives up naming lock, holder and what to do: $(cat "$T/out")" \
    grep -q "still holds $lock after [0-9]* s: pid [0-9]* (.*sleep 30" "$T/out"
check "and what to do" grep -q "run scripts/setup.sh again" "$T/out"
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null; holder=""

# setup.sh on this machine; run in full only when --check finds nothing missing (a test never installs)
if scripts/setup.sh --check >"$T/out" 2>&1; then
    check "setup.sh --check: says everything is installed" grep -q "everything is installed" "$T/out"
    scripts/setup.sh >"$T/out" 2>&1; rc=$?
    check "setup.sh again: exit 0, says nothing was installed and how long it took (rc $rc): $(cat "$T/out")" \
        grep -q "setup: done in [0-9]* s; nothing to install" "$T/out"
else
    check "setup.sh --check names what is missing: $(cat "$T/out")" grep -q "setup: missing" "$T/out"
fi
scripts/setup.sh --frobnicate >"$T/out" 2>&1; rc=$?
check "an unknown argument: exit 1 (rc $rc)" test "$rc" -eq 1
check "an unknown argument: says the usage" grep -q "usage: scripts/setup.sh" "$T/out"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
