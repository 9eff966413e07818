#!/bin/sh
# System packages some tests need (Debian's adb, Chromium for the dashboard test, nginx for
# `nginx -t` on the compose trial's load balancer config, systemd-analyze for the bridge's unit,
# a JDK for the kotlinc check (JUnit 4 and Hamcrest are then found in /usr/share/java), curl
# and openssl for the newcomer recipes of docs/index.md).
# Installed only where we can: as root with apt-get (CI runs as root). Elsewhere the tests
# that need them skip with a reason — except under CI=true, where they fail instead.
set -u
want=""
[ -x /usr/bin/adb ] || want="$want adb"
[ -x /usr/bin/chromium ] || want="$want chromium"
[ -x /usr/sbin/nginx ] || want="$want nginx-light"
[ -x /usr/bin/systemd-analyze ] || want="$want systemd"
command -v javac >/dev/null 2>&1 || want="$want openjdk-17-jdk-headless"
[ -f /usr/share/java/junit4.jar ] || want="$want junit4"
[ -f /usr/share/java/hamcrest-2.2.jar ] || want="$want libhamcrest-java"
command -v curl >/dev/null 2>&1 || want="$want curl"
command -v openssl >/dev/null 2>&1 || want="$want openssl"
[ -z "$want" ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "system_deps: not root or no apt-get; missing:$want (their tests will skip outside CI)" >&2
    exit 0
fi
echo "system_deps: installing$want" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || true
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $want >/dev/null 2>&1 \
    || echo "system_deps: apt-get install$want failed" >&2
exit 0
