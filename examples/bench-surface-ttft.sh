#!/usr/bin/env bash
# bench-surface-ttft: time to first content of each client format (chat,
# Anthropic Messages, OpenAI Responses) through one gateway in front of the
# perfkit mock, added over the mock called directly (perfkit streamlat).
# The formats run interleaved, round after round, so a change in the
# machine's load touches all three alike; the summary gives each format's
# median over the rounds and the median of its per-round difference to chat.
#
# Env: PERFKIT (required: the perf kit, see examples/perfkit.sh), OUT (work
# dir), ROUNDS (default 8), N (streams per run, default 200).
set -euo pipefail
. "$(dirname "$0")/perfkit.sh"
need_perfkit bench-surface-ttft
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
ROUNDS=${ROUNDS:-8}
N=${N:-200}
BIN=$OUT/bin
mkdir -p "$BIN"
(cd "$PERFKIT" && go build -o "$BIN/" ./...)
go build -o "$BIN/breakwater" ./cmd/breakwater
MOCK=${BENCH_MOCK_ADDR:-127.0.0.1:9021}
GW=${BENCH_GW_ADDR:-127.0.0.1:9022}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
"$BIN/mockupstream" -addr "$MOCK" -chunks 20 -chunk-delay 2ms >/dev/null 2>&1 & pids+=($!)
BENCH_MOCK_ADDR=$MOCK BENCH_GW_ADDR=$GW "$BIN/breakwater" serve -config examples/bench-proxy.yaml -log-level error >/dev/null 2>&1 & pids+=($!)
for _ in $(seq 1 100); do curl -fs -o /dev/null "http://$GW/healthz" 2>/dev/null && break; sleep 0.1; done

for r in $(seq 1 "$ROUNDS"); do
  for f in "v1/chat/completions openai" "v1/messages anthropic" "v1/responses responses"; do
    set -- $f
    "$BIN/streamlat" -url "http://$GW/$1" -api "$2" -model mock/gpt-4o-mini \
      -direct "http://$MOCK/v1/chat/completions" -n "$N" -max-c 0 -json "$OUT/ttft.$r.$2.json" >/dev/null 2>&1
  done
done

python3 - "$OUT" <<'PY'
import glob, json, re, statistics, sys
out = sys.argv[1]
def find(o, k):
    if isinstance(o, dict):
        if k in o:
            return o[k]
        for v in o.values():
            x = find(v, k)
            if x is not None:
                return x
    return None
rows = {}
for f in glob.glob(out + "/ttft.*.json"):
    r, api = re.search(r"ttft\.(\d+)\.(\w+)\.json$", f).groups()
    rows.setdefault(api, {})[int(r)] = find(json.load(open(f)), "added_ttft_p50_us")
print(f"added time to first content, p50 (µs), {len(rows['openai'])} interleaved rounds")
print("| format | per round | median | median of (format - chat) per round |")
print("|---|---|---|---|")
for api, name in (("openai", "chat"), ("anthropic", "Messages"), ("responses", "Responses")):
    v = rows[api]
    d = "—" if api == "openai" else "%+d" % statistics.median(v[k] - rows["openai"][k] for k in v)
    print(f"| {name} | {' '.join(str(v[k]) for k in sorted(v))} | {statistics.median(v.values()):.0f} | {d} |")
PY
