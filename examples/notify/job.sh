#!/bin/sh
# A job that speaks the notify protocol from a shell, for
#   leaderrun --key billing --ready-timeout 60s --job-watchdog 30s -- ./job.sh
# It says READY=1 once it has started, then pings WATCHDOG=1 after every
# batch of work, with a STATUS= line `curl localhost:PORT/status` shows.
# A batch that hangs sends no ping: leaderrun stops the job and another
# host takes the key.
set -eu

# ... start-up: open connections, load state ...
systemd-notify --ready --status="started, epoch $LEADER_EPOCH"

# Ping at least twice per period, as systemd asks of its services.
half=$(awk "BEGIN { print ${WATCHDOG_USEC:-30000000} / 2000000 }")

n=0
while :; do
	n=$((n + 1))
	# ... one batch of work, never longer than the watchdog period ...
	sleep "$half"
	systemd-notify WATCHDOG=1 STATUS="batch $n done"
done
