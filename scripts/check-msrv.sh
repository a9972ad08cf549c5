#!/usr/bin/env bash
# Checks the MSRV stated in the workspace Cargo.toml (`rust-version`): the toolchain that
# builds CI is that version (or the check runs under `cargo +MSRV` when rustup has it), and
# no dependency in the lock file needs a newer Rust.
set -euo pipefail
cd "$(dirname "$0")/.."

msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$msrv" ] || { echo "no rust-version in Cargo.toml" >&2; exit 1; }

if rustc --version | grep -q "^rustc ${msrv}\(\.0\)\? "; then
    toolchain=()
elif rustup toolchain list 2>/dev/null | grep -q "^${msrv}"; then
    toolchain=("+${msrv}")
else
    echo "MSRV ${msrv}: toolchain not installed (rustc is $(rustc --version)); install it with rustup" >&2
    exit 1
fi
echo "== MSRV ${msrv}: cargo ${toolchain[*]} check"
cargo "${toolchain[@]}" check --workspace --all-targets --all-features --locked

# Every dependency's own rust-version must not exceed ours.
cargo metadata --format-version 1 --locked | python3 -c '
import json, sys
msrv = tuple(int(x) for x in sys.argv[1].split("."))
too_new = []
for p in json.load(sys.stdin)["packages"]:
    rv = p.get("rust_version")
    if rv and tuple(int(x) for x in rv.split(".")) > msrv + (0,) * (3 - len(msrv)):
        too_new.append("%s %s needs Rust %s" % (p["name"], p["version"], rv))
if too_new:
    sys.exit("dependencies above the MSRV:\n" + "\n".join(too_new))
print("MSRV", sys.argv[1], "covers every dependency")
' "$msrv"
