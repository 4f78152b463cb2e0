#!/usr/bin/env bash
# Builds the agent's container image from a built mlprof-ebpf: a root
# filesystem holding only the binary and the shared libraries it loads
# (libbpf is linked in statically; libelf, zlib, libsqlite3, libpq, libcurl and the
# C++ runtime are copied from this host), imported with `podman import`. No base image is
# pulled, so it also works on a host without a registry.
#   deploy/build-image.sh build-x/userspace/agent/mlprof-ebpf [IMAGE]   (default localhost/mlprof-ebpf:dev)
# $PODMAN: the podman command to import with (default podman), e.g. the kube
# runner's with its own storage (tests/e2e/test_agent_deploy.py).
set -euo pipefail
agent=$(realpath "$1")
image=${2:-localhost/mlprof-ebpf:dev}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
install -D -m 0755 "$agent" "$root/usr/local/bin/mlprof-ebpf"
# The loader and every library ldd resolves, at the same paths.
for lib in $(ldd "$agent" | grep -o '/[^ ]*'); do
  install -D -m 0755 "$(realpath "$lib")" "$root$lib"
done
# --sink https://: libcurl (OpenSSL) verifies the server against Debian's CA bundle.
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
fi
mkdir -p "$root/proc" "$root/sys" "$root/tmp" "$root/var/lib/mlprof" "$root/etc"
echo 'root:x:0:0:root:/:/usr/local/bin/mlprof-ebpf' > "$root/etc/passwd"
tar -C "$root" -c . | ${PODMAN:-podman} import \
  --change 'ENTRYPOINT ["/usr/local/bin/mlprof-ebpf"]' \
  --change 'CMD ["--help"]' \
  --message "mlprof-ebpf from $agent" - "$image" >/dev/null
echo "$image"
