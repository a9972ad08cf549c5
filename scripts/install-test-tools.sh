#!/usr/bin/env bash
# Installs the real clients the interop tests drive (issue 5): curl, nghttp/h2load,
# headless Chromium, and python h2. Idempotent; run as root (CI is root). Safe to re-run.
set -euo pipefail

need_apt=()
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v nghttp >/dev/null 2>&1 || need_apt+=(nghttp2-client)
command -v h2load >/dev/null 2>&1 || need_apt+=(nghttp2-client)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if ! python3 -c 'import h2' >/dev/null 2>&1; then
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore 'h2>=4,<5'
fi

echo "test tools: $(curl --version | head -1 | cut -d' ' -f1-2), $(nghttp --version 2>&1 | head -1), chromium $(chromium --version 2>/dev/null | awk '{print $2}'), python h2 $(python3 -c 'import h2; print(h2.__version__)')"
