#!/bin/sh
# Let a running systemd forget a removed leaderrun@.service. Running
# instances are left alone; stop them before removing the package.
set -e
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
	systemctl daemon-reload || true
fi
