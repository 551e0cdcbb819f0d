#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang + ASan + UBSan and runs each for N seconds.
#   scripts/fuzz.sh [--seconds N] [--runs R] [--procs P] [--build-dir DIR] [--jobs J] [TARGET...]
# TARGET: png jpeg still safetensors gguf torch tokenize cli tar video (default: all of them; still only
# when the build has FFmpeg, video only when it has the video stage, i.e. libav* and the encoder). Each target starts from its
# committed seed corpus fuzz/corpus/<target>/ plus the inputs earlier runs found (kept in
# DIR/corpus/<target>/, never committed). Exits non-zero when any target crashes, leaks, times
# out (one input over FUZZ_TIMEOUT s, default 10) or exceeds 2 GiB; the input that did it is saved as
# fuzz/crashes/<target>-<kind>-<sha1> and the command to reproduce it is printed. A summary
# (executions, executions/s, corpus size, result per target) is printed at the end and written
# to DIR/fuzz-summary.tsv. Extra libFuzzer flags: FUZZ_FLAGS="-max_len=4096 ...". The per-input
# timeout is wall-clock: on a machine shared with other work, or under nice, raise it
# (FUZZ_TIMEOUT=60) or a starved process reads as a hang. FUZZ_NO_BUILD=1 runs the binaries as
# they are, without building. Per-target defaults (before FUZZ_FLAGS, which override them):
# gguf -max_len=8192 (fuzz/README.md says why).
# Long runs: --runs R stops each process after R executions (with --seconds too, whichever comes
# first; without it, no time limit), and --procs P runs P processes per target at once, each
# with its own seed, sharing the target's corpus (libFuzzer reloads it). 10 M executions of one
# target on two cores: `nice -n 19 scripts/fuzz.sh --runs 5000000 --procs 2 TARGET`
# (FUZZ_TIMEOUT=60 beside other work). The summary sums the processes' executions; its seconds
# are the wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

seconds=
runs=
procs=1
build_dir=build-fuzz
jobs=$(nproc)
targets=()
all_targets=(png jpeg still safetensors gguf torch tokenize cli tar video model)
usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }
while [ "$#" -gt 0 ]; do
  case "$1" in
    --seconds) seconds=${2:?--seconds needs a number}; shift 2 ;;
    --seconds=*) seconds=${1#*=}; shift ;;
    --runs) runs=${2:?--runs needs a number}; shift 2 ;;
    --runs=*) runs=${1#*=}; shift ;;
    --procs) procs=${2:?--procs needs a number}; shift 2 ;;
    --procs=*) procs=${1#*=}; shift ;;
    --build-dir) build_dir=${2:?}; shift 2 ;;
    --jobs) jobs=${2:?}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "fuzz.sh: error: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
positive() { [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge 1 ] || { echo "fuzz.sh: error: $1 must be a positive integer" >&2; exit 2; }; }
[ -n "$seconds" ] || [ -n "$runs" ] || seconds=30
[ -z "$seconds" ] || positive --seconds "$seconds"
[ -z "$runs" ] || positive --runs "$runs"
positive --procs "$procs"
explicit=${#targets[@]}
[ "$explicit" -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "fuzz.sh: error: unknown target '$t' (${all_targets[*]})" >&2; exit 2; }
done

bash scripts/install-deps.sh fuzz

cc=$(command -v clang-14 || command -v clang); cxx=$(command -v clang++-14 || command -v clang++)
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  export CCACHE_DEPEND=${CCACHE_DEPEND:-1}  # no preprocessor pass on a cold cache (scripts/build.sh)
fi
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  # No Vulkan: no fuzz target reaches it, and lavapipe under ASan would only slow every run.
  cmake -S . -B "$build_dir" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DFOVEA_FUZZ=ON \
    -DFOVEA_BUILD_TESTS=OFF -DFOVEA_BUILD_BENCH=OFF -DFOVEA_DEBUG_INFO=lines -DCMAKE_DISABLE_FIND_PACKAGE_Vulkan=TRUE
fi
# A build folder configured elsewhere (scripts/sanitize.sh asan configures build-asan with
# FOVEA_FUZZ too, so CI builds the library once for the suite and the fuzzers) must have them.
grep -q '^FOVEA_FUZZ:BOOL=ON' "$build_dir/CMakeCache.txt" || {
  echo "fuzz.sh: error: $build_dir was not configured with -DFOVEA_FUZZ=ON" >&2; exit 2; }
# Targets this build has (fuzz_video needs the video stage): a missing one is an error only when asked for.
available=$(cmake --build "$build_dir" --target help 2>/dev/null | grep -o 'fuzz_[a-z]*' | sort -u || true)
kept=()
for t in "${targets[@]}"; do
  if grep -qx "fuzz_$t" <<<"$available"; then
    kept+=("$t")
  elif [ "$explicit" -gt 0 ]; then
    echo "fuzz.sh: error: this build has no fuzz_$t (still needs FFmpeg, video the video stage: libav* and the encoder)" >&2; exit 2
  else
    echo "fuzz.sh: note: fuzz_$t is not in this build, skipped"
  fi
done
targets=("${kept[@]}")
# FUZZ_NO_BUILD=1: run the binaries as built (e.g. while another build runs in the same folder).
[ "${FUZZ_NO_BUILD:-0}" = 1 ] || cmake --build "$build_dir" -j "$jobs" --target "${targets[@]/#/fuzz_}"
for t in "${targets[@]}"; do
  [ -x "$build_dir/fuzz/fuzz_$t" ] || { echo "fuzz.sh: error: $build_dir/fuzz/fuzz_$t is not built (FUZZ_NO_BUILD=1?)" >&2; exit 2; }
done

# Per-target libFuzzer defaults; FUZZ_FLAGS comes after them on the command line and wins.
target_flags() {
  case "$1" in
    # The seeds' tensor data is decoded element by element; 8 KiB holds a whole header of the
    # mmproj fixtures (3 KiB) plus the compact seeds' data, and every size check (a 4096-byte
    # tensor name included) is reachable below it.
    gguf) echo "-max_len=8192" ;;
    # Whole checkpoints: the seeds are small towers (100-550 KB) with their configs.
    model) echo "-max_len=1048576" ;;
  esac
}

mkdir -p fuzz/crashes
summary="$build_dir/fuzz-summary.tsv"
printf 'target\tseconds\texecutions\texec_per_s\tcorpus_inputs\tresult\n' > "$summary"
failed=0
for t in "${targets[@]}"; do
  corpus="$build_dir/corpus/$t"
  mkdir -p "$corpus"
  log="$build_dir/fuzz-$t.log"  # process i > 1 logs to fuzz-$t.$i.log
  limits=()
  [ -z "$seconds" ] || limits+=("-max_total_time=$seconds")
  [ -z "$runs" ] || limits+=("-runs=$runs")
  echo "fuzz.sh: $t for ${seconds:+${seconds}s}${seconds:+${runs:+ or }}${runs:+$runs executions}$([ "$procs" = 1 ] || echo " x $procs processes") (log: $log)"
  logs=()
  pids=()
  start=$(date +%s)
  for i in $(seq 1 "$procs"); do
    l=$log
    [ "$i" = 1 ] || l="$build_dir/fuzz-$t.$i.log"
    logs+=("$l")
    # -timeout: one input over 10 s is a hang. -rss_limit_mb: a parser that balloons is a finding.
    # ASan's leak check runs at exit and on every input that looked leaky (-detect_leaks=1).
    # shellcheck disable=SC2086,SC2046
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
      "$build_dir/fuzz/fuzz_$t" "$corpus" "fuzz/corpus/$t" "${limits[@]}" \
        -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 -detect_leaks=1 \
        -artifact_prefix="fuzz/crashes/$t-" -print_final_stats=1 $(target_flags "$t") ${FUZZ_FLAGS:-} > "$l" 2>&1 &
    pids+=($!)
  done
  # The first process to fail stops the others (interrupted: not findings of their own).
  declare -A rc_of=()
  stopped=0
  pending=("${pids[@]}")
  while [ "${#pending[@]}" -gt 0 ]; do
    set +e
    wait -n -p done_pid "${pending[@]}"
    rc=$?
    set -e
    rc_of[$done_pid]=$rc
    left=()
    for pid in "${pending[@]}"; do [ "$pid" = "$done_pid" ] || left+=("$pid"); done
    pending=("${left[@]}")
    if [ "$rc" != 0 ] && [ "$stopped" = 0 ]; then
      stopped=1
      for pid in "${pending[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
    fi
  done
  elapsed=$(( $(date +%s) - start ))
  execs=0
  rate=0
  result=ok
  for i in "${!logs[@]}"; do
    l=${logs[$i]}
    e=$(sed -n 's/^stat::number_of_executed_units: *//p' "$l" | tail -1)
    r=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$l" | tail -1)
    execs=$((execs + ${e:-0}))
    rate=$((rate + ${r:-0}))
    rc=${rc_of[${pids[$i]}]}
    [ "$rc" = 0 ] && continue
    grep -q 'libFuzzer: run interrupted' "$l" && [ "$stopped" = 1 ] && [ "$rc" = 72 ] && continue  # stopped by us
    failed=1
    result="FAILED (exit $rc)"
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$l" | tail -1)
    grep -m3 -E '^==[0-9]+==ERROR|SUMMARY:|runtime error:|fuzz: ' "$l" | sed "s/^/fuzz.sh: $t: /" >&2 || true
    if [ -n "$artifact" ]; then
      echo "fuzz.sh: $t: reproducer saved as $artifact; rerun: $build_dir/fuzz/fuzz_$t $artifact" >&2
    else
      tail -20 "$l" >&2
    fi
  done
  inputs=$(find "$corpus" -type f | wc -l)
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$elapsed" "$execs" "$rate" "$inputs" "$result" >> "$summary"
done
column -t -s $'\t' "$summary" 2>/dev/null || cat "$summary"
[ "$failed" = 0 ] || { echo "fuzz.sh: error: at least one target failed (reproducers in fuzz/crashes/)" >&2; exit 1; }
