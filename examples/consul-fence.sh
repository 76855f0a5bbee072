#!/bin/sh
# consul-fence.sh: write to Consul's KV store only as the newest leader.
#
# Run by a job that leaderrun started (it reads LEADER_KEY, LEADER_EPOCH,
# LEADERRUN_PREFIX and LEADERRUN_CONSUL_ADDR, the agent leaderrun used, from
# the environment leaderrun gives it; LEADERRUN_CONSUL_CA_FILE,
# CONSUL_HTTP_TOKEN and CONSUL_CACERT when set). Needs curl and jq.
#
#   consul-fence.sh put billing/last-run "$(date +%s)"
#
# A fence key (FENCE_CONSUL_KEY, default <prefix>-fence/<key>) holds the
# highest epoch that wrote. "put" reads it; an epoch below it is a stale
# leader's, rejected. Otherwise one transaction sets the fence to our epoch
# with a check-and-set on the ModifyIndex just read, and writes the value:
# if another leader moved the fence in between, Consul rolls both back and
# the fence is read again. Leaderrun's Consul epochs are Raft indexes, so a
# later leadership always has the higher one. Exit status: 0 written, 1
# rejected (stale leader), 2 usage or Consul error. See docs/FENCING.md.
set -eu

: "${LEADER_KEY:?run this from a job started by leaderrun}" "${LEADER_EPOCH:?run this from a job started by leaderrun}"
[ "${1:-}" = put ] && [ $# -eq 3 ] || { echo "usage: consul-fence.sh put KEY VALUE" >&2; exit 2; }
key=$2 value=$3
fence=${FENCE_CONSUL_KEY:-${LEADERRUN_PREFIX:-leaderrun}-fence/$LEADER_KEY}
addr=${LEADERRUN_CONSUL_ADDR:-${CONSUL_HTTP_ADDR:-127.0.0.1:8500}}
addr=${addr%%,*} # the first of a list of servers
CONSUL_CACERT=${LEADERRUN_CONSUL_CA_FILE:-${CONSUL_CACERT:-}}
case "$addr" in http://* | https://*) ;; *) addr="http://$addr" ;; esac

consul() {
	curl -sS ${CONSUL_CACERT:+--cacert "$CONSUL_CACERT"} \
		${CONSUL_HTTP_TOKEN:+-H "X-Consul-Token: $CONSUL_HTTP_TOKEN"} "$@"
}

for _ in 1 2 3 4 5 6 7 8; do
	# The fence as it is now: its ModifyIndex and the highest epoch.
	resp=$(consul -w '\n%{http_code}' "$addr/v1/kv/$fence?consistent") || exit 2
	status=${resp##*
}
	body=${resp%"$status"}
	case "$status" in
	404) index=0 highest=0 ;;
	200)
		index=$(printf '%s' "$body" | jq -r '.[0].ModifyIndex')
		highest=$(printf '%s' "$body" | jq -r '.[0].Value // "" | @base64d')
		;;
	*) echo "consul-fence: read $fence: HTTP $status: $body" >&2; exit 2 ;;
	esac
	if [ "${highest:-0}" -gt "$LEADER_EPOCH" ]; then
		echo "consul-fence: write to $key rejected: epoch $LEADER_EPOCH is stale, epoch $highest has written" >&2
		exit 1
	fi
	# Set the fence only if it is still as read (cas; index 0: only if it
	# does not exist), and write, in one transaction.
	ops=$(jq -nc --arg f "$fence" --arg e "$LEADER_EPOCH" --argjson i "$index" --arg k "$key" --arg v "$value" \
		'[{KV: {Verb: "cas", Key: $f, Value: ($e | @base64), Index: $i}},
		  {KV: {Verb: "set", Key: $k, Value: ($v | @base64)}}]')
	status=$(printf '%s' "$ops" | consul -o /dev/null -w '%{http_code}' -X PUT --data-binary @- "$addr/v1/txn") || exit 2
	case "$status" in
	200) exit 0 ;;
	409) ;; # the fence moved since we read it: read it again
	*) echo "consul-fence: transaction: HTTP $status" >&2; exit 2 ;;
	esac
done
echo "consul-fence: the fence $fence keeps moving; giving up" >&2
exit 2
