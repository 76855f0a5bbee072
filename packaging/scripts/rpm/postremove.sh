#!/bin/sh
# Let a running systemd forget a removed leaderrun@.service. Running
# instances were stopped by the preremove script.
set -e
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
	systemctl daemon-reload || true
fi
