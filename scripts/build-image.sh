#!/usr/bin/env bash
# Builds the container image sandpool:<version> (the project VERSION of the top CMakeLists.txt)
# without an image registry: these machines reach Debian's package archive but no registry, so
# `podman build -f deploy/container/Containerfile` cannot fetch its debian base. The same image
# instead:
#   1. a Release build (build-release/, the one scripts/test.sh makes under SANDPOOL_ALL_BUILDS;
#      an existing build directory keeps its cache), installed with --strip into a staging root;
#   2. a Debian 12 root from deb.debian.org by mmdebstrap: the "runtime" set of
#      deploy/container/packages.txt, the staged install, deploy/container/runtime-setup.sh;
#      then a check that ld.so finds every library the binaries need;
#   3. `podman import` with the runtime stage's LABEL, ENV, USER, WORKDIR, EXPOSE, STOPSIGNAL,
#      ENTRYPOINT and CMD lines of the Containerfile as --change.
# Cached: the image carries a hash of its inputs (the staged binaries, the package list, the
# setup script, the Containerfile and this script) as the label io.sandpool.inputs; when the tag
# already exists with the same hash, nothing is rebuilt (a second run costs the build check and
# the hash: seconds). SANDPOOL_IMAGE_REBUILD=1 rebuilds anyway (e.g. to take in Debian's updates).
#   SANDPOOL_IMAGE_BUILD_DIR  the CMake build directory (default: build-release)
#   SANDPOOL_IMAGE_TAG        the tag (default: sandpool:<version>)
#   SANDPOOL_DEBIAN_MIRROR    the archive (default: http://deb.debian.org/debian)
# Needs root, cmake and the build set of packages.txt (scripts/install-deps.sh), mmdebstrap and
# podman. Prints the tag on its last line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then exec sudo -E bash "$0" "$@"; fi
container="$root/deploy/container"
version=$(sed -n 's/^project(sandpool VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
[ -n "$version" ] || { echo "build-image: no project VERSION in $root/CMakeLists.txt" >&2; exit 1; }
tag=${SANDPOOL_IMAGE_TAG:-sandpool:$version}
build=${SANDPOOL_IMAGE_BUILD_DIR:-$root/build-release}
mirror=${SANDPOOL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
work="$build/image"
start=$(date +%s)
say() { echo "build-image: $*" >&2; }

# 1. The binaries. A configured directory is built as it is configured (scripts/test.sh's flags
# stay); a new one is configured for Release without the tests.
if [ ! -f "$build/CMakeCache.txt" ]; then
  launcher=()
  command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSANDPOOL_BUILD_TESTS=OFF "${launcher[@]}" >/dev/null
fi
cmake --build "$build" -j"$(nproc)" --target sandpoold sandpool >&2
rm -rf "$work"
mkdir -p "$work"
DESTDIR="$work/stage" cmake --install "$build" --prefix /usr/local --strip >/dev/null

# The runtime stage of the Containerfile: what follows its last FROM.
runtime_stage=$(awk '/^FROM /{buf=""} {buf=buf $0 "\n"} END{printf "%s", buf}' "$container/Containerfile")
runtime_packages=$(awk '!/^#/ && / runtime( |$)/ {print $1}' "$container/packages.txt" | paste -sd, -)

inputs=$( (cd "$work/stage" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
          sha256sum "$container/packages.txt" "$container/runtime-setup.sh" "$container/Containerfile" "$0" |
            awk '{print $1}'
          echo "$version $mirror")
hash=$(sha256sum <<<"$inputs" | cut -c1-32)
if [ -z "${SANDPOOL_IMAGE_REBUILD:-}" ] &&
   [ "$(podman image inspect --format '{{index .Labels "io.sandpool.inputs"}}' "$tag" 2>/dev/null)" = "$hash" ]; then
  say "$tag is up to date (inputs $hash); not rebuilt ($(( $(date +%s) - start )) s)"
  echo "$tag"
  exit 0
fi

# 2. The root file system. minbase: Debian's required packages (what debian:12-slim holds) and
# the runtime set; no documentation but copyright files.
say "building $tag: Debian 12 root with $runtime_packages"
# The hooks' $1 is the root being built (mmdebstrap passes it); not this script's.
# shellcheck disable=SC2016
mmdebstrap --variant=minbase --format=tar --quiet \
  --include="$runtime_packages" \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --customize-hook="sync-in $work/stage /" \
  --customize-hook="upload $container/runtime-setup.sh /tmp/runtime-setup.sh" \
  --customize-hook='chroot "$1" sh /tmp/runtime-setup.sh && rm "$1/tmp/runtime-setup.sh"' \
  --customize-hook='missing=$(chroot "$1" sh -c "ldd /usr/local/bin/* /usr/local/lib/sandpool/*" | grep "not found" || true);
                    [ -z "$missing" ] || { echo "build-image: libraries missing from the runtime set (deploy/container/packages.txt): $missing" >&2; exit 1; }' \
  bookworm "$work/rootfs.tar" \
  "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
  "deb ${mirror%/debian}/debian-security bookworm-security main"

# 3. The image, with the runtime stage's metadata (ARG values substituted) and the inputs' hash.
changes=(--change "LABEL io.sandpool.inputs=$hash")
while IFS= read -r line; do
  changes+=(--change "${line//\$\{SANDPOOL_VERSION\}/$version}")
done < <(grep -E '^(LABEL|ENV|USER|WORKDIR|EXPOSE|STOPSIGNAL|ENTRYPOINT|CMD) ' <<<"$runtime_stage")
previous=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
podman import --quiet "${changes[@]}" --message "sandpool $version (scripts/build-image.sh)" \
  "$work/rootfs.tar" "$tag" >/dev/null
rm -f "$work/rootfs.tar"
# The image the tag named before, now untagged: removed unless a container still uses it.
if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$tag")" ]; then
  podman rmi "$previous" >/dev/null 2>&1 || true
fi
say "built $tag ($(podman image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'), inputs $hash, in $(( $(date +%s) - start )) s)"
echo "$tag"
