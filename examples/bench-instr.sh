#!/usr/bin/env bash
# bench-instr: instructions per request of the gateway and of the no-logic
# floor (examples/bareproxy), counted by valgrind's callgrind while the
# perfkit load tool drives them at a fixed concurrency. Instruction counts
# do not depend on what else the machine is doing, so two commits can be
# compared on a noisy machine where latency and throughput cannot (the
# wall-clock matrix is `make bench-proxy`). GC and scheduler work are
# included; time spent waiting is not.
#
# Env: PERFKIT (required: the perf kit, see examples/perfkit.sh), OUT (work
# dir), D (seconds counted, default 10), C (concurrency, default 4), BIN_BW
# (a prebuilt gateway binary to measure instead of building this checkout),
# BENCH_MOCK_ADDR and BENCH_GW_ADDR (ports, so two checkouts can measure side
# by side).
set -euo pipefail
. "$(dirname "$0")/perfkit.sh"
need_perfkit bench-instr
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "bench-instr: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
OUT=${OUT:-$(mktemp -d)}
D=${D:-10}
C=${C:-4}
BIN=$OUT/bin
mkdir -p "$BIN"
(cd "$PERFKIT" && go build -o "$BIN/" ./...)
BW=${BIN_BW:-}
if [[ -z "$BW" ]]; then
  go build -o "$BIN/breakwater" ./cmd/breakwater
  BW=$BIN/breakwater
fi
go build -o "$BIN/bareproxy" ./examples/bareproxy
MOCK_ADDR=${BENCH_MOCK_ADDR:-127.0.0.1:9011}
GW_ADDR=${BENCH_GW_ADDR:-127.0.0.1:9012}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
"$BIN/mockupstream" -addr "$MOCK_ADDR" 2>/dev/null & pids+=($!)
served() { curl -fs "http://$MOCK_ADDR/_stats" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["chat"]+d["stream"])'; }

# measure LABEL MODEL [-stream] -- CMD...: one target under callgrind.
measure() {
  local label=$1 model=$2 stream=$3; shift 4
  # Each target keeps its profiles (callgrind_annotate $OUT/<label>-<json|stream>/cg.out.*.1).
  local kind=json; [[ -z "$stream" ]] || kind=stream
  local dir="$OUT/$label-$kind"
  rm -rf "$dir"; mkdir -p "$dir"
  # asyncpreemptoff: callgrind does not survive Go's preemption signals.
  # cpu.rdtscp=off: valgrind 3.19 cannot decode RDTSCP, which the runtime uses on AMD CPUs.
  GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off BENCH_GW_ADDR=$GW_ADDR BENCH_MOCK_ADDR=$MOCK_ADDR \
    valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out.%p" "$@" >"$OUT/$label.log" 2>&1 &
  local vg=$!
  for _ in $(seq 1 300); do
    curl -fs -o /dev/null -X POST "http://$GW_ADDR/v1/chat/completions" -d "{\"model\":\"$model\",\"messages\":[]}" 2>/dev/null && break
    sleep 0.2
  done
  "$BIN/load" -url "http://$GW_ADDR/v1/chat/completions" -model "$model" -c "$C" -d 3s $stream >/dev/null 2>&1 # warm-up
  callgrind_control -z "$vg" >/dev/null 2>&1
  local n0; n0=$(served)
  "$BIN/load" -url "http://$GW_ADDR/v1/chat/completions" -model "$model" -c "$C" -d "${D}s" $stream >/dev/null 2>&1
  local n1; n1=$(served)
  callgrind_control -d "$vg" >/dev/null 2>&1
  kill "$vg"; wait "$vg" 2>/dev/null || true
  local ir; ir=$(grep -h '^summary:' "$dir"/cg.out.*.1 | awk '{print $2}')
  printf '%-12s %-7s %8d requests %9d instructions/request\n' "$label" "${stream:-json}" $((n1 - n0)) $((ir / (n1 - n0)))
}

echo "instructions per request (callgrind, c$C, ${D}s counted; $(go version | cut -d' ' -f3))"
for s in "" -stream; do
  measure breakwater mock/gpt-4o-mini "$s" -- "$BW" serve -config examples/bench-proxy.yaml -log-level error
  measure bare-proxy gpt-4o-mini "$s" -- "$BIN/bareproxy" "$GW_ADDR" "$MOCK_ADDR"
done
