#!/usr/bin/env bash
# vmtests/make-initramfs.sh KERNEL_DIR OUT: builds the guest's initramfs at
# run time: a static busybox, vmtests/guest-init as /init, and the modules
# (with their dependencies, from modules.dep) that mount the host's root
# over 9p (virtio_pci, 9pnet_virtio, 9p) under an overlay (overlay). Modules are stored uncompressed:
# busybox's insmod reads plain ELF only.
set -euo pipefail
kdir=${1:?usage: make-initramfs.sh KERNEL_DIR OUT}
out=${2:?usage: make-initramfs.sh KERNEL_DIR OUT}
here=$(cd "$(dirname "$0")" && pwd)
busybox=/bin/busybox  # busybox-static's: the initramfs has no libc
case "$(ldd "$busybox" 2>&1)" in
  *"not a dynamic"*) ;;
  *) echo "make-initramfs.sh: needs a static $busybox (apt-get install busybox-static)" >&2; exit 2 ;;
esac
release=$(basename "$(ls -d "$kdir"/lib/modules/*/ | head -n 1)")
mods="$kdir/lib/modules/$release"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,dev,proc,sys,newroot,modules}
cp "$busybox" "$root/bin/busybox"
cp "$here/guest-init" "$root/init"
chmod +x "$root/init"
# The load order: each wanted module after its dependencies (modules.dep
# lists a module's dependencies, the deepest last).
order=()
want() {
  local path deps d
  path=$(awk -F: -v m="$1" '{ n = $1; sub(/.*\//, "", n); sub(/\.ko(\.[a-z]+)?$/, "", n); gsub(/-/, "_", n) } n == m { print $1; exit }' "$mods/modules.dep")
  [ -n "$path" ] || return 0  # built in
  for d in "${order[@]}"; do [ "$d" = "$path" ] && return 0; done
  deps=$(awk -F: -v p="$path" '$1 == p { print $2; exit }' "$mods/modules.dep")
  for d in $deps; do
    d=$(basename "$d"); d=${d%%.ko*}; want "${d//-/_}"
  done
  order+=("$path")
}
for m in virtio_pci 9pnet_virtio 9p overlay; do want "$m"; done
: > "$root/modules/order"
for path in "${order[@]}"; do
  name=$(basename "$path"); name=${name%%.ko*}.ko
  case "$path" in
    *.ko.xz) xz -dc "$mods/$path" > "$root/modules/$name" ;;
    *.ko.zst) zstd -qdc "$mods/$path" > "$root/modules/$name" ;;
    *.ko.gz) gzip -dc "$mods/$path" > "$root/modules/$name" ;;
    *) cp "$mods/$path" "$root/modules/$name" ;;
  esac
  echo "$name" >> "$root/modules/order"
done
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$out"
