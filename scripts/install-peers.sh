#!/usr/bin/env bash
# Installs the real peer servers the lab measures beside ours, from Debian:
# nginx, nghttpd (nghttp2-server), h2o and Apache httpd (apache2-bin: the binary and its
# modules, mod_ssl and mod_http2 included, without the apache2 package's system service and
# default site). Idempotent; run as root (CI is root). Safe to re-run.
#
# The lab starts each peer itself, from a configuration it writes into a temporary
# directory (integration-tests/src/peers.rs, from the templates in integration-tests/peers/).
# The packages' own system services are not wanted: they are kept from starting during
# the install (policy-rc.d), stopped if one runs anyway, and disabled, so that none stays
# running or holds port 80 or 443.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

# program:package pairs; a program counts as installed when it is in PATH or /usr/sbin.
peers=(nginx:nginx nghttpd:nghttp2-server h2o:h2o apache2:apache2-bin)
# Modules the lab's Apache configuration loads.
apache_modules=(mod_mpm_event.so mod_authz_core.so mod_ssl.so mod_http2.so)
# System services the packages ship (nginx-common, h2o; apache2-bin ships none, but an
# apache2 package installed earlier does).
services=(nginx h2o apache2 apache-htcacheclean)

have() {
    command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]
}

need_apt=()
for pair in "${peers[@]}"; do
    program=${pair%%:*}
    package=${pair#*:}
    have "$program" || need_apt+=("$package")
done
for module in "${apache_modules[@]}"; do
    if [ ! -f "/usr/lib/apache2/modules/$module" ]; then
        need_apt+=(apache2-bin)
        break
    fi
done

if [ ${#need_apt[@]} -gt 0 ]; then
    # Keep the packages' services from starting during the install (the Debian way: a
    # policy-rc.d that denies every action), unless the machine already has such a policy.
    policy=/usr/sbin/policy-rc.d
    own_policy=false
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# Temporary: written by scripts/install-peers.sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        own_policy=true
        trap 'rm -f "$policy"' EXIT
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "${need_apt[@]}" >/dev/null
    if $own_policy; then
        rm -f "$policy"
        trap - EXIT
    fi
fi

# Whatever the install did (or an earlier one): stop and disable the system services.
for service in "${services[@]}"; do
    [ -e "/etc/init.d/$service" ] || [ -e "/lib/systemd/system/$service.service" ] || continue
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        systemctl stop "$service" >/dev/null 2>&1 || true
        systemctl disable --quiet "$service" >/dev/null 2>&1 || true
    else
        if [ -x "/etc/init.d/$service" ]; then
            # policy-rc.d does not apply to a direct call of the init script.
            "/etc/init.d/$service" stop >/dev/null 2>&1 || true
        fi
        # Remove the boot-time links too (systemd's, kept offline, and SysV's).
        if command -v systemctl >/dev/null 2>&1; then
            systemctl disable --quiet "$service" >/dev/null 2>&1 || true
        fi
        update-rc.d "$service" disable >/dev/null 2>&1 || true
    fi
done

# None of them may be left listening on 80 or 443.
if command -v ss >/dev/null 2>&1; then
    taken=$(ss -Hltnp '( sport = :80 or sport = :443 )' 2>/dev/null |
        grep -E '"(nginx|h2o|apache2|nghttpd)"' || true)
    if [ -n "$taken" ]; then
        echo "install-peers: a peer's system service still listens on port 80 or 443:" >&2
        echo "$taken" >&2
        exit 1
    fi
fi

for pair in "${peers[@]}"; do
    program=${pair%%:*}
    if ! have "$program"; then
        echo "install-peers: $program is still missing after the install" >&2
        exit 1
    fi
done

path="$PATH:/usr/sbin:/sbin"
echo "peers: $(PATH=$path nginx -v 2>&1 | cut -d' ' -f3), $(PATH=$path nghttpd --version 2>&1 | head -1), $(PATH=$path h2o --version 2>&1 | head -1), $(PATH=$path apache2 -v 2>&1 | head -1 | cut -d' ' -f3)"
