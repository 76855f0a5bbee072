#!/bin/bash
# wakeups.sh: the wake-ups of an idle leaderrun leader, its guard and a
# standby at leaderrun's default timing, straight to the servers (no
# proxies), per thread. See docs/BENCHMARKS.md ("Where the memory and the
# wake-ups go").
#
#   wakeups.sh BIN_DIR WINDOW_SECONDS -- BACKEND-OPTIONS...
#
# e.g. wakeups.sh bin 20 -- --backend etcd --etcd-endpoints http://127.0.0.1:2379
#
# Starts a leader (child: sleep) and a standby on a fresh key, waits 35s
# (past the binary's start-up trim at 30s), then counts each thread's
# voluntary context switches (/proc/PID/task/*/status) over the window.
set -eu
bin=$1 window=$2
shift 3
key=wakeups-$$-$RANDOM
dir=$(mktemp -d)
trap 'kill $leader $standby 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
"$bin/leaderrun" -q "$@" --key "$key" -- sleep 100000 2>"$dir/leader.err" &
leader=$!
sleep 3
"$bin/leaderrun" -q "$@" --key "$key" -- sleep 100000 2>"$dir/standby.err" &
standby=$!
sleep 35
guard=$(pgrep -P "$leader" -f leaderrun-guard || pgrep -P "$leader" -f 'leaderrun' | head -1 || true)
# snap PID: "TID COMM VOLUNTARY" for every thread
snap() {
	for t in /proc/$1/task/*; do
		printf '%s %s %s\n' "${t##*/}" "$(tr ' ' _ <"$t/comm")" \
			"$(awk '/^voluntary_ctxt_switches/{print $2}' "$t/status")"
	done 2>/dev/null
}
for p in leader guard standby; do snap "${!p}" >"$dir/$p.0"; done
sleep "$window"
for p in leader guard standby; do snap "${!p}" >"$dir/$p.1"; done
read -r load _ </proc/loadavg
echo "window ${window}s, load $load"
for p in leader guard standby; do
	awk -v who="$p" -v w="$window" '
		FNR == NR { before[$1] = $3; next }
		{ d = $3 - before[$1]; tot += d; per = per sprintf(" %s:%d", $1, d) }
		END { printf "%-8s %4d in %ds = %5.1f/min  threads:%s\n", who, tot, w, tot*60/w, per }' \
		"$dir/$p.0" "$dir/$p.1"
done
for p in leader standby; do
	if ! kill -0 "${!p}" 2>/dev/null; then echo "$p exited:"; cat "$dir/$p.err"; fi
done
