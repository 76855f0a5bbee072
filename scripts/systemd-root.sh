#!/usr/bin/env bash
# Builds the Debian bookworm root in which tests/systemdtest boots a real
# systemd: a debootstrap minbase with systemd, dbus, iproute2 and procps.
#
#   scripts/systemd-root.sh [DIR]     (default: bin/.systemd-root)
#
# The root is built once and reused while DIR/.stamp matches this script's
# recipe; a warm run only compares the stamp. Tests never write into it:
# each boot puts an overlay on top. The Debian mirror is the one this
# machine's own apt sources use for bookworm, read here at run time.
# Needs root and debootstrap (scripts/install-deps.sh installs it).
set -euo pipefail

cd "$(dirname "$0")/.."
dir=${1:-bin/.systemd-root}
suite=bookworm
include=systemd,systemd-sysv,dbus,iproute2,procps
# Units that cannot work in a PID namespace without their own devices, or
# that only slow the boot down; masked so a booted root is "running".
mask="systemd-logind.service e2scrub_reap.service e2scrub_all.timer getty@.service console-getty.service systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer fstrim.timer"
recipe="suite=$suite include=$include mask=$mask v=3"

if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$recipe" ]; then
	exit 0
fi

# mirror prints the first URI of the machine's apt sources (one-line or
# deb822 format) that serves $suite's main component.
mirror() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk -v s="$suite" '$1 == "deb" {
			i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
			if ($(i+1) == s) for (j = i+2; j <= NF; j++) if ($j == "main") { print $i; exit }
		}' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk -v s="$suite" '
			function flush() {
				if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " s " ") && (" " comps " ") ~ / main /) { split(uris, u, " "); print u[1]; found = 1 }
				types = uris = suites = comps = ""
			}
			/^[ \t]*$/ { flush(); if (found) exit; next }
			/^#/ { next }
			tolower($1) == "types:" { $1 = ""; types = $0 }
			tolower($1) == "uris:" { $1 = ""; uris = $0 }
			tolower($1) == "suites:" { $1 = ""; suites = $0 }
			tolower($1) == "components:" { $1 = ""; comps = $0 }
			tolower($1) == "enabled:" && tolower($2) == "no" { types = "" }
			END { if (!found) flush() }
		' "$f"
	done
}
url=$(mirror | head -n1)
if [ -z "$url" ]; then
	echo "systemd-root: no apt source for $suite main in /etc/apt/sources.list(.d); add one or build the root elsewhere" >&2
	exit 1
fi
command -v debootstrap >/dev/null || { echo "systemd-root: debootstrap missing: run scripts/install-deps.sh" >&2; exit 1; }

mkdir -p "$(dirname "$dir")"
# One build at a time; a second caller waits and then finds the stamp.
exec 9>"$dir.lock"
flock 9
if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$recipe" ]; then
	exit 0
fi

start=$(date +%s)
tmp="$dir.tmp"
rm -rf "$tmp" "$dir"
echo "systemd-root: debootstrap $suite into $dir (about a minute)"
# The root is a throwaway test fixture: dpkg need not fsync every file.
mkdir -p "$tmp/etc/dpkg/dpkg.cfg.d"
echo force-unsafe-io >"$tmp/etc/dpkg/dpkg.cfg.d/unsafe-io"
if ! debootstrap --variant=minbase --include="$include" "$suite" "$tmp" "$url" >"$dir.log" 2>&1; then
	tail -n 20 "$dir.log" >&2
	echo "systemd-root: debootstrap failed; full log in $dir.log" >&2
	exit 1
fi
for u in $mask; do
	ln -sf /dev/null "$tmp/etc/systemd/system/$u"
done
# A machine id, so journald keeps a journal and units see a stable host.
chroot "$tmp" systemd-machine-id-setup >/dev/null 2>&1 || true
echo leaderrun-test >"$tmp/etc/hostname"
rm -rf "$tmp/var/cache/apt/archives/"*.deb
echo "$recipe" >"$tmp/.stamp"
mv "$tmp" "$dir"
echo "systemd-root: ready in $(($(date +%s) - start))s"
