#!/usr/bin/env bash
# bench-ab: interleaved A/B of two gateway configs with perfkit's load tool,
# for a change whose effect is smaller than the drift between two matrix
# runs. Each round measures the mock directly, then through a fresh gateway
# on CONFIG_A, then on CONFIG_B, level by level, and prints one line each.
#
# usage: examples/bench-ab.sh CONFIG_A CONFIG_B
# env: PERFKIT (required: the perf kit, see examples/perfkit.sh), LEVELS
# (default "c1 r2000 sc1"), ROUNDS (3), D (seconds per run, 3), WARM (1),
# RT (e.g. "chrt -r 20"), BENCH_MOCK_ADDR, BENCH_GW_ADDR (the configs should
# listen on ${BENCH_GW_ADDR} and point at ${BENCH_MOCK_ADDR}, as
# examples/bench-proxy.yaml).
# Example: streams committed at the first event against at the first content:
#   sed 's/^  streamCommit:.*/  streamCommit: first-event/' examples/bench-proxy.yaml >/tmp/first.yaml
#   examples/bench-ab.sh /tmp/first.yaml examples/bench-proxy.yaml
set -euo pipefail
[[ $# -eq 2 ]] || { sed -n 2,15p "$0" >&2; exit 2; }
A=$(realpath "$1") B=$(realpath "$2")
. "$(dirname "$0")/perfkit.sh"
need_perfkit bench-ab
cd "$(dirname "$0")/.."
export BENCH_MOCK_ADDR=${BENCH_MOCK_ADDR:-127.0.0.1:9001}
export BENCH_GW_ADDR=${BENCH_GW_ADDR:-127.0.0.1:9002}
RT=${RT:-}
BIN=$(mktemp -d)
(cd "$PERFKIT" && go build -o "$BIN/" ./...)
go build -o "$BIN/breakwater" ./cmd/breakwater
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$BIN"; }
trap cleanup EXIT
$RT "$BIN/mockupstream" -addr "$BENCH_MOCK_ADDR" >/dev/null 2>&1 & mock=$!; pids+=("$mock")
up() {
  for _ in $(seq 1 100); do curl -fs "http://$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "bench-ab: $1 did not come up" >&2; return 1
}
up "$BENCH_MOCK_ADDR/_stats"
run() { # label url model pid level
  local args=(-url "$2" -model "$3" -d "${D:-3}s" -warmup "${WARM:-1}s" -json -watch "$4") l=$5
  if [[ $l == s* ]]; then args+=(-stream); l=${l#s}; fi
  case $l in c*) args+=(-c "${l#c}") ;; r*) args+=(-rps "${l#r}" -max-inflight "${MAXINFLIGHT:-1000}") ;; *) echo "bad level $5" >&2; exit 2 ;; esac
  $RT "$BIN/load" "${args[@]}" | python3 -c '
import json, sys
d = json.load(sys.stdin)
# what perfkit summarize reads: open loop from the actual send (not the
# schedule), streams to the first event
p50, p99 = (d["svc_p50_us"], d["svc_p99_us"]) if d.get("target_rps") else (d["p50_us"], d["p99_us"])
fe = " first-event %5d us" % d["ttfe_p50_us"] if d.get("stream") else ""
cpu = (d.get("procs") or [{}])[0].get("cpu_pct", 0)
print("%-7s %-6s p50 %6d us  p99 %6d us%s  %8.0f rps  err %d  cpu/req %5.0f us" % (sys.argv[1], sys.argv[2], p50, p99, fe, d["rps"], d["errors"], cpu * 1e4 / max(d["rps"], 1)))' "$1" "$5"
}
gateway() { # label config level
  $RT "$BIN/breakwater" serve -config "$2" -log-level error & local gw=$!
  up "$BENCH_GW_ADDR/healthz"
  run "$1" "http://$BENCH_GW_ADDR/v1/chat/completions" mock/gpt-4o-mini "$gw" "$3"
  kill "$gw"; wait "$gw" 2>/dev/null || true
}
for r in $(seq 1 "${ROUNDS:-3}"); do
  for lvl in ${LEVELS:-c1 r2000 sc1}; do
    run direct "http://$BENCH_MOCK_ADDR/v1/chat/completions" gpt-4o-mini "$mock" "$lvl"
    gateway A "$A" "$lvl"
    gateway B "$B" "$lvl"
  done
done
