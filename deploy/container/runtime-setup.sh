#!/bin/sh
# The runtime image's own setup, after its packages and sandpool's installed files are in place:
# run as root inside the image's root by both builds (the Containerfile's runtime stage, and
# scripts/build-image.sh through an mmdebstrap hook), so the two images agree.
set -eu

# The state directory (template layers, session disks; a volume in deployments) and its parent.
mkdir -p /var/lib/sandpool
chmod 0700 /var/lib/sandpool

# A non-root user for what does not need root: the `sandpool` CLI (podman run --user sandpool
# --entrypoint sandpool ...). sandpoold itself runs as the container's root (docs/SECURITY.md
# section 5.1: it writes uid maps, mounts and creates cgroups; it refuses any other uid), with
# only the capabilities it needs. uid 999: below any --uid-base range the sandboxes use.
if ! getent passwd sandpool >/dev/null; then
  groupadd --system --gid 999 sandpool
  useradd --system --uid 999 --gid sandpool --home-dir /nonexistent --no-create-home \
    --shell /usr/sbin/nologin sandpool
fi

# /usr/local/lib/sandpool holds the nursery library and the preview proxy (found relative to
# the binaries); nothing else to register with ld.so.
ldconfig

# What a runtime does not read: apt's lists and caches, documentation, logs of the install.
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb \
  /var/cache/debconf/*-old /var/lib/dpkg/*-old /var/log/apt /var/log/dpkg.log /var/log/alternatives.log \
  /usr/share/doc/*/changelog* /usr/share/man /usr/share/info /usr/share/lintian
