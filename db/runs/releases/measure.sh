#!/usr/bin/env bash
# The release dataset in this folder: every release, oldest first, 3 pytest sessions of
# the main job (benchmarks/test_main.py: decode 64/128 and TTFT 512/16 tokens, 1 warm-up
# + 5 repetitions each) on the generated main model (~1.1 GB F16), 2 engine threads.
#
#   .venv/bin/tokperf install-engine llama-server --version 9093..11434/9 --nice 10
#   bash db/runs/releases/measure.sh      # -> db/runs/releases/<run>.jsonl
#   .venv/bin/tokperf import .tokperf/releases.db db/runs/releases
#
# The machine is shared with other engineers who run llama-server too, and two engines
# on 2 cores cut decode tenfold. So a session starts only when no other llama-server
# runs, writes to its own DB, and is kept (saved as a reference run) only if no other
# llama-server appeared while it ran; otherwise it is measured again.
set -u
cd "$(dirname "$0")/../../.."
RELEASES=${RELEASES:-"9093 9409 9737 10054 10380 10705 11028 11292 11434"}
SESSIONS=${SESSIONS:-3}
TRIES=${TRIES:-8}
OUT=${OUT:-db/runs/releases}
work=$(mktemp -d)
for v in $RELEASES; do
  for session in $(seq "$SESSIONS"); do
    for try in $(seq "$TRIES"); do
      while pgrep -x llama-server >/dev/null; do sleep 10; done
      db="$work/b$v-$session-$try.db"
      echo "=== b$v session $session try $try $(date +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
      .venv/bin/python -m pytest benchmarks/test_main.py -p no:cacheprovider -q \
        --tokperf-engine llama-server --tokperf-engine-version "$v" --tokperf-model main \
        --tokperf-db "$db" > "$work/out" 2>&1 &
      pid=$!
      foreign=0
      while kill -0 "$pid" 2>/dev/null; do
        for p in $(pgrep -x llama-server); do
          [ "$(ps -o ppid= -p "$p" | tr -d ' ')" = "$pid" ] || foreign=1
        done
        sleep 1
      done
      wait "$pid"
      grep -E "passed|failed|error|test_main" "$work/out" | cut -c1-150
      if [ "$foreign" = 0 ]; then
        .venv/bin/tokperf save-reference "$db" -d "$OUT"
        break
      fi
      echo "    another llama-server ran meanwhile: session discarded"
    done
  done
done
rm -rf "$work"
