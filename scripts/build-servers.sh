#!/usr/bin/env bash
# Builds the real etcd, etcdctl, Consul and kube-apiserver servers that
# leaderrun's integration tests run (tests/testcluster) into the
# repository's bin/.
#
#   scripts/build-servers.sh            build everything that is out of date
#   scripts/build-servers.sh etcd       only the etcd module (etcd, etcdctl)
#   scripts/build-servers.sh consul     only the consul module
#   scripts/build-servers.sh kube       only the kube module (kube-apiserver)
#
# Each server comes from its own Go module under tools/ (upstream etcd and
# Consul refuse `go install` because of their replace directives). A module's
# binaries are rebuilt only when the stamp in bin/.<module>.stamp no longer
# matches the sha256 of its go.mod, go.sum, Go sources, the Go version and the
# build flags, so a second run is a quick no-op. Needs only Go and the module
# proxy; the first Consul build takes several minutes, the first
# kube-apiserver build about eight on two cores.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$root/bin"
mkdir -p "$bin"

# A go.work elsewhere on the machine must not change what gets built, and the
# committed go.sum is the truth: never rewrite it during a build.
export GOWORK=off
buildflags=(-trimpath -mod=readonly "-ldflags=-s -w")

# Serialise concurrent runs (two shells, parallel CI steps) so they do not
# write the same binary at once.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$bin/.build-servers.lock"
	flock 9
fi

# stamp prints the fingerprint of a module's inputs.
stamp() {
	local dir="$1"
	{
		go version
		printf '%s\n' "${buildflags[@]}"
		(cd "$dir" && find . -name '*.go' -o -name go.mod -o -name go.sum) | LC_ALL=C sort |
			while read -r f; do
				printf '%s\n' "$f"
				cat "$dir/$f"
			done
	} | sha256sum | cut -d' ' -f1
}

# build MODULE BINARY... builds the packages ./BINARY of tools/MODULE into
# bin/BINARY unless the stamp says they are current.
build() {
	local module="$1"
	shift
	local dir="$root/tools/$module"
	local stampfile="$bin/.$module.stamp"
	local want have="" missing=0 b
	want="$(stamp "$dir")"
	[[ -f "$stampfile" ]] && have="$(cat "$stampfile")"
	for b in "$@"; do
		[[ -x "$bin/$b" ]] || missing=1
	done
	if [[ "$missing" == 0 && "$want" == "$have" ]]; then
		for b in "$@"; do
			echo "bin/$b: up to date"
		done
		return
	fi

	# Drop the stamp first: an interrupted build must not look current.
	rm -f "$stampfile"
	local pkgs=() start=$SECONDS
	for b in "$@"; do
		pkgs+=("./$b")
	done
	(cd "$dir" && go build "${buildflags[@]}" -o "$bin/" "${pkgs[@]}")
	echo "$want" >"$stampfile"
	for b in "$@"; do
		echo "bin/$b: built in $((SECONDS - start))s"
	done
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(etcd consul kube)
for target in "${targets[@]}"; do
	case "$target" in
	etcd) build etcd etcd etcdctl ;;
	consul) build consul consul ;;
	kube) build kube kube-apiserver ;;
	*)
		echo "build-servers.sh: unknown target $target (want etcd, consul or kube)" >&2
		exit 2
		;;
	esac
done
