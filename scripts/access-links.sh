#!/usr/bin/env bash
# The lab on real access links (root; not CI): every profile below on the tun link, the
# critical response explicit and the `simultaneous` and `late` workloads, our cases and the
# peers in the same run, one lab run per (congestion control, profile). Writes, per run,
# OUT/CC-PROFILE.md (the tables) and OUT/CC-PROFILE.json, and prints the tables.
#
#   scripts/access-links.sh [REPEATS] [OUT] [CC...]       # default 20, lab-access, cubic bbr
#   PROFILES="loss1 cross1000" scripts/access-links.sh 10 # only some profiles
#   CASES=stock,scheduled,h2o scripts/access-links.sh 5  # only some cases
#
# Profiles (each on the lab's default 20 ms / 20 Mbit/s / 1000-packet link unless said):
#   clean       nothing added
#   loss1       1% random loss each way
#   burst1      1% loss each way in bursts of 3 packets on average (Gilbert-Elliott)
#   jitter5     5 ms mean jitter each way (uniform 0-10 ms, never reordering)
#   verizon     the Verizon LTE recording both ways (integration-tests/data/traces)
#   tmobile     the T-Mobile LTE recording both ways
#   cross1000   one bulk TCP flow of cross traffic, queue 1000 packets
#   cross200    one bulk TCP flow of cross traffic, queue 200 packets
#   shallow     10 Mbit/s with a 16-packet queue (about one BDP): a shallow home router
#
# The peers come from scripts/install-peers.sh; a missing one is skipped by the lab.
set -euo pipefail
cd "$(dirname "$0")/.."

repeats=${1:-20}
out=${2:-lab-access}
shift $(( $# > 2 ? 2 : $# ))
ccs=("$@")
[ ${#ccs[@]} -gt 0 ] || ccs=(cubic bbr)
profiles=${PROFILES:-clean loss1 burst1 jitter5 verizon tmobile cross1000 cross200 shallow}
cases=${CASES:-stock,early-flush,dynamic,scheduled,nginx,nghttpd,h2o}

flags() { # profile -> the lab's link flags
    case $1 in
        clean) ;;
        loss1) echo --loss 1 ;;
        burst1) echo --loss 1 --loss-burst 3 ;;
        jitter5) echo --jitter-ms 5 ;;
        verizon) echo --rate-trace Verizon-LTE-short,Verizon-LTE-short ;;
        tmobile) echo --rate-trace TMobile-LTE-short,TMobile-LTE-short ;;
        cross1000) echo --cross 1 --queue-packets 1000 ;;
        cross200) echo --cross 1 --queue-packets 200 ;;
        shallow) echo --rate-mbit 10 --queue-packets 16 ;;
        *) echo "unknown profile $1" >&2; exit 2 ;;
    esac
}

cargo build --release -q -p integration-tests --bin lab
mkdir -p "$out"
for cc in "${ccs[@]}"; do
    for profile in $profiles; do
        # shellcheck disable=SC2046 # the flags are words
        set -- $(flags "$profile")
        echo "== $cc / $profile: lab --link tun --cc $cc $* --repeats $repeats"
        target/release/lab --link tun --cc "$cc" "$@" --repeats "$repeats" --seed 1 \
            --cases "$cases" --workloads simultaneous,late --urgencies explicit \
            --json "$out/$cc-$profile.json" | tee "$out/$cc-$profile.md"
    done
done
