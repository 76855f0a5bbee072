#!/usr/bin/env bash
# Writes the packages' changelogs from packaging/changelog, the release
# history in Debian's format (newest entry first).
#
#   changelog.sh deb VERSION MAINTAINER EPOCH COMMIT   Debian changelog
#   changelog.sh rpm VERSION MAINTAINER EPOCH COMMIT   nfpm's changelog YAML
#                                                      for the .rpm
#
# A build whose VERSION is not the newest entry's (a commit between
# releases, 0.0.0~git<time>.<commit>) gets an entry of its own on top, dated EPOCH
# (the commit's time, so the same commit gives the same package), saying
# so: both the .deb and the .rpm want their own version to be the newest
# entry's. A release without its entry is an error.
set -euo pipefail
format=$1 version=$2 maintainer=$3 epoch=$4 commit=$5
src=$(dirname "$0")/changelog

log() {
	local top
	top=$(sed -n '1s/^leaderrun (\([^)]*\)).*/\1/p' "$src")
	if [ "$top" != "$version" ]; then
		case $version in
		*~git*) ;;
		*)
			echo "$0: $src has no entry for release $version (its newest is $top)" >&2
			exit 1
			;;
		esac
		printf 'leaderrun (%s) UNRELEASED; urgency=medium\n\n' "$version"
		printf '  * Built from commit %s, not a release: the changes since\n' "$commit"
		printf '    %s are in the git history.\n\n' "$top"
		printf ' -- %s  %s\n\n' "$maintainer" "$(TZ=UTC LC_ALL=C date -R -d "@$epoch")"
	fi
	cat "$src"
}

case $format in
deb) log ;;
rpm)
	# Each entry becomes one item of nfpm's list, its bullets one note each;
	# the version gains the .rpm's release (-1).
	log | while IFS= read -r line; do
		case $line in
		"leaderrun ("*)
			v=${line#leaderrun (}
			v=${v%%)*}
			note="" notes=()
			;;
		"  * "*)
			[ -n "$note" ] && notes+=("$note")
			note=${line#  \* }
			;;
		"    "*) note="$note ${line#    }" ;;
		" -- "*)
			[ -n "$note" ] && notes+=("$note")
			who=${line# -- }
			when=${who##*  }
			who=${who%  *}
			printf -- '- semver: "%s-1"\n  date: %s\n  packager: "%s"\n  changes:\n' \
				"$v" "$(TZ=UTC date -d "$when" +%Y-%m-%dT%H:%M:%SZ)" "$who"
			for n in "${notes[@]}"; do
				printf '    - note: "%s"\n' "${n//\"/\\\"}"
			done
			;;
		esac
	done
	;;
*)
	echo "usage: $0 deb|rpm VERSION MAINTAINER EPOCH COMMIT" >&2
	exit 2
	;;
esac
