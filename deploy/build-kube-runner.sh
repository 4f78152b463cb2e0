#!/usr/bin/env bash
# Builds podman 4.9.5 from its Go module into PREFIX/bin/podman (default
# /opt/mlprof-kube): the runner tests/e2e/test_agent_deploy.py plays
# deploy/daemonset.yaml with. Debian 12's podman 4.3.1 refuses `kind:
# DaemonSet` in `podman kube play` (accepted since 4.7) and ignores hostPID
# (honoured since 4.4); 4.9.5 is the last 4.x, which still works with
# Debian 12's conmon, netavark, CNI plugins and runc. Nothing is installed
# system-wide: the binary lives under PREFIX, and the test gives it its own
# storage. Needs Go (1.21+), gcc, pkg-config and libseccomp-dev.
#   deploy/build-kube-runner.sh [PREFIX]
set -euo pipefail
prefix=${1:-/opt/mlprof-kube}
version=v4.9.5
if "$prefix/bin/podman" --version 2>/dev/null | grep -q "version ${version#v}$"; then
  echo "$prefix/bin/podman: podman ${version#v} already"
  exit 0
fi
export GOFLAGS="-mod=mod -modcacherw" GOTOOLCHAIN=local
# The module's zip has no vendor/ (the proxy strips it) but still lists
# vendor/modules.txt: build in a copy without it, against the proxy.
dir=$(go mod download -json "github.com/containers/podman/v4@$version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r "$dir/." "$src"
chmod -R u+w "$src"
rm -rf "$src/vendor"
# Podman's Makefile tags, less the ones that need more C libraries:
# no btrfs/devicemapper graph drivers (overlay and vfs remain), image
# signatures through Go's openpgp instead of gpgme, no systemd/journald
# (the test's logs are k8s-file), seccomp through libseccomp.
tags="seccomp exclude_graphdriver_btrfs btrfs_noversion exclude_graphdriver_devicemapper containers_image_openpgp"
# A test runner, built on every fresh CI machine: its C parts (go-sqlite3's
# amalgamation above all; the runner's state is BoltDB) at -O1 without
# debug information, and no DWARF in the binary.
(cd "$src" && CGO_CFLAGS="-O1 -g0" go build -tags "$tags" -ldflags "-s -w" -o "$src/podman" ./cmd/podman)
install -D -m 0755 "$src/podman" "$prefix/bin/podman"
"$prefix/bin/podman" --version
