#!/usr/bin/env bash
# packaging/release.sh x.y.z: the release tarballs of plugvisor, as `make
# release VERSION=x.y.z` runs it. For each of $ARCHS (default: amd64
# arm64) it builds a static linux binary stamped with vx.y.z and the
# commit, and packs it with LICENSE, README.md, CHANGELOG.md, the man
# pages, the systemd unit and an example config into
# plugvisor-x.y.z-linux-ARCH.tar.gz under $OUT (default .bin/release),
# then writes SHA256SUMS. It checks what it made: the sums, each
# tarball's files, and that the binary of this machine's arch reports
# the version. Same commit, same tarballs: times, owners and order are
# fixed (SOURCE_DATE_EPOCH is the commit's time).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "release: $*" >&2; exit 1; }

version="${1:-}"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
	die "give the version as x.y.z (make release VERSION=0.2.0), not \"$version\""
tag="v$version"
go="${GO:-go}"
archs="${ARCHS:-amd64 arm64}"
out="${OUT:-.bin/release}"

release="$(sed -n 's/^const Release = "\(.*\)"$/\1/p' version/version.go)"
[ "$release" = "$tag" ] ||
	die "version/version.go says Release = \"$release\": set it to \"$tag\" first, with its section in CHANGELOG.md"
grep -Eq "^## \[?$version\]?( |$)" CHANGELOG.md || die "CHANGELOG.md has no section \"## $version - DATE\": write the release notes first"

commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [ "$commit" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then
	commit="$commit-dirty"
fi
SOURCE_DATE_EPOCH="$(git log -1 --format=%ct 2>/dev/null || date +%s)"
export SOURCE_DATE_EPOCH
ldflags="-s -w -X github.com/plugvisor/plugvisor/version.Version=$tag -X github.com/plugvisor/plugvisor/version.Commit=$commit"
host="$("$go" env GOARCH)"

rm -rf "$out"
stage="$out/stage"
mkdir -p "$stage"
build() { # build ARCH DIR: the binary of ARCH into DIR
	CGO_ENABLED=0 GOOS=linux GOARCH="$1" "$go" build -trimpath -ldflags "$ldflags" -o "$2/plugvisor" ./cmd/plugvisor
}

# The man pages, written by a binary of this machine's arch (the text is
# the same for every arch).
hostbin="$stage/host"
build "$host" "$hostbin"
"$hostbin/plugvisor" man "$stage/man1" >/dev/null

for arch in $archs; do
	name="plugvisor-$version-linux-$arch"
	dir="$stage/$name"
	echo "release: $name"
	mkdir -p "$dir/man/man1" "$dir/systemd"
	if [ "$arch" = "$host" ]; then
		cp "$hostbin/plugvisor" "$dir/plugvisor"
	else
		build "$arch" "$dir"
	fi
	cp LICENSE README.md CHANGELOG.md packaging/agent.hcl "$dir/"
	cp packaging/systemd/plugvisor.service "$dir/systemd/"
	cp "$stage"/man1/*.1 "$dir/man/man1/"
	tar -C "$stage" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner -cf - "$name" |
		gzip -n -9 >"$out/$name.tar.gz"
done
(cd "$out" && sha256sum -- *.tar.gz >SHA256SUMS)

# Check what was made.
(cd "$out" && sha256sum --quiet -c SHA256SUMS) || die "SHA256SUMS does not match the tarballs"
for arch in $archs; do
	name="plugvisor-$version-linux-$arch"
	for f in plugvisor LICENSE README.md CHANGELOG.md agent.hcl systemd/plugvisor.service man/man1/plugvisor.1 man/man1/plugvisor-agent.1; do
		tar -tzf "$out/$name.tar.gz" "$name/$f" >/dev/null 2>&1 || die "$name.tar.gz lacks $f"
	done
done
case " $archs " in
*" $host "*)
	check="$(mktemp -d)"
	trap 'rm -rf "$check"' EXIT
	tar -C "$check" -xzf "$out/plugvisor-$version-linux-$host.tar.gz"
	got="$("$check/plugvisor-$version-linux-$host/plugvisor" version)"
	[[ "$got" == "plugvisor $tag (commit $commit, "* ]] ||
		die "the $host binary reports \"$got\", not plugvisor $tag (commit $commit, ...)"
	echo "release: the $host binary reports: $got"
	;;
esac
rm -rf "$stage"
echo "release: $(cd "$out" && ls -- *.tar.gz SHA256SUMS | tr '\n' ' ')in $out"
