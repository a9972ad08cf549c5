#!/usr/bin/env bash
# Soak (issue 5, not CI): the release axum example under `--policy scheduled` and under
# `--policy stock`, started side by side and loaded with h2load, the same load for each.
# Prints requests/s, p50/p99 latency, background downloads/s and RSS (start, peak, end, and
# over time) for each server, then the ratios scheduled/stock.
#
#   scripts/soak.sh [SECONDS]      # SECONDS of load per server (default 180)
#
# The load, per server: h2load -c 50 -m 10 on /size/16384 (the main load, whose per-request
# times give the percentiles) and, at the same time, h2load -c 2 -m 2 on /bg/soak (1 MiB
# downloads). To even out a machine whose background load drifts, each server's time is
# split into SOAK_ROUNDS rounds that alternate between the two servers (scheduled first in
# odd rounds, stock first in even ones).
#
# Environment (defaults in brackets):
#   SOAK_DURATION [180]  seconds of load per server (the argument wins)
#   SOAK_ROUNDS [3]      alternations
#   SOAK_CLIENTS [50] SOAK_STREAMS [10] SOAK_PATH [/size/16384]   main load
#   SOAK_BG_CLIENTS [2] SOAK_BG_STREAMS [2] SOAK_BG_PATH [/bg/soak] background downloads
#   SOAK_SAMPLE [2]      seconds between RSS samples
#   SOAK_OUT [target/soak/<date>]  where logs, h2load outputs and rss.tsv go
#   SOAK_SKIP_BUILD      set to 1 to use the already built binary
#
# Needs h2load (scripts/install-test-tools.sh installs it). Exits 1 if a request failed.
set -euo pipefail

cd "$(dirname "$0")/.."

duration=${1:-${SOAK_DURATION:-180}}
rounds=${SOAK_ROUNDS:-3}
clients=${SOAK_CLIENTS:-50}
streams=${SOAK_STREAMS:-10}
path=${SOAK_PATH:-/size/16384}
bg_clients=${SOAK_BG_CLIENTS:-2}
bg_streams=${SOAK_BG_STREAMS:-2}
bg_path=${SOAK_BG_PATH:-/bg/soak}
sample=${SOAK_SAMPLE:-2}
out=${SOAK_OUT:-target/soak/$(date +%Y%m%d-%H%M%S)}
target_dir=${CARGO_TARGET_DIR:-target}
bin=$target_dir/release/examples/axum
names=(scheduled stock)

if ! command -v h2load >/dev/null 2>&1; then
    echo "soak: h2load not found; run scripts/install-test-tools.sh (as root)" >&2
    exit 2
fi
if (( rounds < 1 || duration < rounds )); then
    echo "soak: need SOAK_ROUNDS >= 1 and at least one second per round" >&2
    exit 2
fi
round_secs=$(( duration / rounds ))

if [[ ${SOAK_SKIP_BUILD:-0} != 1 ]]; then
    echo "soak: building the release axum example (cargo may wait for the build lock)"
    timeout 3600 cargo build --release --quiet -p examples --example axum
fi
[[ -x $bin ]] || { echo "soak: $bin missing" >&2; exit 2; }
mkdir -p "$out"

declare -A pid url
sampler=
cleanup() {
    [[ -n $sampler ]] && kill "$sampler" 2>/dev/null || true
    for n in "${!pid[@]}"; do
        kill "${pid[$n]}" 2>/dev/null || true
    done
    wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

# Start both servers on free ports (port 0; each prints `listening on https://IP:PORT`).
for n in "${names[@]}"; do
    RUST_LOG=warn "$bin" --addr 127.0.0.1:0 --policy "$n" >"$out/$n.stdout" 2>"$out/$n.stderr" &
    pid[$n]=$!
done
for n in "${names[@]}"; do
    line=
    for _ in $(seq 100); do
        line=$(head -n1 "$out/$n.stdout" 2>/dev/null || true)
        [[ $line == "listening on "* ]] && break
        kill -0 "${pid[$n]}" 2>/dev/null || break
        sleep 0.1
    done
    [[ $line == "listening on "* ]] || { echo "soak: $n server did not start:" >&2; cat "$out/$n.stderr" >&2; exit 2; }
    url[$n]=${line#listening on }
    echo "soak: $n server pid ${pid[$n]} at ${url[$n]}"
done

# One request each so that lazy initialisation is not counted as growth; then RSS "start".
declare -A rss_start rss_end
for n in "${names[@]}"; do
    h2load -n 1 "${url[$n]}$path" >/dev/null 2>&1 || true
    rss_start[$n]=$(rss_kib "${pid[$n]}")
done

t0=$(date +%s.%N)
(
    while :; do
        now=$(date +%s.%N)
        for n in "${names[@]}"; do
            printf '%s\t%s\t%s\n' "$(awk -v a="$now" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')" \
                "$n" "$(rss_kib "${pid[$n]}")"
        done
        sleep "$sample"
    done
) >"$out/rss.tsv" &
sampler=$!

run_load() { # name round
    local n=$1 r=$2
    local t
    t=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')
    echo "soak: round $r/$rounds: $n for ${round_secs}s (t=${t}s)"
    h2load -c "$clients" -m "$streams" -D "$round_secs" --log-file "$out/$n.r$r.log" \
        "${url[$n]}$path" >"$out/$n.r$r.h2load" 2>&1 &
    local main=$!
    h2load -c "$bg_clients" -m "$bg_streams" -D "$round_secs" --log-file "$out/$n.r$r.bg.log" \
        "${url[$n]}$bg_path" >"$out/$n.r$r.bg.h2load" 2>&1 &
    local bg=$!
    wait "$main" || true
    wait "$bg" || true
    printf '%s\t%s\t%s\n' "$t" "$n" "$r" >>"$out/phases.tsv"
    sleep 2
}

for r in $(seq "$rounds"); do
    if (( r % 2 == 1 )); then order=(scheduled stock); else order=(stock scheduled); fi
    for n in "${order[@]}"; do
        run_load "$n" "$r"
    done
done
sleep 3
for n in "${names[@]}"; do
    rss_end[$n]=$(rss_kib "${pid[$n]}")
done
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
sampler=

# ---- report ----------------------------------------------------------------------------

# Sums h2load's "requests:" counters and "finished in" seconds over rounds.
# Prints: total succeeded failed errored timeout seconds
h2load_totals() { # files...
    awk '
        /^requests:/ { t += $2; s += $8; f += $10; e += $12; o += $14 }
        /^finished in/ { sub(/s,$/, "", $3); secs += $3 }
        END { printf "%d %d %d %d %d %.3f\n", t, s, f, e, o, secs }
    ' "$@"
}

# Percentiles (ms) of the per-request times (column 3, µs) of successful requests.
percentiles() { # files...
    cat "$@" | awk -F'\t' '$2 != -1 { print $3 }' | sort -n | awk '
        { v[NR] = $1 }
        END {
            if (NR == 0) { print "nan nan nan"; exit }
            i50 = int(NR * 0.50); if (i50 < NR * 0.50) i50++; if (i50 < 1) i50 = 1
            i99 = int(NR * 0.99); if (i99 < NR * 0.99) i99++; if (i99 < 1) i99 = 1
            printf "%.3f %.3f %.3f\n", v[i50] / 1000, v[i99] / 1000, v[NR] / 1000
        }'
}

declare -A rps p50 p99 pmax bgps peak failed
bad=0
echo
echo "soak: ${duration}s of load per server in $rounds round(s); -c $clients -m $streams $path" \
    "+ -c $bg_clients -m $bg_streams $bg_path; outputs in $out"
printf '%-10s %10s %9s %9s %9s %8s %9s %11s %11s %11s %s\n' server 'req/s' 'p50 ms' \
    'p99 ms' 'max ms' 'bg dl/s' requests 'RSS start' 'RSS peak' 'RSS end' 'failed/errored/timeout'
for n in "${names[@]}"; do
    read -r total ok f e o secs < <(h2load_totals "$out/$n".r*[0-9].h2load)
    read -r _ bg_ok bf be bo bg_secs < <(h2load_totals "$out/$n".r*.bg.h2load)
    read -r p50[$n] p99[$n] pmax[$n] < <(percentiles "$out/$n".r*[0-9].log)
    rps[$n]=$(awk -v a="$ok" -v b="$secs" 'BEGIN { printf "%.1f", (b > 0 ? a / b : 0) }')
    bgps[$n]=$(awk -v a="$bg_ok" -v b="$bg_secs" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
    peak[$n]=$(awk -F'\t' -v n="$n" -v p="${rss_start[$n]}" \
        '$2 == n && $3 > p { p = $3 } END { print p }' "$out/rss.tsv")
    failed[$n]="$((f + bf))/$((e + be))/$((o + bo))"
    (( f + e + o + bf + be + bo == 0 )) || bad=1
    printf '%-10s %10s %9s %9s %9s %8s %9s %7s MiB %7s MiB %7s MiB %s\n' "$n" "${rps[$n]}" \
        "${p50[$n]}" "${p99[$n]}" "${pmax[$n]}" "${bgps[$n]}" "$ok" \
        "$(awk -v k="${rss_start[$n]}" 'BEGIN { printf "%.1f", k / 1024 }')" \
        "$(awk -v k="${peak[$n]}" 'BEGIN { printf "%.1f", k / 1024 }')" \
        "$(awk -v k="${rss_end[$n]}" 'BEGIN { printf "%.1f", k / 1024 }')" "${failed[$n]}"
done

echo
echo "RSS over time (MiB; t in s since the first load; samples every ${sample}s, at most 16 shown):"
for n in "${names[@]}"; do
    awk -F'\t' -v n="$n" '
        $2 == n { t[++k] = $1; r[k] = $3 }
        END {
            step = k > 16 ? k / 16 : 1
            line = ""
            for (i = 1; i <= k; i += step) {
                j = int(i)
                line = line sprintf(" %s:%.1f", t[j], r[j] / 1024)
            }
            printf "  %-10s%s\n", n, line
        }' "$out/rss.tsv"
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "n/a"; else printf "%.3f", a / b }'; }
echo
echo "ratios scheduled/stock:" \
    "req/s $(ratio "${rps[scheduled]}" "${rps[stock]}")," \
    "p50 $(ratio "${p50[scheduled]}" "${p50[stock]}")," \
    "p99 $(ratio "${p99[scheduled]}" "${p99[stock]}")," \
    "bg downloads/s $(ratio "${bgps[scheduled]}" "${bgps[stock]}")," \
    "RSS peak $(ratio "${peak[scheduled]}" "${peak[stock]}")," \
    "RSS end $(ratio "${rss_end[scheduled]}" "${rss_end[stock]}")"
if (( bad )); then
    echo "soak: some requests failed, errored or timed out (see $out/*.h2load)" >&2
    exit 1
fi
