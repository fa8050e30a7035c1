# scripts/apt_lock.sh — sourced by scripts/setup.sh: wait, and say so, while
# another apt or dpkg holds the package manager's lock.
#
# The idea: apt-get fails at once with a raw "Could not get lock" when another
# installation (an unattended upgrade, a second shell) is running. The kernel
# lists every held file lock in /proc/locks with the holder's pid and the
# file's inode, so we can see the lock, name who holds it, and wait for it
# (APT_LOCK_WAIT seconds, 300 by default) before apt ever runs.
# APT_LOCKS (space-separated) may name other lock files; the test uses its own.

APT_LOCKS=${APT_LOCKS:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock}
APT_LOCK_WAIT=${APT_LOCK_WAIT:-300}

# Prints "LOCKFILE PID" for the first of APT_LOCKS that some process holds; nothing if none is held.
apt_lock_holder() {
    local lock inode pid
    for lock in $APT_LOCKS; do
        [ -e "$lock" ] || continue
        inode=$(stat -c %i "$lock" 2>/dev/null) || continue
        # /proc/locks: "1: POSIX  ADVISORY  WRITE 1234 fe:00:408225 0 EOF" (pid, then major:minor:inode)
        pid=$(awk -v ino="$inode" '{ n = split($6, d, ":"); if (d[n] == ino) { print $5; exit } }' /proc/locks 2>/dev/null)
        if [ -n "$pid" ]; then echo "$lock $pid"; return; fi
    done
}

# Returns 0 once no lock is held; 1, having said why and what to do, after APT_LOCK_WAIT seconds.
wait_for_apt_lock() {
    local start=$SECONDS held lock pid what last=-1 waited_any=0
    while held=$(apt_lock_holder) && [ -n "$held" ]; do
        lock=${held% *}; pid=${held#* }; waited_any=1
        what=$({ tr '\0' ' ' < "/proc/$pid/cmdline"; } 2>/dev/null | cut -c1-100 | sed 's/ *$//')
        what=${what:-a process that has exited or that this user cannot see}
        local waited=$((SECONDS - start))
        if [ "$waited" -ge "$APT_LOCK_WAIT" ]; then
            echo "setup: another package manager still holds $lock after ${waited} s: pid $pid ($what)." >&2
            echo "setup: nothing was installed. Let it finish (or stop it if it is stuck), then run scripts/setup.sh again;" >&2
            echo "       APT_LOCK_WAIT=SECONDS scripts/setup.sh waits longer." >&2
            return 1
        fi
        if [ $((waited / 15)) -ne "$last" ]; then   # one line every 15 s
            last=$((waited / 15))
            echo "setup: waiting for the package manager: $lock is held by pid $pid ($what); another installation" \
                 "is running (waited ${waited} s, will wait up to ${APT_LOCK_WAIT} s)"
        fi
        sleep 1
    done
    [ "$waited_any" -eq 1 ] && echo "setup: the package manager lock is free after $((SECONDS - start)) s"
    return 0
}
