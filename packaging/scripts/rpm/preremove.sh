#!/bin/sh
# Removing the package (not upgrading it) stops every running
# leaderrun@KEY while its unit file is still there: each command gets its
# stop signal and each lease is released. Left running, an instance would
# lose its unit's settings at the next daemon-reload (no watchdog, no
# notifications, its stop counted as a failure).
set -e
case "$1" in
remove | 0) ;; # deb: remove; rpm: no version left after this
*) exit 0 ;;
esac
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
	systemctl stop 'leaderrun@*.service' || true
fi
