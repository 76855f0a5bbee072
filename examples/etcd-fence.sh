#!/bin/sh
# etcd-fence.sh: write to etcd only while this job's leadership lasts.
#
# Run by a job that leaderrun started on the etcd backend (it reads
# LEADER_KEY, LEADER_EPOCH, LEADERRUN_PREFIX, and the endpoints and TLS
# files leaderrun used, LEADERRUN_ETCD_ENDPOINTS, _CACERT, _CERT and _KEY,
# from the environment leaderrun gives it; etcdctl gets them as its own
# ETCDCTL_* variables):
#
#   FENCE_ETCD_LOCK=$(etcd-fence.sh lock) || exit 1   # once, at the job's start
#   etcd-fence.sh put /billing/last-run "$(date +%s)"  # each write
#
# "lock" prints the job's own election key: the key whose CreateRevision is
# LEADER_EPOCH. "put" is one etcd transaction that writes only if that key
# still exists with that CreateRevision. etcd deletes the key with its lease,
# so a leader frozen past its lease, or one whose leadership ended in any
# other way, has every later write rejected by etcd itself, in the same
# round trip as the write. "claim" creates a key only if it does not exist
# yet, under the same condition: a ledger of what must happen once
# (send-once.sh). Exit status: 0 written, 1 rejected (stale leader), 2 usage
# or etcd error, 3 claimed before. See docs/FENCING.md.
set -eu

: "${LEADER_KEY:?run this from a job started by leaderrun}" "${LEADER_EPOCH:?run this from a job started by leaderrun}"
dir="/${LEADERRUN_PREFIX:-leaderrun}/$LEADER_KEY/@"
etcdctl=${ETCDCTL:-etcdctl}
[ -z "${LEADERRUN_ETCD_ENDPOINTS:-}" ] || export ETCDCTL_ENDPOINTS="$LEADERRUN_ETCD_ENDPOINTS"
[ -z "${LEADERRUN_ETCD_CACERT:-}" ] || export ETCDCTL_CACERT="$LEADERRUN_ETCD_CACERT"
[ -z "${LEADERRUN_ETCD_CERT:-}" ] || export ETCDCTL_CERT="$LEADERRUN_ETCD_CERT"
[ -z "${LEADERRUN_ETCD_KEY:-}" ] || export ETCDCTL_KEY="$LEADERRUN_ETCD_KEY"

# quote makes one line of text an argument of etcdctl txn: in double quotes,
# with backslashes and quotes escaped.
quote() {
	case "$1" in *'
'*) echo "etcd-fence: a key or value must be one line" >&2; exit 2 ;; esac
	printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"
}

case "${1:-}" in
lock)
	# The candidates' keys with their CreateRevisions; ours is the one
	# created by our epoch.
	key=$("$etcdctl" get --prefix "$dir" -w fields | awk -v epoch="$LEADER_EPOCH" '
		$1 == "\"Key\"" { sub(/^"Key" : "/, ""); sub(/"$/, ""); key = $0 }
		$1 == "\"CreateRevision\"" && $3 == epoch { print key; found = 1; exit }
		END { exit !found }') || {
		echo "etcd-fence: no election key of epoch $LEADER_EPOCH under $dir: this job no longer leads" >&2
		exit 1
	}
	printf '%s\n' "$key"
	;;
put)
	[ $# -eq 3 ] || { echo "usage: etcd-fence.sh put KEY VALUE" >&2; exit 2; }
	: "${FENCE_ETCD_LOCK:?set FENCE_ETCD_LOCK=\$(etcd-fence.sh lock) at the job's start}"
	# Compares, a blank line, the writes if they hold, a blank line, the
	# requests if they do not (none).
	out=$(printf 'create("%s") = "%s"\n\nput %s %s\n\n\n' "$FENCE_ETCD_LOCK" "$LEADER_EPOCH" "$(quote "$2")" "$(quote "$3")" |
		"$etcdctl" txn) || exit 2
	case "$out" in
	SUCCESS*) ;;
	FAILURE*)
		echo "etcd-fence: write to $2 rejected: epoch $LEADER_EPOCH no longer leads $LEADER_KEY" >&2
		exit 1
		;;
	*)
		echo "etcd-fence: unexpected answer from etcdctl txn: $out" >&2
		exit 2
		;;
	esac
	;;
claim)
	# Create KEY only if it does not exist yet, while this leadership
	# lasts: a ledger entry for something that must happen once.
	[ $# -eq 2 ] || { echo "usage: etcd-fence.sh claim KEY" >&2; exit 2; }
	: "${FENCE_ETCD_LOCK:?set FENCE_ETCD_LOCK=\$(etcd-fence.sh lock) at the job's start}"
	out=$(printf 'create("%s") = "%s"\ncreate(%s) = "0"\n\nput %s %s\n\nget %s\n\n' \
		"$FENCE_ETCD_LOCK" "$LEADER_EPOCH" "$(quote "$2")" "$(quote "$2")" "$(quote "epoch $LEADER_EPOCH")" "$(quote "$2")" |
		"$etcdctl" txn) || exit 2
	case "$out" in
	SUCCESS*) ;;
	FAILURE*"$2"*)
		echo "etcd-fence: $2 was claimed before" >&2
		exit 3
		;;
	FAILURE*)
		echo "etcd-fence: claim of $2 rejected: epoch $LEADER_EPOCH no longer leads $LEADER_KEY" >&2
		exit 1
		;;
	*)
		echo "etcd-fence: unexpected answer from etcdctl txn: $out" >&2
		exit 2
		;;
	esac
	;;
*)
	echo "usage: etcd-fence.sh lock | put KEY VALUE | claim KEY" >&2
	exit 2
	;;
esac
