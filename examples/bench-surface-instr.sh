#!/usr/bin/env bash
# bench-surface-instr: instructions per streamed request for each client
# format (chat completions, Anthropic Messages, OpenAI Responses) through
# the same gateway and in-process upstream (BenchmarkSurfaceFirstContent,
# proxy/surface_bench_test.go), counted by valgrind's callgrind, and what
# the Messages and Responses translation adds over chat. Each format runs
# at two lengths (N1 and N2 streams): the difference divided by N2-N1 is
# the cost of one stream, whatever the setup costs. Client, gateway and
# upstream share the process, so the figure is the whole exchange; the
# formats differ only in the gateway's work. Instruction counts do not
# depend on what else the machine is doing.
#
# Env: N1, N2 (default 200, 1200), OUT (work dir), BIN (a prebuilt
# `go test -c ./proxy` binary to measure instead of building this
# checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "bench-surface-instr: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
N1=${N1:-200}
N2=${N2:-1200}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
BIN=${BIN:-}
if [[ -z "$BIN" ]]; then
  go test -c -o "$OUT/proxy.test" ./proxy
  BIN=$OUT/proxy.test
fi
BIN=$(realpath "$BIN")
OUT=$(realpath "$OUT")
cd proxy
declare -A per
for s in chat messages responses; do
  ir=()
  for n in "$N1" "$N2"; do
    # GOMAXPROCS=1: no idle Ps spinning for work, which callgrind would count.
    # asyncpreemptoff: callgrind does not survive Go's preemption signals.
    # cpu.rdtscp=off: valgrind 3.19 cannot decode RDTSCP, which the runtime uses on AMD CPUs.
    GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind \
      --callgrind-out-file="$OUT/cg.$s.$n" "$BIN" -test.run '^$' \
      -test.bench "SurfaceFirstContent/$s\$" -test.benchtime "${n}x" >"$OUT/$s.$n.log" 2>&1
    ir+=("$(grep -h '^summary:' "$OUT/cg.$s.$n" | awk '{print $2}')")
  done
  per[$s]=$(((ir[1] - ir[0]) / (N2 - N1)))
done
echo "instructions per streamed request (callgrind, streams $N1 -> $N2; $(go version | cut -d' ' -f3))"
for s in chat messages responses; do
  printf '%-10s %9d  %+8d over chat\n' "$s" "${per[$s]}" $((per[$s] - per[chat]))
done
