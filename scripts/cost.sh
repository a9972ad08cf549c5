#!/usr/bin/env bash
# What the wrapper costs on loopback (not CI): the release axum example under
# `--policy stock` and `--policy scheduled`, side by side, loaded with h2load in rounds that
# alternate between them. Prints per round and as medians: small-request throughput
# (h2load -c 10 -m 10 on /size/1024), bulk throughput (h2load -c 4 -m 1 on /size/1048576),
# the ratios scheduled/stock, and the wrapper's TCP_INFO reads per MiB written (from
# the axum_serve example's /stats after a 16 MiB download on one curl connection).
#
#   scripts/cost.sh [ROUNDS]     # default 5
#
# Needs h2load and curl (scripts/install-test-tools.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-5}
cargo build --release -q -p examples --example axum --example axum_serve
bin=target/release/examples/axum
out=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$out"; }
trap cleanup EXIT

start() { # policy [binary] -> prints the URL
    "${2:-$bin}" --addr 127.0.0.1:0 --policy "$1" >"$out/$1.log" 2>"$out/$1.err" &
    pids+=($!)
    for _ in $(seq 100); do
        url=$(head -1 "$out/$1.log" 2>/dev/null | sed -n 's/^listening on //p')
        [ -n "$url" ] && { echo "$url"; return; }
        sleep 0.05
    done
    echo "server $1 did not start" >&2; exit 1
}
stock=$(start stock)
scheduled=$(start scheduled)

small() { h2load -c 10 -m 10 -n 200000 "$1/size/1024" 2>/dev/null | awk '/^finished in/ {gsub(",","",$4); print $4}'; }
# MB/s, whatever unit h2load printed.
bulk() {
    h2load -c 4 -m 1 -n 400 "$1/size/1048576" 2>/dev/null | awk '/^finished in/ {
        v = $6; m = 1
        if (v ~ /GB\/s/) m = 1000; else if (v ~ /KB\/s/) m = 0.001
        gsub(/[A-Za-z\/]/, "", v); print v * m }'
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

printf "round  small req/s stock  scheduled  ratio   bulk MB/s stock  scheduled  ratio\n"
for r in $(seq "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then a=$(small "$scheduled"); b=$(small "$stock"); c=$(bulk "$scheduled"); d=$(bulk "$stock");
    else b=$(small "$stock"); a=$(small "$scheduled"); d=$(bulk "$stock"); c=$(bulk "$scheduled"); fi
    echo "$b $a" >>"$out/small"; echo "$d $c" >>"$out/bulk"
    printf "%5d  %17s  %9s  %5.3f   %15s  %9s  %5.3f\n" "$r" "$b" "$a" "$(echo "$a/$b" | bc -l)" "$d" "$c" "$(echo "$c/$d" | bc -l)"
done
ss=$(cut -d' ' -f1 "$out/small" | median); sc=$(cut -d' ' -f2 "$out/small" | median)
bs=$(cut -d' ' -f1 "$out/bulk" | median); bc_=$(cut -d' ' -f2 "$out/bulk" | median)
printf "median small: stock %s scheduled %s ratio %.3f; bulk: stock %s scheduled %s ratio %.3f\n" \
    "$ss" "$sc" "$(echo "$sc/$ss" | bc -l)" "$bs" "$bc_" "$(echo "$bc_/$bs" | bc -l)"

serve_url=$(start scheduled target/release/examples/axum_serve)
stats=$(curl -sk --http2 "$serve_url/size/16777216" -o /dev/null "$serve_url/stats")
reads=$(echo "$stats" | sed -n 's/.*tcp_info_reads: \([0-9]*\).*/\1/p')
bytes=$(echo "$stats" | sed -n 's/.*bytes_written: \([0-9]*\).*/\1/p')
printf "TCP_INFO reads: %s for %s bytes written (%.1f per MiB)\n" "$reads" "$bytes" "$(echo "$reads*1048576/$bytes" | bc -l)"
