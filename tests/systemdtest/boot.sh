#!/bin/sh
# Runs as PID 1 of a fresh PID namespace (unshare --pid --fork --mount
# --uts --ipc) and becomes the systemd of the root ROOT:
#   boot.sh ROOT UNIFIED_CGROUP NAMED_CGROUP
# The two cgroup directories are fresh ones made for this boot, in the
# cgroup v2 (unified) and the name=systemd hierarchies; systemd makes its
# slices and scopes under them, so the test can remove them all afterwards.
set -eu
root=$1 unified=$2 named=$3
mount --make-rprivate /
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=0755 tmpfs "$root/run"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
hostname leaderrun-test
echo $$ >"$unified/cgroup.procs"
[ -z "$named" ] || echo $$ >"$named/cgroup.procs"
exec chroot "$root" /usr/bin/env -i container=other /lib/systemd/systemd --system --log-target=journal
