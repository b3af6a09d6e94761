#!/usr/bin/env bash
# Runs inside the Soft-RoCE guest (tools/rxe-vm), started by verbs_bench.sh:
# perftest (ib_write_lat, ib_write_bw) and call_bench over rxe0 in one boot,
# then one table of naarpc vs. the fabric.
#
# Usage: guest_bench.sh CALL_BENCH [--sizes "N..."] [--bw-sizes "N..."]
#            [--placement same|split|both] [--min-time S] [--no-diagnose]
#            [--lat-rounds N] [--blocks N]
set -uo pipefail

call_bench="$1"; shift
addr="${NAARPC_TEST_ADDRESS:?set by rxe-vm}"
sizes="64 4096 65536 1048576 4194304 16777216 67108864"
bw_sizes="1048576 4194304 16777216 67108864"
placement=both
min_time=0.3
diagnose=1
lat_round_count=5
blocks=20
while (($#)); do
  case "$1" in
    --sizes) sizes="$2"; shift 2 ;;
    --bw-sizes) bw_sizes="$2"; shift 2 ;;
    --placement) placement="$2"; shift 2 ;;
    --min-time) min_time="$2"; shift 2 ;;
    --no-diagnose) diagnose=0; shift ;;
    --lat-rounds) lat_round_count="$2"; shift 2 ;;
    --blocks) blocks="$2"; shift 2 ;;
    *) echo "guest_bench: unknown option '$1'" >&2; exit 2 ;;
  esac
done

logs=/tmp/verbs_bench  # guest tmpfs
mkdir -p "$logs"
t_start=$(date +%s.%N)
section() {
  printf '\n===== %s [t=%ss] =====\n' "$*" \
    "$(awk -v s="$t_start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.0f", e - s }')"
}
failed=0
next_port=18600

# perf NAME SERVER_CPU CLIENT_CPU TOOL ARGS...: perftest server (background)
# and client over rdma_cm (-R) on rxe0, each pinned; the client's output goes
# to $logs/NAME (and stdout).
perf() {
  local name="$1" scpu="$2" ccpu="$3" tool="$4"; shift 4
  local port=$((next_port++)) rc=0
  timeout 200 taskset -c "$scpu" "$tool" -d rxe0 -R -p "$port" "$@" >"$logs/$name.server" 2>&1 &
  local server=$!
  sleep 1
  timeout 180 taskset -c "$ccpu" "$tool" -d rxe0 -R -p "$port" "$@" "$addr" \
    >"$logs/$name" 2>&1 || rc=$?
  # A client that died (perftest crashes now and then in the emulated CPU)
  # leaves its server waiting for a peer: stop it rather than hang.
  if ((rc != 0)); then kill "$server" 2>/dev/null; fi
  wait "$server" || rc=$?
  cat "$logs/$name"
  if ((rc != 0)); then
    echo "perftest run $name failed (exit $rc); server log:"; cat "$logs/$name.server"
  fi
  return "$rc"
}

# The data line of a perftest report whose first field is SIZE; prints field F.
perf_field() {  # perf_field LOG SIZE F
  awk -v s="$2" -v f="$3" '$1 == s && $2 ~ /^[0-9]+$/ && $f ~ /^[0-9.]+$/ { v = $f } END { if (v != "") print v }' "$1"
}

# cb NAME ARGS...: call_bench over verbs; output to $logs/NAME (and stdout).
cb() {
  local name="$1"; shift
  local rc=0
  timeout 300 "$call_bench" --transport=verbs --address="$addr" --machine "$@" \
    >"$logs/$name" 2>&1 || rc=$?
  cat "$logs/$name"
  if ((rc != 0)); then echo "FAILED: $name (exit $rc)"; failed=1; fi
  return 0
}

# cb_field LOG PLACEMENT BYTES KEY: a value from call_bench's "result" lines.
cb_field() {
  awk -v p="placement=$2" -v b="bytes=$3" -v k="$4" '
    $1 == "result" && $2 == p && $4 == b {
      for (i = 5; i <= NF; ++i) { split($i, kv, "="); if (kv[1] == k) v = kv[2] }
    } END { if (v != "") print v }' "$1"
}
# blocks_field LOG PLACEMENT BYTES KEY: a value from call_bench's "blocks"
# lines (--blocks); pair_ratios comes one per line.
blocks_field() {
  awk -v p="placement=$2" -v b="bytes=$3" -v k="$4" '
    $1 == "blocks" && $2 == p && $3 == b {
      for (i = 4; i <= NF; ++i) {
        split($i, kv, "=")
        if (kv[1] == k) {
          n = split(kv[2], a, ",")
          for (j = 1; j <= n; ++j) if (a[j] ~ /^[0-9.]+$/) print a[j]
        }
      }
    }' "$1"
}

section "guest"
echo "kernel $(uname -r), $(nproc) vCPUs, $(awk '/MemTotal/ {print $2/1024 " MiB"}' /proc/meminfo)"
rdma link
[[ -e /sys/class/infiniband/rxe0 ]] || { echo "rxe0 missing"; exit 1; }

# The fabric: perftest pinned like call_bench's split placement (server =
# NAA on CPU 1, client = host on CPU 0). ib_write_lat busy-polls on both sides.
# perftest derives its clock from a calibration that fails now and then in
# the emulated CPU ("Correlation coefficient r^2 < 0.9", then "inf"), and its
# client has been seen to crash there (SIGSEGV): such a run is repeated (up
# to 3 times).
lat_run() {  # lat_run NAME SERVER_CPU CLIENT_CPU TOOL ARGS...
  local name="$1"; shift
  for try in 1 2 3; do
    perf "$name" "$@" && [[ -n "$(perf_field "$logs/$name" 64 5)" ]] && return 0
    echo "(no usable latency figure; run $try of 3)"
  done
  echo "FAILED: $name: no usable latency figure in 3 runs"; failed=1
}
# Warm-up, not measured: the emulated CPU translates code on its first use
# (guest kernel's rxe paths, perftest, naarpc), and the first runs in a boot
# come out ~25% slower. Both sides get one short run.
section "warm-up (not measured)"
perf warm_lat 1 0 ib_write_lat -s 64 -n 1000 >/dev/null || true
cb warm_cb --placement=split --sizes 64 4096 --iterations 500 --min-time 0.1 --baseline=transport \
  >/dev/null
echo "done"

# The latency headline: rounds of (ib_write_lat, naarpc 64 B split),
# interleaved so that a slow phase of the shared host hits both sides alike;
# each side's figure is the median of its rounds. Within each call_bench
# run, naarpc and the raw verbs transport alternate in $blocks pairs of
# short blocks (call_bench --blocks: 100 calls each, ABBA order, both
# connections open): the engine's own cost is the median of all rounds'
# ratios of the pairs whose two blocks were fast; the slow blocks of each
# side are counted beside it.
lat_rounds="$(seq 1 "$lat_round_count")"
for round in $lat_rounds; do
  section "latency round $round: ib_write_lat 64 B (server CPU 1, client CPU 0)"
  lat_run "lat_split_$round" 1 0 ib_write_lat -s 64 -n 2000
  section "latency round $round: call_bench 64 B, split, $blocks pairs of blocks"
  cb "lat_cb_$round" --placement=split --sizes 64 --blocks "$blocks"
done
placements=()
case "$placement" in
  both) placements=(split same) ;;
  *) placements=("$placement") ;;
esac
# Throughput: per size, three interleaved rounds of (ib_write_bw, naarpc on
# each placement), so that a slow phase of the shared host (runs of either
# side vary by 10-30% between phases) hits both sides alike; each side's
# figure is the best of its rounds (the fabric's best against naarpc's best).
bw_rounds="1 2 3"
for s in $bw_sizes; do
  # ~256 MiB per ib_write_bw run (at least 5 writes, perftest's minimum).
  n=$(( (256 << 20) / s )); ((n < 5)) && n=5
  for round in $bw_rounds; do
    section "throughput round $round: ib_write_bw $s B x $n (server CPU 1, client CPU 0)"
    perf "bw_${s}_$round" 1 0 ib_write_bw -s "$s" -n "$n" || true
    for p in "${placements[@]}"; do
      section "throughput round $round: call_bench $s B, $p"
      cb "tp_${p}_${s}_$round" --placement="$p" --min-time="$min_time" --sizes "$s" --baseline=none
    done
  done
  best="$(for r in $bw_rounds; do perf_field "$logs/bw_${s}_$r" "$s" 4; done | sort -g | tail -1)"
  [[ -n "$best" ]] || { echo "FAILED: ib_write_bw at $s B: no figure in any round"; failed=1; }
  echo "best ib_write_bw at $s B: ${best:-n/a} MiB/s"
  echo "$best" > "$logs/bw_$s.best"
done

# The other sizes, with the raw verbs transport alongside (naarpc / raw).
other_sizes=""
for s in $sizes; do [[ " $bw_sizes " == *" $s "* ]] || other_sizes+=" $s"; done
if [[ -n "$other_sizes" ]]; then
  for p in "${placements[@]}"; do
    section "call_bench --placement=$p, sizes$other_sizes"
    # shellcheck disable=SC2086
    cb "cb_$p" --placement="$p" --min-time="$min_time" --sizes $other_sizes
  done
fi

# What the 64 B round trip is made of (split placement): the verbs
# transport's CQ busy-poll budget (VerbsOptions::poll_spin, default 200 us) on
# both sides (100000 = busy-poll throughout, like perftest), the spec
# dialect's metadata write if repeated every call (default: first call only), and the fabric
# with a receive completion per message (ib_send_lat: the responder consumes
# a receive WQE and polls its CQ, as a WRITE_WITH_IMM does).
spins="0 50 200 1000 100000"
if ((diagnose)); then
  for sp in $spins; do
    section "diagnosis: call_bench 64 B, split, poll_spin=${sp}us"
    cb "diag_spin_$sp" --placement=split --sizes 64 --iterations 1000 --min-time 0.2 \
      --poll-spin-us "$sp"
  done
  for sp in 200 100000; do
    section "diagnosis: call_bench 64 B, split, reference dialect, poll_spin=${sp}us"
    cb "diag_ref_$sp" --placement=split --sizes 64 --iterations 1000 --min-time 0.2 \
      --dialect=reference --poll-spin-us "$sp"
  done
  for sp in 200 100000; do
    section "diagnosis: call_bench 64 B, split, spec dialect, metadata every call, poll_spin=${sp}us"
    cb "diag_every_$sp" --placement=split --sizes 64 --iterations 1000 --min-time 0.2 \
      --metadata-every-call --poll-spin-us "$sp"
  done
  section "diagnosis: call_bench 64 B, split, timed with steady_clock"
  cb diag_steady --placement=split --sizes 64 --iterations 1000 --min-time 0.2 --timer=steady
  section "diagnosis: ib_send_lat 64 B (server CPU 1, client CPU 0)"
  lat_run send_lat 1 0 ib_send_lat -s 64 -n 2000
  # How a 1 MiB call waits for the other side's transfer (~15 ms each way):
  # sleeping after the 200 us spin, the predictive wake (VerbsOptions::
  # predictive_wake; off by default), or spinning throughout. Interleaved rounds.
  if [[ " $bw_sizes " == *" 1048576 "* ]]; then
    for round in 1 2; do
      for w in off on spin; do
        case "$w" in
          off) wargs=(--predictive-wake=0) ;;
          on) wargs=(--predictive-wake=1) ;;
          spin) wargs=(--predictive-wake=0 --poll-spin-us 20000) ;;
        esac
        section "diagnosis: call_bench 1 MiB, split, wait: $w, round $round"
        cb "diag_mib_${w}_$round" --placement=split --sizes 1048576 --iterations 100 \
          --min-time 0.2 --baseline=none "${wargs[@]}"
      done
    done
  fi
fi

# ------------------------------------------------------------------ table ---
section "summary"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "n/a"; else printf "%.2f\n", a / b }'; }
verdict() {  # verdict RATIO OP TARGET
  awk -v r="$1" -v op="$2" -v t="$3" 'BEGIN {
    if (r == "n/a") { print "n/a"; exit }
    ok = (op == "<=") ? (r + 0 <= t + 0) : (r + 0 >= t + 0)
    print ok ? "ok" : "MISS" }'
}
fmt() { if [[ -n "$1" ]]; then printf '%.1f' "$1"; else echo "n/a"; fi; }

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
lat_typ="$(for r in $lat_rounds; do perf_field "$logs/lat_split_$r" 64 5; done | median)"
fabric_rtt="$(awk -v t="$lat_typ" 'BEGIN { if (t != "") printf "%.3f", 2 * t }')"
lat_naarpc="$(for r in $lat_rounds; do cb_field "$logs/lat_cb_$r" split 64 naarpc_median_us; done | median)"
lat_raw="$(for r in $lat_rounds; do cb_field "$logs/lat_cb_$r" split 64 raw_median_us; done | median)"
# The engine's own cost: the median of every round's fast pairs' ratios
# (and of all pairs', for information).
engine_cost="$(for r in $lat_rounds; do blocks_field "$logs/lat_cb_$r" split 64 fast_pair_ratios; done | median)"
engine_pairs="$(for r in $lat_rounds; do blocks_field "$logs/lat_cb_$r" split 64 fast_pair_ratios; done | wc -l)"
all_pairs_cost="$(for r in $lat_rounds; do blocks_field "$logs/lat_cb_$r" split 64 pair_ratios; done | median)"
all_pairs="$(for r in $lat_rounds; do blocks_field "$logs/lat_cb_$r" split 64 pair_ratios; done | wc -l)"
slow_naarpc="$(for r in $lat_rounds; do blocks_field "$logs/lat_cb_$r" split 64 slow_blocks_naarpc; done |
               awk '{ s += $1 } END { print s + 0 }')"
slow_raw="$(for r in $lat_rounds; do blocks_field "$logs/lat_cb_$r" split 64 slow_blocks_raw; done |
            awk '{ s += $1 } END { print s + 0 }')"
echo "naarpc vs. perftest over Soft-RoCE: rxe0 at $addr, loopback, one guest boot"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), guest kernel $(uname -r), $(nproc) vCPUs (QEMU TCG)"
echo
echo "Latency, 64 B (median round trips, us):"
echo "  fabric RTT = 2 x ib_write_lat t_typical (median of 5 rounds: ${lat_typ:-n/a} us): $(fmt "$fabric_rtt") us"
printf '  %-34s %10s %8s %8s  %s\n' "" "us" "ratio" "target" ""
for p in "${placements[@]}"; do
  v="$(cb_field "$logs/cb_$p" "$p" 64 naarpc_median_us)"
  [[ "$p" == split ]] && v="$lat_naarpc"  # median of the 5 interleaved rounds
  r="$(ratio "$v" "$fabric_rtt")"
  note=""; [[ "$p" == same ]] && note="(same vCPU; perftest above is split)"
  printf '  %-34s %10s %7sx %8s  %s %s\n' "naarpc 64 B call, $p CPUs" "$(fmt "$v")" "$r" \
    "<= 1.5x" "$(verdict "$r" "<=" 1.5)" "$note"
done
# The same run's engine-less baseline: our verbs transport alone, one
# WRITE_WITH_IMM each way (bench/transport_pingpong.h).
printf '  %-34s %10s %7sx   (naarpc / raw transport, medians: %sx)\n' \
  "raw verbs transport, split CPUs" "$(fmt "$lat_raw")" "$(ratio "$lat_raw" "$fabric_rtt")" \
  "$(ratio "$lat_naarpc" "$lat_raw")"
engine_fmt="$(awk -v r="$engine_cost" 'BEGIN { if (r != "") printf "%.2f", r; else print "n/a" }')"
printf '  %-34s %10s %7sx %8s  %s\n' "engine's own cost (naarpc / raw)" "" "$engine_fmt" \
  "<= 1.2x" "$(verdict "$engine_fmt" "<=" 1.2)"
# Per round, over all blocks' calls: the ratios of the 10th percentiles
# (calls no descheduling touched) and of the means (every slow call counts).
p10_ratio="$(for r in $lat_rounds; do
  ratio "$(cb_field "$logs/lat_cb_$r" split 64 naarpc_p10_p90_p99_us | cut -d/ -f1)" \
        "$(cb_field "$logs/lat_cb_$r" split 64 raw_p10_p90_p99_us | cut -d/ -f1)"
done | grep -v n/a | median)"
mean_ratio="$(for r in $lat_rounds; do
  ratio "$(cb_field "$logs/lat_cb_$r" split 64 naarpc_mean_us)" "$(cb_field "$logs/lat_cb_$r" split 64 raw_mean_us)"
done | grep -v n/a | median)"
echo "  (median of the ratios of block medians of $engine_pairs fast pairs of $all_pairs;"
echo "   all pairs: $(ratio "$all_pairs_cost" 1)x; slow blocks naarpc/raw: $slow_naarpc/$slow_raw;"
echo "   median over rounds of the p10 ratio: ${p10_ratio:-n/a}x, of the mean ratio: ${mean_ratio:-n/a}x)"
rounds_text=""
for r in $lat_rounds; do
  t="$(perf_field "$logs/lat_split_$r" 64 5)"
  n="$(cb_field "$logs/lat_cb_$r" split 64 naarpc_median_us)"
  w="$(cb_field "$logs/lat_cb_$r" split 64 raw_median_us)"
  q="$(blocks_field "$logs/lat_cb_$r" split 64 fast_pair_ratios | median)"
  k="$(blocks_field "$logs/lat_cb_$r" split 64 fast_pairs)"
  rounds_text+=" $(fmt "$n")/$(fmt "$w")/$(awk -v t="$t" 'BEGIN { if (t != "") printf "%.1f", 2 * t; else print "n/a" }')"
  rounds_text+="($(awk -v q="$q" 'BEGIN { if (q != "") printf "%.2f", q; else print "n/a" }') of ${k:-0})"
done
echo "  (rounds, naarpc/raw/fabric us (fast pairs' ratio median of how many):$rounds_text)"
echo
echo "Throughput, MB/s (10^6 B/s). naarpc = 2N / median call round trip (a call"
echo "moves N bytes host->NAA, then N bytes NAA->host, one after the other);"
echo "ib_write_bw = its one-way average (MiB/s converted), N-byte writes streamed"
echo "one way with up to 128 in flight. Three interleaved rounds per size; each"
echo "side's best round counts. Ratio = naarpc / ib_write_bw."
mbs() { awk -v s="$1" -v u="$2" 'BEGIN { if (u != "" && u + 0 > 0) printf "%.3f", 2 * s / u }'; }
mib_to_mb() { awk -v m="$1" 'BEGIN { if (m != "") printf "%.3f", m * 1.048576 }'; }
hdr=$(printf '  %-8s %12s' "size" "ib_write_bw")
for p in "${placements[@]}"; do hdr+=$(printf ' %13s %7s %6s' "naarpc $p" "ratio" ""); done
echo "$hdr"
rounds_text=""
for s in $bw_sizes; do
  bw="$(mib_to_mb "$(cat "$logs/bw_$s.best" 2>/dev/null)")"
  label="$((s >> 20)) MiB"
  line=$(printf '  %-8s %12s' "$label" "$(fmt "$bw")")
  for p in "${placements[@]}"; do
    us="$(for r in $bw_rounds; do cb_field "$logs/tp_${p}_${s}_$r" "$p" "$s" naarpc_median_us; done |
          sort -g | head -1)"
    nb="$(mbs "$s" "$us")"
    r="$(ratio "$nb" "$bw")"
    line+=$(printf ' %13s %6sx %6s' "$(fmt "$nb")" "$r" "$(verdict "$r" ">=" 0.95)")
  done
  echo "$line"
  rounds_text+="  $label:"
  for r in $bw_rounds; do
    f="$(mib_to_mb "$(perf_field "$logs/bw_${s}_$r" "$s" 4)")"
    n="$(mbs "$s" "$(cb_field "$logs/tp_${placements[0]}_${s}_$r" "${placements[0]}" "$s" naarpc_median_us)")"
    rounds_text+=" $(fmt "$f")/$(fmt "$n")"
  done
  rounds_text+=$'\n'
done
echo "  (rounds, ib_write_bw/naarpc ${placements[0]} MB/s:"
printf '%s' "$rounds_text" | sed 's/^/   /'
echo "  )"
echo "  (targets: latency ratio <= 1.5x, throughput ratio >= 0.95x)"

if ((diagnose)); then
  echo
  echo "Diagnosis, 64 B round trip, split CPUs (median us; ratio to the fabric RTT):"
  diag() {  # diag LABEL LOG
    local v; v="$(cb_field "$2" split 64 naarpc_median_us)"
    printf '  %-52s %8s us  %6sx\n' "$1" "$(fmt "$v")" "$(ratio "$v" "$fabric_rtt")"
  }
  for sp in $spins; do
    diag "naarpc, spec dialect, poll_spin $sp us" "$logs/diag_spin_$sp"
  done
  for sp in 200 100000; do
    diag "naarpc, reference dialect (no metadata), poll_spin $sp us" "$logs/diag_ref_$sp"
  done
  for sp in 200 100000; do
    diag "naarpc, spec dialect, metadata every call, poll_spin $sp us" "$logs/diag_every_$sp"
  done
  diag "naarpc, default, timed with clock_gettime (not RDTSCP)" "$logs/diag_steady"
  t_send="$(perf_field "$logs/send_lat" 64 5)"
  s_rtt="$(awk -v t="$t_send" 'BEGIN { if (t != "") printf "%.3f", 2 * t }')"
  printf '  %-52s %8s us  %6sx\n' "fabric with recv CQE: 2 x ib_send_lat t_typical" "$(fmt "$s_rtt")" \
    "$(ratio "$s_rtt" "$fabric_rtt")"
  if [[ " $bw_sizes " == *" 1048576 "* ]]; then
    echo
    echo "Diagnosis, 1 MiB call, split CPUs: how the waiting side waits (median ms per"
    echo "call in 2 interleaved rounds; ratio = 2N / the better median to ib_write_bw):"
    bw_1m="$(awk -v m="$(cat "$logs/bw_1048576.best" 2>/dev/null)" 'BEGIN { if (m != "") printf "%.3f", m * 1.048576 }')"
    for w in off on spin; do
      case "$w" in
        off) label="sleep after the 200 us spin (predictive_wake off, the default)" ;;
        on) label="predictive wake (predictive_wake on)" ;;
        spin) label="spin throughout (poll_spin 20000 us)" ;;
      esac
      m1="$(cb_field "$logs/diag_mib_${w}_1" split 1048576 naarpc_median_us)"
      m2="$(cb_field "$logs/diag_mib_${w}_2" split 1048576 naarpc_median_us)"
      best="$( { [[ -n "$m1" ]] && echo "$m1"; [[ -n "$m2" ]] && echo "$m2"; } | sort -g | head -1)"
      nb="$(awk -v u="$best" 'BEGIN { if (u != "" && u + 0 > 0) printf "%.3f", 2 * 1048576 / u }')"
      ms() { awk -v u="$1" 'BEGIN { if (u != "") printf "%.1f", u / 1000; else print "n/a" }'; }
      printf '  %-52s %5s / %5s ms  %6sx\n' "$label" "$(ms "$m1")" "$(ms "$m2")" "$(ratio "$nb" "$bw_1m")"
    done
  fi
fi

section "done"
if ((failed)); then echo "verbs_bench: some runs FAILED (see above)"; exit 1; fi
