# tests/ranks.sh — sourced by the shell tests that start many ranks: the
# tally of tests/tally.sh, a clean skip where this build or machine has no
# Open MPI, mpirun's permission to run as root and to oversubscribe the cores
# (CI has 2), and a scratch folder $dir that goes away at the end (KEEP=1
# keeps it).
source "$(dirname "${BASH_SOURCE[0]}")/tally.sh"
if ! command -v mpirun >/dev/null || ! ldd "$BUILD/train" | grep -q libmpi; then
    echo "skipped: no mpirun, or this build has no Open MPI"; echo "0 passed, 0 failed"; exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
dir=$(mktemp -d "/tmp/llm3d_$(basename "$0" .sh).XXXXXX")
trap '[ -z "${KEEP:-}" ] && rm -rf "$dir"' EXIT
