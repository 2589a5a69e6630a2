#!/usr/bin/env bash
# The release dataset in this folder: every release, oldest first, 3 pytest sessions of
# the main job (benchmarks/test_main.py: decode 64/128 and TTFT 512/16 tokens, 1 warm-up
# + 5 repetitions each) on the generated main model (~1.1 GB F16), 2 engine threads.
#
#   .venv/bin/tokperf install-engine llama-server --version 9093,9409,9737,10054,10380,10705,11028,11292,11434 --nice 10
#   bash db/runs/releases/measure.sh            # -> .tokperf/releases.db, then db/runs/releases/*.jsonl
#
# The machine is shared: a session starts only when no other llama-server runs (two
# engines on 2 cores cut decode tenfold), and the load average is printed beside it.
set -u
cd "$(dirname "$0")/../../.."
DB=${DB:-.tokperf/releases.db}
RELEASES=${RELEASES:-"9093 9409 9737 10054 10380 10705 11028 11292 11434"}
SESSIONS=${SESSIONS:-3}
for v in $RELEASES; do
  for session in $(seq "$SESSIONS"); do
    while pgrep -x llama-server >/dev/null; do sleep 15; done
    echo "=== b$v session $session $(date +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    .venv/bin/python -m pytest benchmarks/test_main.py -p no:cacheprovider -q \
      --tokperf-engine llama-server --tokperf-engine-version "$v" --tokperf-model main \
      --tokperf-db "$DB" 2>&1 | grep -E "passed|failed|error|test_main" | cut -c1-160
    echo "    others running at the end: $(pgrep -x llama-server | wc -l) llama-server"
  done
done
for run in $(.venv/bin/python -c "import sys; from pathlib import Path
from pytest_tokperf.storage.store import ResultStore
print(*(r.run.run_id for r in ResultStore.open(Path(sys.argv[1])).runs()))" "$DB"); do
  .venv/bin/tokperf save-reference "$DB" --run "$run" -d db/runs/releases
done
