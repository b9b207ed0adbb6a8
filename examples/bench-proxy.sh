#!/usr/bin/env bash
# bench-proxy: measure the gateway's overhead with the shared perfkit: the
# mock upstream measured directly and through the gateway, in one run, then
# the summarize table. Env: PERFKIT (default ../shared/perfkit), LEVELS, REPS,
# D, WARM (passed to perfkit's bench.sh), MOCK_ARGS (e.g. "-chunk-delay 100ms"),
# BENCH_MOCK_ADDR, BENCH_GW_ADDR, OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
PERFKIT=${PERFKIT:-../shared/perfkit}
export BENCH_MOCK_ADDR=${BENCH_MOCK_ADDR:-127.0.0.1:9001}
export BENCH_GW_ADDR=${BENCH_GW_ADDR:-127.0.0.1:9002}
OUT=${OUT:-$(mktemp -d)}
BIN=$OUT/bin
mkdir -p "$BIN"
(cd "$PERFKIT" && go build -o "$BIN/" ./...)
go build -o "$BIN/breakwater" ./cmd/breakwater
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
"$BIN/mockupstream" -addr "$BENCH_MOCK_ADDR" ${MOCK_ARGS:-} & mock=$!; pids+=("$mock")
"$BIN/breakwater" serve -config examples/bench-proxy.yaml -log-level error & gw=$!; pids+=("$gw")
for _ in $(seq 1 100); do
  curl -fs "http://$BENCH_GW_ADDR/healthz" >/dev/null 2>&1 && curl -fs "http://$BENCH_MOCK_ADDR/_stats" >/dev/null 2>&1 && break
  sleep 0.1
done
export LOAD="$BIN/load"
rm -f "$OUT/direct.jsonl" "$OUT/gateway.jsonl"
"$PERFKIT/bench.sh" direct "http://$BENCH_MOCK_ADDR/v1/chat/completions" gpt-4o-mini "$mock" "$OUT/direct.jsonl"
"$PERFKIT/bench.sh" breakwater "http://$BENCH_GW_ADDR/v1/chat/completions" mock/gpt-4o-mini "$gw" "$OUT/gateway.jsonl"
echo
echo "results: $OUT/direct.jsonl $OUT/gateway.jsonl"
"$BIN/summarize" "$OUT/direct.jsonl" "$OUT/gateway.jsonl"
