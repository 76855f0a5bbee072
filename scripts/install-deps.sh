#!/usr/bin/env bash
# Installs the Debian packages leaderrun's tests need, when they are missing.
# Idempotent; needs root (or sudo) only when something is missing.
set -euo pipefail

# command:package pairs.
need=()
for pair in flock:util-linux systemd-analyze:systemd rpm:rpm zsh:zsh man:man-db cc:gcc; do
	cmd=${pair%%:*} pkg=${pair##*:}
	command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
# ZooKeeper test ensembles run the Debian server jars on Java.
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
[ -e /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
# The package test lints the .deb and the .rpm.
for pair in lintian:lintian rpmlint:rpmlint; do
	cmd=${pair%%:*} pkg=${pair##*:}
	command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
# PostgreSQL test servers (tests/testcluster/postgres.go) run Debian's
# server binaries, which live outside PATH.
{ [ -x /usr/lib/postgresql/15/bin/initdb ] || [ -x "$(pg_config --bindir 2>/dev/null)/initdb" ]; } || need+=(postgresql)
# tests/alerts: promtool checks the alert rules and a real Prometheus
# (tests/testcluster/prometheus.go) scrapes leaderruns. The package also
# sets up a system service of its own, which the tests do not use.
for pair in prometheus:prometheus promtool:prometheus; do
	cmd=${pair%%:*} pkg=${pair##*:}
	command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
# tests/systemdtest: a Debian root to boot systemd in, and the namespace
# tools to boot and enter it.
for pair in debootstrap:debootstrap unshare:util-linux nsenter:util-linux; do
	cmd=${pair%%:*} pkg=${pair##*:}
	command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
# The DynamoDB test server (tests/testcluster/dynalite.go) is dynalite,
# from npm, on Node.js.
command -v npm >/dev/null 2>&1 || need+=(npm)

if [ ${#need[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" -ne 0 ] && sudo="sudo"
	echo "installing: ${need[*]}"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${need[@]}" >/dev/null
fi

# dynalite, pinned, into bin/dynalite of the repository (kept between runs;
# npm's own cache makes a reinstall cheap). Nothing is installed globally.
dynalite_version=4.0.0
root=$(cd "$(dirname "$0")/.." && pwd)
prefix="$root/bin/dynalite"
installed=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$prefix/node_modules/dynalite/package.json" 2>/dev/null | head -n1 || true)
if [ "$installed" != "$dynalite_version" ] || [ ! -x "$prefix/node_modules/.bin/dynalite" ]; then
	echo "installing: dynalite@$dynalite_version (npm, into bin/dynalite)"
	mkdir -p "$prefix"
	npm install --prefix "$prefix" --no-audit --no-fund --no-save --loglevel=error "dynalite@$dynalite_version" >/dev/null
fi
