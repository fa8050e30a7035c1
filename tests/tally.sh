# tests/tally.sh — sourced by every shell test: strict variables, the repository
# root as the working folder, $BUILD, the check() tally behind the closing
# "N passed, N failed", and require() for the commands a test calls. In the
# sanitizer pass (tests/test_asan.sh) ranks keep ASan and UBSan but not
# LeakSanitizer: Open MPI leaves allocations in components it has unloaded by
# exit, which LSan can neither free nor name to suppress.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
[ -n "${LLM3D_SANITIZER_PASS:-}" ] && export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
passed=0; failed=0
check() { if eval "$1"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $2"; fi; }
# require CMD PACKAGE: a failed check naming what to install when a command the test calls is missing
# (scripts/setup.sh installs it), so a check that cannot run fails instead of passing unchecked
require() { command -v "$1" >/dev/null && return 0; check false "this test calls '$1', which is not installed (apt package $2): run scripts/setup.sh"; return 1; }
