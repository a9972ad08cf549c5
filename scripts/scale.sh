#!/usr/bin/env bash
# How the wrapper scales with connections on loopback (not CI): the release axum example under
# `--policy stock` and `--policy scheduled`, measured side by side in rounds that alternate
# between them (stock first in odd rounds, scheduled first in even ones). Rows:
#
#   c10, c100, c1000  h2load -c 10|100|1000 -m 10 on /critical (pinned u=0, 4 KiB):
#                     req/s and mean time for request (ms)
#   size1k            h2load -c 1000 -m 10 on /size/1024 (u=3): req/s
#   bulk              h2load -c 4 -m 1 on /size/1048576: MB/s
#   idle              SCALE_IDLE idle TLS + HTTP/2 connections (preface and SETTINGS exchanged,
#                     no request): server RSS per connection, KiB
#   stalled           SCALE_STALLED connections that announce Chromium's flow-control windows
#                     (6 MiB per stream, 15 MiB per connection), GET SCALE_STALLED_PATH and
#                     never read after the response headers (default socket buffers). Once the
#                     server's RSS has stopped growing for 2 s (at most 30 s): server RSS per
#                     connection (KiB), kernel TCP memory per connection (KiB, the `TCP: mem`
#                     pages of /proc/net/sockstat minus those before; both ends of each
#                     loopback connection count), and server CPU seconds (utime+stime) from the
#                     first connection until then ("stall s" is that time; it includes the
#                     TLS handshakes). Then the clients close and the server must still answer.
#   budget            The issue's memory budget: a `scheduled` server with `--memory-budget
#                     SCALE_BUDGET` and SCALE_BUDGET_STALLED connections stalled as above on
#                     SCALE_BUDGET_PATH (scale_clients.py stalled-then-read). Once the server's
#                     RSS has settled (as above, plus 1.5 s for the server's once-a-second
#                     `memory-budget ... high_water=H` line), the clients are told (SIGUSR1)
#                     to read every response to its end and check it byte-exact. Reports the
#                     budget's high water (the largest H the server printed, stalled and over
#                     the whole run), high water / budget, downloads completed, the server's
#                     RSS per connection while stalled, and the seconds the reads took. Fails
#                     if a download failed or was short or corrupt, or if the high water
#                     passed max(budget, connections x 33042): the budget bounds the queues'
#                     sum except that every connection keeps its floor (BUDGET_FLOOR in
#                     tls-flush/src/memory_budget.rs, 2 x (16384 + 9 + 128) bytes), so a
#                     budget below connections x floor cannot hold (2,000 x 33042 B = 63.0 MiB
#                     fits the default 64 MiB; 100 x 33042 B = 3.2 MiB does not fit 2 MiB).
#                     The default path is 4 MiB: well beyond what a stalled connection
#                     takes before the server's queue stops (kernel buffers ~150 KB on
#                     loopback here, h2's send buffer at most 128 KiB, the queue's limits),
#                     so every queue is as full as it gets; within the 6 MiB stream window,
#                     so the socket stalls the server, not flow control; and 2,000 x 4 MiB
#                     = 7.8 GiB is read back by the one Python process in about a minute
#                     (~120-200 MB/s here; 16 MiB would take four times as long and show
#                     nothing more). With SCALE_BUDGET_STOCK=1 the same runs against
#                     `stock` too (no budget: its RSS per connection for comparison).
#
# The h2load rows run against one server per policy started at the beginning; idle and
# stalled start a fresh server for each measurement (so the RSS deltas do not depend on what
# earlier rows left in the allocator). Prints each measurement as it is made, then a markdown
# table: per row the median and min–max over the rounds for stock and scheduled, and the
# median (min–max) of the per-round ratios scheduled/stock.
#
#   scripts/scale.sh [ROUNDS]     # default 5
#   SCALE_IDLE=10000 scripts/scale.sh 3
#   SCALE_ROWS=idle,stalled SCALE_IDLE=200 SCALE_STALLED=100 scripts/scale.sh 1
#   SCALE_ROWS=budget SCALE_BUDGET_STALLED=300 SCALE_BUDGET=16777216 scripts/scale.sh 1
#
# Environment (defaults in brackets):
#   SCALE_ROWS [c10,c100,c1000,size1k,bulk,idle,stalled,budget]  rows to run (numbers 1-8
#                            also work)
#   SCALE_REQUESTS [200000]  h2load -n for the c10, c100, c1000 and size1k rows (at least -c)
#   SCALE_BULK [400]         h2load -n for the bulk row (1 MiB responses)
#   SCALE_IDLE [1000]        idle connections (10000 works; the fd limit is raised to 65536
#                            or the hard limit)
#   SCALE_STALLED [1000]     stalled downloads
#   SCALE_STALLED_PATH [/size/16777216]  what each stalled connection requests
#   SCALE_BUDGET_STALLED [2000]  stalled downloads of the budget row
#   SCALE_BUDGET [67108864]  the budget row's --memory-budget, bytes (64 MiB)
#   SCALE_BUDGET_PATH [/size/4194304]  what each of them requests (a /size/BYTES path)
#   SCALE_BUDGET_STOCK [0]   1: run the budget row against stock too
#   SCALE_OUT [target/scale/<date>]  where server logs, h2load and client outputs go
#   SCALE_SKIP_BUILD         set to 1 to use the already built binary
#   SCALE_PIN [unset]        SERVER_CPUS:CLIENT_CPUS, e.g. 0:1: runs each server and h2load
#                            under `taskset -c`, so the load generator never takes the
#                            server's core (on a 2-core machine the c1000 row's spread comes
#                            mostly from the two sharing both cores)
#
# Needs h2load (scripts/install-test-tools.sh installs it) and python3 with the `h2` package
# (pip install h2) for scripts/scale_clients.py. Exits 1 if a request or connection failed or
# a server died.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-5}
rows=${SCALE_ROWS:-c10,c100,c1000,size1k,bulk,idle,stalled,budget}
requests=${SCALE_REQUESTS:-200000}
bulk_n=${SCALE_BULK:-400}
idle_n=${SCALE_IDLE:-1000}
stalled_n=${SCALE_STALLED:-1000}
stalled_path=${SCALE_STALLED_PATH:-/size/16777216}
budget_n=${SCALE_BUDGET_STALLED:-2000}
budget=${SCALE_BUDGET:-67108864}
budget_path=${SCALE_BUDGET_PATH:-/size/4194304}
budget_stock=${SCALE_BUDGET_STOCK:-0}
# tls_flush::BUDGET_FLOOR: what each connection's queue may hold whatever the budget's state,
# two full DATA frames with their accounted overhead, 2 x (16384 + 9 + 128).
budget_floor=33042
out=${SCALE_OUT:-target/scale/$(date +%Y%m%d-%H%M%S)}
target_dir=${CARGO_TARGET_DIR:-target}
bin=$target_dir/release/examples/axum
clients_py=scripts/scale_clients.py
settle_secs=2 settle_max=30
tck=$(getconf CLK_TCK)
pin_server=() pin_client=()
if [[ -n ${SCALE_PIN:-} ]]; then
    [[ $SCALE_PIN == *:* ]] || { echo "scale: SCALE_PIN is SERVER_CPUS:CLIENT_CPUS, e.g. 0:1" >&2; exit 2; }
    command -v taskset >/dev/null 2>&1 || { echo "scale: SCALE_PIN needs taskset (util-linux)" >&2; exit 2; }
    pin_server=(taskset -c "${SCALE_PIN%%:*}") pin_client=(taskset -c "${SCALE_PIN#*:}")
fi

command -v h2load >/dev/null 2>&1 || { echo "scale: h2load not found; run scripts/install-test-tools.sh (as root)" >&2; exit 2; }
python3 -c 'import h2' 2>/dev/null || { echo "scale: python3 lacks the h2 package (pip install h2)" >&2; exit 2; }

# Rows to run: names, or numbers 1-8.
all_rows=(c10 c100 c1000 size1k bulk idle stalled budget)
declare -A want
IFS=, read -ra picked <<<"$rows"
for p in "${picked[@]}"; do
    [[ $p =~ ^[1-8]$ ]] && p=${all_rows[p - 1]}
    [[ " ${all_rows[*]} " == *" $p "* ]] || { echo "scale: unknown row '$p' (rows: ${all_rows[*]})" >&2; exit 2; }
    want[$p]=1
done
has() { [[ -n ${want[$1]:-} ]]; }

# Enough descriptors for the biggest client population (each process has its own).
hard=$(ulimit -Hn)
nofile=65536
[[ $hard != unlimited ]] && (( hard < nofile )) && nofile=$hard
ulimit -n "$nofile"
need=$(( idle_n > stalled_n ? idle_n : stalled_n ))
(( budget_n > need )) && need=$budget_n
(( need < 1000 )) && need=1000
if (( nofile < need + 100 )); then
    echo "scale: the open-files limit ($nofile) is too low for $need connections" >&2
    exit 2
fi

if [[ ${SCALE_SKIP_BUILD:-0} != 1 ]]; then
    echo "scale: building the release axum example (cargo may wait for the build lock)"
    nice cargo build --release -q -p examples --example axum
fi
[[ -x $bin ]] || { echo "scale: $bin missing" >&2; exit 2; }
mkdir -p "$out"
results=$out/results.tsv
: >"$results"

pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 0.2
    # A second signal ends the servers' graceful shutdown at once.
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bad=0
warn() { echo "scale: $*" >&2; bad=1; }

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{ print $12 + $13 }'; } # utime+stime
tcp_pages() { awk '$1 == "TCP:" { for (i = 2; i < NF; i++) if ($i == "mem") print $(i + 1) }' /proc/net/sockstat; }
calc() { awk "BEGIN { printf \"$1\", $2 }"; }

# start_server POLICY TAG [ARGS...]: starts a server (with ARGS), sets spid, surl and slog
# (its output files without .stdout/.stderr).
spid= surl= slog=
start_server() {
    local log=$out/$1.$2
    slog=$log
    RUST_LOG=warn "${pin_server[@]}" "$bin" --addr 127.0.0.1:0 --policy "$1" "${@:3}" >"$log.stdout" 2>"$log.stderr" &
    spid=$!
    pids+=("$spid")
    local line=
    for _ in $(seq 100); do
        line=$(head -n1 "$log.stdout" 2>/dev/null || true)
        [[ $line == "listening on "* ]] && break
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    [[ $line == "listening on "* ]] || { echo "scale: $1 server did not start:" >&2; cat "$log.stderr" >&2; exit 2; }
    surl=${line#listening on }
    # One request, so that lazy initialisation is not counted.
    h2load -n 1 "$surl/critical" >/dev/null 2>&1 || true
}

# forget PID: no longer ours to clean up (it has been waited for).
forget() {
    local p
    local -a keep=()
    for p in "${pids[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    pids=("${keep[@]}")
}

stop_server() { # pid
    forget "$1"
    kill "$1" 2>/dev/null || return 0
    for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill "$1" 2>/dev/null || true
    sleep 0.5
    kill -9 "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# alive POLICY PID URL: the server process exists and answers /critical.
alive() {
    local o=
    kill -0 "$2" 2>/dev/null && o=$(h2load -n 1 "$3/critical" 2>/dev/null || true)
    [[ $o == *"requests: 1 total"*" 1 succeeded"* ]] || { warn "$1 server (pid $2) died or stopped answering"; return 1; }
}

record() { printf '%s\t%s\t%s\t%s\n' "$r" "$1" "$2" "$3" >>"$results"; } # key policy value

# h2 POLICY KEY CLIENTS STREAMS N PATH: runs h2load, leaves "req/s MB/s mean-ms" in h2_vals.
h2_vals=
h2() {
    local n=$5 f=$out/$1.$2.r$r.h2load total ok
    (( n < $3 )) && n=$3
    "${pin_client[@]}" h2load -c "$3" -m "$4" -n "$n" "${url[$1]}$6" >"$f" 2>&1 || true
    read -r total ok < <(awk '/^requests:/ { print $2, $8 }' "$f") || true
    [[ ${total:-0} -gt 0 && $ok == "$total" ]] || warn "$1 $2: ${ok:-0} of ${total:-?} requests succeeded (see $f)"
    h2_vals=$(awk '
        function ms(v) { if (v ~ /us$/) m = 0.001; else if (v ~ /ms$/) m = 1; else m = 1000
                         gsub(/[a-z]/, "", v); return v * m }
        /^finished in/ { gsub(",", "", $4); rps = $4; v = $6; m = 1
                         if (v ~ /GB\/s/) m = 1000; else if (v ~ /KB\/s/) m = 0.001; else if (v ~ /[0-9]B\/s/) m = 0.000001
                         gsub(/[A-Za-z\/]/, "", v); mbs = v * m }
        /^time for request:/ { mean = ms($6) }
        END { printf "%s %s %s\n", rps + 0, mbs + 0, mean + 0 }' "$f")
}

# clients MODE POLICY N URL [PATH]: starts scale_clients.py, waits for its `ready` line;
# sets cpid and cready ("ok failed secs").
cpid= cready=
clients() {
    local f=$out/$2.$1.r$r.clients
    python3 "$clients_py" "$1" "$4" "$3" ${5:+"$5"} >"$f.out" 2>"$f.err" </dev/null &
    cpid=$!
    pids+=("$cpid")
    local line= ok failed
    for _ in $(seq 3000); do # 300 s, the client's own setup timeout
        line=$(grep -m1 '^ready ' "$f.out" 2>/dev/null || true)
        [[ -n $line ]] && break
        kill -0 "$cpid" 2>/dev/null || break
        sleep 0.1
    done
    [[ -n $line ]] || { echo "scale: $1 clients did not get ready:" >&2; cat "$f.err" >&2; exit 2; }
    cready=$(sed 's/^ready ok=\([0-9]*\) failed=\([0-9]*\) secs=\(.*\)$/\1 \2 \3/' <<<"$line")
    read -r ok failed _ <<<"$cready"
    (( failed == 0 )) || warn "$2 $1: $failed of $3 connections failed (see $f.err)"
    (( ok > 0 )) || { echo "scale: no $1 connection succeeded:" >&2; cat "$f.err" >&2; exit 2; }
}

stop_clients() { kill "$cpid" 2>/dev/null || true; wait "$cpid" 2>/dev/null || true; forget "$cpid"; }

# settle PID: waits until the RSS has not grown (by more than 256 KiB) for settle_secs,
# at most settle_max seconds.
settle() {
    local -a hist=()
    local i lag=$(( settle_secs * 4 ))
    for (( i = 0; i < settle_max * 4; i++ )); do
        hist+=("$(rss_kib "$1")")
        (( i >= lag )) && (( hist[i] <= hist[i - lag] + 256 )) && return 0
        sleep 0.25
    done
}

row_h2() { # policy key clients path
    local p=$1 k=$2
    h2 "$p" "$k" "$3" 10 "$requests" "$4"
    read -r rps _ mean <<<"$h2_vals"
    record "${k}_rps" "$p" "$rps"
    if [[ $k == c* ]]; then
        record "${k}_ms" "$p" "$mean"
        printf 'round %d %-9s %-7s %10.0f req/s  %8.2f ms mean\n' "$r" "$p" "$k" "$rps" "$mean"
    else
        printf 'round %d %-9s %-7s %10.0f req/s\n' "$r" "$p" "$k" "$rps"
    fi
}

row_bulk() { # policy
    h2 "$1" bulk 4 1 "$bulk_n" /size/1048576
    read -r _ mbs _ <<<"$h2_vals"
    record bulk_mbs "$1" "$mbs"
    printf 'round %d %-9s %-7s %10.1f MB/s\n' "$r" "$1" bulk "$mbs"
}

row_idle() { # policy
    local p=$1
    start_server "$p" "idle.r$r"
    local before after
    before=$(rss_kib "$spid")
    clients idle "$p" "$idle_n" "$surl"
    read -r ok _ secs <<<"$cready"
    settle "$spid"
    after=$(rss_kib "$spid")
    alive "$p" "$spid" "$surl" || true
    stop_clients
    stop_server "$spid"
    local per
    per=$(calc %.2f "($after - $before) / $ok")
    record idle_kib "$p" "$per"
    printf 'round %d %-9s %-7s %10.2f KiB/conn  (%d conns, RSS %d -> %d KiB, set up in %ss)\n' \
        "$r" "$p" idle "$per" "$ok" "$before" "$after" "$secs"
}

row_stalled() { # policy
    local p=$1
    sleep 1 # let the sockets of the previous row go
    start_server "$p" "stalled.r$r"
    local rss0 tcp0 rss1 tcp1 cpu0 cpu1 t0 t1
    rss0=$(rss_kib "$spid")
    tcp0=$(tcp_pages)
    cpu0=$(cpu_ticks "$spid")
    t0=$(date +%s.%N)
    clients stalled "$p" "$stalled_n" "$surl" "$stalled_path"
    read -r ok _ secs <<<"$cready"
    settle "$spid"
    t1=$(date +%s.%N)
    cpu1=$(cpu_ticks "$spid")
    rss1=$(rss_kib "$spid")
    tcp1=$(tcp_pages)
    kill -0 "$spid" 2>/dev/null || warn "$p server died while stalled"
    stop_clients
    sleep 0.5
    alive "$p" "$spid" "$surl" || true
    stop_server "$spid"
    local rss tcp cpu dt
    rss=$(calc %.2f "($rss1 - $rss0) / $ok")
    tcp=$(calc %.2f "($tcp1 - $tcp0) * 4 / $ok")
    cpu=$(calc %.2f "(${cpu1:-0} - ${cpu0:-0}) / $tck")
    dt=$(calc %.2f "$t1 - $t0")
    record stall_rss "$p" "$rss"
    record stall_tcp "$p" "$tcp"
    record stall_cpu "$p" "$cpu"
    record stall_secs "$p" "$dt"
    printf 'round %d %-9s %-7s %10.2f KiB/conn RSS  %8.2f KiB/conn TCP  %6.2f CPU s in %5.2fs  (%d conns, RSS %d -> %d KiB, set up in %ss)\n' \
        "$r" "$p" stalled "$rss" "$tcp" "$cpu" "$dt" "$ok" "$rss0" "$rss1" "$secs"
}

# high_water LOG: the largest high_water= in a server's `memory-budget` lines (0 if none).
high_water() {
    awk '$1 == "memory-budget" { for (i = 2; i <= NF; i++) if ($i ~ /^high_water=/) {
             v = substr($i, 12) + 0; if (v > m) m = v } } END { print m + 0 }' "$1.stdout"
}

row_budget() { # policy
    local p=$1
    local -a extra=()
    [[ $p == scheduled ]] && extra=(--memory-budget "$budget")
    sleep 1 # let the sockets of the previous row go
    start_server "$p" "budget.r$r" "${extra[@]}"
    local log=$slog f=$out/$p.stalled-then-read.r$r.clients rss0 rss1
    rss0=$(rss_kib "$spid")
    clients stalled-then-read "$p" "$budget_n" "$surl" "$budget_path"
    read -r ok _ secs <<<"$cready"
    settle "$spid"
    sleep 1.5 # the server prints the high water at most once a second
    rss1=$(rss_kib "$spid")
    local hw_stall hw rc=0 line completed=0 rsecs=0
    hw_stall=$(high_water "$log")
    kill -0 "$spid" 2>/dev/null || warn "$p server died while stalled"
    kill -USR1 "$cpid" 2>/dev/null || true
    wait "$cpid" || rc=$?
    forget "$cpid"
    line=$(grep -m1 '^read ' "$f.out" || true)
    if [[ $line =~ ^read\ completed=([0-9]+)\ failed=([0-9]+)\ bytes=[0-9]+\ secs=([0-9.]+)$ ]]; then
        completed=${BASH_REMATCH[1]} rsecs=${BASH_REMATCH[3]}
    fi
    (( rc == 0 && completed == budget_n )) ||
        warn "$p budget: $completed of $budget_n downloads of $budget_path completed byte-exact (exit $rc; see $f.err)"
    sleep 1.5
    hw=$(high_water "$log")
    alive "$p" "$spid" "$surl" || true
    stop_server "$spid"
    local rss
    rss=$(calc %.2f "($rss1 - $rss0) / $ok")
    record budget_rss "$p" "$rss"
    record budget_done "$p" "$completed"
    record budget_read_s "$p" "$rsecs"
    if [[ $p == scheduled ]]; then
        local floors=$(( ok * budget_floor )) bound ratio
        bound=$(( floors > budget ? floors : budget ))
        ratio=$(calc %.3f "$hw / $budget")
        record budget_hw_stall "$p" "$(calc %.2f "$hw_stall / 1048576")"
        record budget_hw "$p" "$(calc %.2f "$hw / 1048576")"
        record budget_ratio "$p" "$ratio"
        (( hw > 0 )) || warn "$p budget: the server printed no memory-budget line (see $log.stdout)"
        (( floors <= budget )) || echo "scale: note: $ok connections' floors ($floors B) exceed the budget ($budget B); the bound is the floors"
        (( hw <= bound )) || warn "$p budget: high water $hw B passed the bound $bound B (budget $budget B)"
        printf 'round %d %-9s %-7s high water %d B (%d B while stalled) = %.3f x budget %d B (bound %d B); %d/%d downloads byte-exact in %ss; %.2f KiB/conn RSS (RSS %d -> %d KiB, set up in %ss)\n' \
            "$r" "$p" budget "$hw" "$hw_stall" "$ratio" "$budget" "$bound" "$completed" "$budget_n" "$rsecs" "$rss" "$rss0" "$rss1" "$secs"
    else
        printf 'round %d %-9s %-7s no budget; %d/%d downloads byte-exact in %ss; %.2f KiB/conn RSS (RSS %d -> %d KiB, set up in %ss)\n' \
            "$r" "$p" budget "$completed" "$budget_n" "$rsecs" "$rss" "$rss0" "$rss1" "$secs"
    fi
}

declare -A url pid
if has c10 || has c100 || has c1000 || has size1k || has bulk; then
    for p in stock scheduled; do
        start_server "$p" h2load
        url[$p]=$surl pid[$p]=$spid
        echo "scale: $p server pid $spid at $surl (h2load rows)"
    done
fi

echo "scale: $rounds round(s); rows ${rows}; -n $requests (bulk $bulk_n); $idle_n idle;" \
    "$stalled_n stalled on $stalled_path; budget $budget B for $budget_n on $budget_path;" \
    "outputs in $out"
for r in $(seq "$rounds"); do
    if (( r % 2 == 1 )); then order=(stock scheduled); else order=(scheduled stock); fi
    for row in "${all_rows[@]}"; do
        has "$row" || continue
        for p in "${order[@]}"; do
            case $row in
                c10) row_h2 "$p" c10 10 /critical ;;
                c100) row_h2 "$p" c100 100 /critical ;;
                c1000) row_h2 "$p" c1000 1000 /critical ;;
                size1k) row_h2 "$p" size1k 1000 /size/1024 ;;
                bulk) row_bulk "$p" ;;
                idle) row_idle "$p" ;;
                stalled) row_stalled "$p" ;;
                budget) if [[ $p == scheduled || $budget_stock == 1 ]]; then row_budget "$p"; fi ;;
            esac
        done
    done
done
for p in "${!url[@]}"; do
    alive "$p" "${pid[$p]}" "${url[$p]}" || true
done

# ---- report ----------------------------------------------------------------------------

echo
echo "Medians over $rounds round(s) (min–max); the ratio column is the median of the per-round ratios."
echo
echo "| row | stock | scheduled | scheduled/stock |"
echo "|---|---|---|---|"
awk -F'\t' -v idle="$idle_n" -v stalled="$stalled_n" -v spath="$stalled_path" \
    -v bn="$budget_n" -v bpath="$budget_path" -v bmib="$(calc %g "$budget / 1048576")" '
    function med(a, n,   i, j, t) {
        for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function cell(fmt, a, n,   m) {
        if (n == 0) return "n/a"
        m = med(a, n)  # sorts a
        return sprintf(fmt " (" fmt "–" fmt ")", m, a[1], a[n])
    }
    { v[$2, $3, $1] = $4; seen[$2] = 1; if ($1 > R) R = $1 }
    END {
        n = split("c10_rps c10_ms c100_rps c100_ms c1000_rps c1000_ms size1k_rps bulk_mbs idle_kib stall_rss stall_tcp stall_cpu stall_secs budget_hw_stall budget_hw budget_ratio budget_done budget_rss budget_read_s", keys, " ")
        label["c10_rps"] = "1 -c 10 -m 10 /critical: req/s"; fmt["c10_rps"] = "%.0f"
        label["c10_ms"] = "1 -c 10 -m 10 /critical: mean ms"; fmt["c10_ms"] = "%.2f"
        label["c100_rps"] = "2 -c 100 -m 10 /critical: req/s"; fmt["c100_rps"] = "%.0f"
        label["c100_ms"] = "2 -c 100 -m 10 /critical: mean ms"; fmt["c100_ms"] = "%.2f"
        label["c1000_rps"] = "3 -c 1000 -m 10 /critical: req/s"; fmt["c1000_rps"] = "%.0f"
        label["c1000_ms"] = "3 -c 1000 -m 10 /critical: mean ms"; fmt["c1000_ms"] = "%.2f"
        label["size1k_rps"] = "4 -c 1000 -m 10 /size/1024: req/s"; fmt["size1k_rps"] = "%.0f"
        label["bulk_mbs"] = "5 bulk -c 4 -m 1 /size/1048576: MB/s"; fmt["bulk_mbs"] = "%.1f"
        label["idle_kib"] = "6 " idle " idle conns: server RSS KiB/conn"; fmt["idle_kib"] = "%.1f"
        label["stall_rss"] = "7 " stalled " stalled " spath ": server RSS KiB/conn"; fmt["stall_rss"] = "%.1f"
        label["stall_tcp"] = "7 " stalled " stalled: kernel TCP KiB/conn"; fmt["stall_tcp"] = "%.1f"
        label["stall_cpu"] = "7 " stalled " stalled: server CPU s"; fmt["stall_cpu"] = "%.2f"
        label["stall_secs"] = "7 " stalled " stalled: stall s"; fmt["stall_secs"] = "%.1f"
        b = "8 " bn " stalled " bpath ", budget " bmib " MiB: "
        label["budget_hw_stall"] = b "queued high water MiB, stalled"; fmt["budget_hw_stall"] = "%.2f"
        label["budget_hw"] = b "queued high water MiB, whole run"; fmt["budget_hw"] = "%.2f"
        label["budget_ratio"] = b "high water / budget"; fmt["budget_ratio"] = "%.3f"
        label["budget_done"] = b "downloads byte-exact (of " bn ")"; fmt["budget_done"] = "%.0f"
        label["budget_rss"] = b "server RSS KiB/conn, stalled"; fmt["budget_rss"] = "%.1f"
        label["budget_read_s"] = b "read-back s"; fmt["budget_read_s"] = "%.1f"
        for (i = 1; i <= n; i++) {
            k = keys[i]
            if (!(k in seen)) continue
            ns = nc = nr = 0
            delete s; delete c; delete q
            for (r = 1; r <= R; r++) {
                hs = ((k, "stock", r) in v); hc = ((k, "scheduled", r) in v)
                if (hs) s[++ns] = v[k, "stock", r]
                if (hc) c[++nc] = v[k, "scheduled", r]
                if (hs && hc && v[k, "stock", r] != 0) q[++nr] = v[k, "scheduled", r] / v[k, "stock", r]
            }
            printf "| %s | %s | %s | %s |\n", label[k], cell(fmt[k], s, ns), cell(fmt[k], c, nc), cell("%.3f", q, nr)
        }
    }' "$results"

if (( bad )); then
    echo "scale: some requests or connections failed, or a server died (see above and $out)" >&2
    exit 1
fi
