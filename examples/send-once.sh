#!/bin/sh
# send-once.sh: pipe a message (headers, blank line, body) to the mailer at
# most once per LEADER_RUN_ID, whichever host runs the job and however often
# a run is retried.
#
#   leaderrun --backend etcd --key billing --once-per 24h -- \
#       sh -c 'make-invoices | send-once.sh'
#
# A mail server cannot check an epoch, and a message handed over cannot be
# called back, so fencing cannot make sending safe (docs/FENCING.md). What
# can be made safe is the decision to send: the run claims its id in etcd,
# in a transaction that also requires this job's leadership
# (etcd-fence.sh claim), and sends only if the claim is new. With
# --once-per or --run-id, LEADER_RUN_ID is the slot's id, the same on every
# retry of the slot, so a retry after a crash, or a stale leader waking up
# late, finds the claim and sends nothing. The message carries the run id
# as its Message-ID, for receivers that drop duplicates.
#
# If the mailer fails, the claim is withdrawn (while this job still leads)
# so that a retry sends; a mailer that fails after it queued the message
# may then deliver it twice. SENDMAIL (default "sendmail -t -i") is the
# mailer command. Exit status: 0 sent or sent before, 1 not leading or the
# mailer failed, 2 usage or etcd error.
set -eu

: "${LEADER_RUN_ID:?run this from a job started by leaderrun}"
claim="/${LEADERRUN_PREFIX:-leaderrun}-runs/$LEADER_KEY/$LEADER_RUN_ID"
[ -z "${LEADERRUN_ETCD_ENDPOINTS:-}" ] || export ETCDCTL_ENDPOINTS="$LEADERRUN_ETCD_ENDPOINTS"
[ -z "${LEADERRUN_ETCD_CACERT:-}" ] || export ETCDCTL_CACERT="$LEADERRUN_ETCD_CACERT"
[ -z "${LEADERRUN_ETCD_CERT:-}" ] || export ETCDCTL_CERT="$LEADERRUN_ETCD_CERT"
[ -z "${LEADERRUN_ETCD_KEY:-}" ] || export ETCDCTL_KEY="$LEADERRUN_ETCD_KEY"
FENCE_ETCD_LOCK=${FENCE_ETCD_LOCK:-$(etcd-fence.sh lock)} || exit 1
export FENCE_ETCD_LOCK

msg=$(cat)
rc=0
etcd-fence.sh claim "$claim" || rc=$?
case $rc in
0) ;;
3)
	echo "send-once: run $LEADER_RUN_ID sent its message before; not sending it again" >&2
	exit 0
	;;
*) exit "$rc" ;;
esac
if ! { printf 'Message-ID: <%s.%s@leaderrun>\n' "$LEADER_RUN_ID" "$(printf '%s' "$LEADER_KEY" | tr / .)"
	printf '%s\n' "$msg"; } | ${SENDMAIL:-sendmail -t -i}; then
	echo "send-once: the mailer failed; withdrawing the claim of run $LEADER_RUN_ID so that a retry sends" >&2
	printf 'create("%s") = "%s"\n\ndel %s\n\n\n' "$FENCE_ETCD_LOCK" "$LEADER_EPOCH" "$claim" | ${ETCDCTL:-etcdctl} txn >/dev/null || true
	exit 1
fi
echo "send-once: sent the message of run $LEADER_RUN_ID" >&2
