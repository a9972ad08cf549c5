#!/usr/bin/env bash
# Installs the supply-chain checker CI runs over the lock file (cargo-deny, from crates.io).
# Idempotent; safe to re-run.
set -euo pipefail

if ! command -v cargo-deny >/dev/null 2>&1; then
    cargo install --locked cargo-deny --version '^0.20'
fi
echo "ci tools: $(cargo deny --version)"
