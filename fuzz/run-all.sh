#!/usr/bin/env bash
# Runs every fuzz target for the given number of seconds each, one after the other (one
# fuzzer process at a time: the targets are single-threaded and the machine is shared).
#
#   fuzz/run-all.sh 600                 # 10 minutes per target
#   fuzz/run-all.sh 60 write_pipeline   # only the named targets
#
# Uses `cargo +nightly fuzz` when cargo-fuzz is installed (`cargo install cargo-fuzz`),
# otherwise builds the same instrumented binaries with plain cargo (see README.md).
# Corpora grow in fuzz/corpus/<target>/ (seeded from tls-flush/tests/fuzz_corpus/<target>/
# when that exists), crashes land in fuzz/artifacts/<target>/, each run's libFuzzer log in
# fuzz/artifacts/<target>.log. Exits non-zero if any target found a crash.
#
# Environment: SANITIZER (default `none`; `address` for ASan via cargo-fuzz) and TOOLCHAIN
# (default `nightly`).
set -euo pipefail
cd "$(dirname "$0")"

seconds="${1:?usage: run-all.sh SECONDS [TARGET...]}"
shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(priority_parse priority_update_parse read_observer write_pipeline)
fi
toolchain="${TOOLCHAIN:-nightly}"
sanitizer="${SANITIZER:-none}"
triple="$(rustc +"$toolchain" -vV | sed -n 's/^host: //p')"

# libFuzzer options per target: inputs long enough for the structured decoders.
extra_args() {
    case "$1" in
        write_pipeline) echo "-max_len=16384" ;;
        read_observer) echo "-max_len=32768" ;;
        *) echo "-max_len=4096" ;;
    esac
}

use_cargo_fuzz=0
if cargo +"$toolchain" fuzz --version >/dev/null 2>&1; then
    use_cargo_fuzz=1
    cargo +"$toolchain" fuzz build -s "$sanitizer"
else
    echo "cargo-fuzz not found: building with plain cargo" >&2
    RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
      -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
      -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks" \
        cargo +"$toolchain" build --release --bins --target "$triple"
fi

failed=()
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target" "artifacts/$target"
    seeds=()
    if [ -d "../tls-flush/tests/fuzz_corpus/$target" ]; then
        seeds=("../tls-flush/tests/fuzz_corpus/$target")
    fi
    log="artifacts/$target.log"
    # shellcheck disable=SC2207
    args=(-max_total_time="$seconds" -timeout=30 -print_final_stats=1 $(extra_args "$target")
          -artifact_prefix="artifacts/$target/")
    echo "== $target: ${seconds}s (log: fuzz/$log)"
    status=0
    if [ "$use_cargo_fuzz" = 1 ]; then
        cargo +"$toolchain" fuzz run -s "$sanitizer" "$target" "corpus/$target" "${seeds[@]}" \
            -- "${args[@]}" >"$log" 2>&1 || status=$?
    else
        "target/$triple/release/$target" "corpus/$target" "${seeds[@]}" "${args[@]}" \
            >"$log" 2>&1 || status=$?
    fi
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
    rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
    last="$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[^ ]+' || true)"
    echo "   exit $status; ${execs:-?} executions (${rate:-?}/s); $last"
    if [ "$status" != 0 ]; then
        failed+=("$target")
        grep -E 'panicked|violated|ERROR|Test unit written' "$log" | head -5 | cut -c1-300 || true
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "crashes in: ${failed[*]} (see fuzz/artifacts/)" >&2
    exit 1
fi
