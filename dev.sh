#!/usr/bin/env bash
# Set up everything on a fresh machine and run one thing:
#   ./dev.sh demo     supervise a real 4-rank PyTorch job through injected faults
#   ./dev.sh test     run the test suite (what CI runs)
#   ./dev.sh bench    print the benchmark figures
set -euo pipefail
cd "$(dirname "$0")"

VENV=${TRAINGUARD_VENV:-.venv}

system_packages() {
    # The Slurm tests start a real cluster on localhost from Debian's packages; the Airflow
    # plugin's page is drawn by Debian's headless Chromium.
    local missing=()
    command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] || missing+=(slurm-wlm munge)
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    # The store's tests run against a real PostgreSQL server that their fixture starts.
    command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
    # The MPI framework's tests run a real mpirun (OpenMPI) with mpi4py.
    command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin libopenmpi-dev)
    [ ${#missing[@]} = 0 ] && return
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "dev.sh: ${missing[*]} not installed and this is not root: their tests will be skipped" >&2
    fi
}

setup() {
    if [ ! -x "$VENV/bin/python" ]; then
        python3 -m venv "$VENV"
    fi
    # Reinstall only when the dependency files changed since the last install.
    local stamp="$VENV/.trainguard-deps"
    local want
    want=$(cat pyproject.toml requirements-lock.txt | sha256sum | cut -d' ' -f1)
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        "$VENV/bin/python" -m pip install -q --upgrade pip
        "$VENV/bin/python" -m pip install -q -c requirements-lock.txt -e '.[dev,torch,airflow,kubernetes,mpi]'
        echo "$want" > "$stamp"
    fi
}

case "${1:-}" in
    demo)
        setup
        exec "$VENV/bin/trainguard" --log-level WARNING demo "${@:2}"
        ;;
    test)
        system_packages
        setup
        "$VENV/bin/lint-imports"
        exec "$VENV/bin/python" -m pytest "${@:2}"
        ;;
    bench)
        setup
        for script in bench/*.py; do
            case "$script" in *_worker.py|*/latency.py) continue ;; esac  # helpers of the benchmarks
            echo "== $script"
            "$VENV/bin/python" "$script"
        done
        ;;
    *)
        echo "usage: ./dev.sh demo|test|bench [args]" >&2
        exit 2
        ;;
esac
