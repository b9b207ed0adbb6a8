#!/usr/bin/env bash
# bench-proxy: measure the gateway's overhead with the perf kit (PERFKIT):
# the mock upstream measured directly, through the plain net/http floor
# (examples/bareproxy: Server + Transport, no logic; label "bare-proxy") and
# through the gateway, in one run, then the summarize table and benchgap's
# (examples/benchgap): the gateway against the floor, paired repetition by
# repetition, and the performance targets met or not. The three targets
# take turns level by level.
# Env: PERFKIT (required: the perf kit, see examples/perfkit.sh), LEVELS, REPS,
# D, WARM (passed to perfkit's bench.sh), MOCK_ARGS (e.g. "-chunk-delay 100ms"),
# BENCH_MOCK_ADDR, BENCH_GW_ADDR, OUT, RT (e.g. "chrt -r 20": run mock, gateway
# and load tool at real-time priority on a shared machine).
# BENCH_PG_URL (postgres://...): also run the matrix through a second gateway
# on that database (state store + request log on), label "breakwater-pg", so
# the table shows store/log on against the memory store in the same run.
# BARE_ADDR: where the floor listens (default 127.0.0.1:9003).
set -euo pipefail
. "$(dirname "$0")/perfkit.sh"
need_perfkit bench-proxy
cd "$(dirname "$0")/.."
export BENCH_MOCK_ADDR=${BENCH_MOCK_ADDR:-127.0.0.1:9001}
export BENCH_GW_ADDR=${BENCH_GW_ADDR:-127.0.0.1:9002}
RT=${RT:-}
OUT=${OUT:-$(mktemp -d)}
BIN=$OUT/bin
mkdir -p "$BIN"
(cd "$PERFKIT" && go build -o "$BIN/" ./...)
go build -o "$BIN/breakwater" ./cmd/breakwater
go build -o "$BIN/bareproxy" ./examples/bareproxy
go build -o "$BIN/benchgap" ./examples/benchgap
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
$RT "$BIN/mockupstream" -addr "$BENCH_MOCK_ADDR" ${MOCK_ARGS:-} & mock=$!; pids+=("$mock")
BARE_ADDR=${BARE_ADDR:-127.0.0.1:9003}
$RT "$BIN/bareproxy" "$BARE_ADDR" "$BENCH_MOCK_ADDR" & bare=$!; pids+=("$bare")
$RT "$BIN/breakwater" serve -config examples/bench-proxy.yaml -log-level error & gw=$!; pids+=("$gw")
wait_up() {
  for _ in $(seq 1 100); do
    curl -fs "http://$1/healthz" >/dev/null 2>&1 && curl -fs "http://$BENCH_MOCK_ADDR/_stats" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "bench-proxy: $1 did not come up" >&2; return 1
}
wait_up "$BENCH_GW_ADDR"
export LOAD="$BIN/load"
wait_bare() {
  for _ in $(seq 1 100); do
    curl -s -o /dev/null "http://$BARE_ADDR/" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "bench-proxy: the floor ($BARE_ADDR) did not come up" >&2; return 1
}
wait_bare
rm -f "$OUT/direct.jsonl" "$OUT/bare.jsonl" "$OUT/gateway.jsonl" "$OUT/gateway-pg.jsonl"
# Interleaved: each repetition of each level measures the three targets
# back to back, so a machine that slows down or speeds up during the run
# moves all three alike instead of whichever target ran in that stretch.
for rep in $(seq 1 "${REPS:-3}"); do
  for lvl in ${LEVELS:-c1 c50 r2000 r5000 sc1 sc50}; do
    REPS=1 LEVELS=$lvl $RT "$PERFKIT/bench.sh" direct "http://$BENCH_MOCK_ADDR/v1/chat/completions" gpt-4o-mini "$mock" "$OUT/direct.jsonl"
    REPS=1 LEVELS=$lvl $RT "$PERFKIT/bench.sh" bare-proxy "http://$BARE_ADDR/v1/chat/completions" gpt-4o-mini "$bare" "$OUT/bare.jsonl"
    REPS=1 LEVELS=$lvl $RT "$PERFKIT/bench.sh" breakwater "http://$BENCH_GW_ADDR/v1/chat/completions" mock/gpt-4o-mini "$gw" "$OUT/gateway.jsonl"
  done
done
files=("$OUT/direct.jsonl" "$OUT/bare.jsonl" "$OUT/gateway.jsonl")
if [[ -n "${BENCH_PG_URL:-}" ]]; then
  kill "$gw" 2>/dev/null || true
  BENCH_STORE_URL="$BENCH_PG_URL" $RT "$BIN/breakwater" serve -config examples/bench-proxy.yaml -log-level error & gwpg=$!; pids+=("$gwpg")
  wait_up "$BENCH_GW_ADDR"
  $RT "$PERFKIT/bench.sh" breakwater-pg "http://$BENCH_GW_ADDR/v1/chat/completions" mock/gpt-4o-mini "$gwpg" "$OUT/gateway-pg.jsonl"
  files+=("$OUT/gateway-pg.jsonl")
fi
echo
echo "results: ${files[*]}"
"$BIN/summarize" "${files[@]}"
echo
"$BIN/benchgap" "$OUT/bare.jsonl" "$OUT/gateway.jsonl"
