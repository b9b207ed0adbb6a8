# perfkit.sh: sourced by the bench scripts that drive the perf kit.
#
# The perf kit is the load tool, mock upstream and bench.sh driver of the
# public gateway benchmark board On the Bench (onthebench.ai). It is not
# part of this repository: PERFKIT names a checkout of it (a Go module with
# bench.sh, load/ and mockupstream/).

# need_perfkit NAME: stops script NAME with a message saying what to set
# when PERFKIT does not name the perf kit; otherwise makes PERFKIT an
# absolute path (so a relative one means what the caller meant).
need_perfkit() {
  local name=$1
  if [[ -z "${PERFKIT:-}" ]]; then
    echo "$name: PERFKIT is not set. It names the perf kit (the load tool, mock upstream and bench.sh of the public gateway benchmark board onthebench.ai), which is not part of this repository; set PERFKIT=<path to its checkout>." >&2
    exit 2
  fi
  if [[ ! -f "$PERFKIT/go.mod" || ! -f "$PERFKIT/bench.sh" || ! -d "$PERFKIT/load" || ! -d "$PERFKIT/mockupstream" ]]; then
    echo "$name: PERFKIT=$PERFKIT is not the perf kit (want a directory with go.mod, bench.sh, load/ and mockupstream/: the load tool and mock upstream of the public gateway benchmark board onthebench.ai); set PERFKIT=<path to its checkout>." >&2
    exit 2
  fi
  PERFKIT=$(cd "$PERFKIT" && pwd)
}
