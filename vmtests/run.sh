#!/usr/bin/env bash
# vmtests/run.sh [options] KERNEL...: the agent's end-to-end smoke
# (vmtests/guest_smoke.py) inside a QEMU guest of each Debian kernel.
#   KERNEL   5.10 (bullseye), 6.1 (bookworm), 6.12 (trixie), newest (sid), or all
#   --agent PATH     mlprof-ebpf (default: $MLPROF_AGENT)
#   --python PATH    an interpreter that imports mlflow_profiler, with
#                    $PYTHONPATH (default: $MLPROF_VM_PYTHON, else python3)
#   --timeout S      per guest, boot to power-off (default 600)
#   --keep DIR       keep each guest's files (console.log, guest.log, smoke.json) under DIR
#   --memory MB      the guest's memory (default 3072)
#   --lockdown MODE  boot the guest with lockdown=MODE (integrity, confidentiality)
#   --run 'COMMAND'  run COMMAND (sh -c, as root, in the host's root, cwd /mnt,
#                    which is written back to the host with --keep) instead of
#                    the smoke, and print its output: your own model server and
#                    mlprof-ebpf on that kernel (docs/ebpf.md, "Diagnosis in a VM")
# The guest runs the host's own root (9p, read-only, under an in-memory
# overlay), so it runs the same agent, Python and extension. Prints one line
# per kernel; exit status 0 only if every guest passed. QEMU runs under TCG
# (software emulation): KVM hangs on this project's machines. Set
# MLPROF_VM_ACCEL=kvm where KVM works.
set -uo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
here=$(cd "$(dirname "$0")" && pwd)
agent=${MLPROF_AGENT:-}
python=${MLPROF_VM_PYTHON:-$(command -v python3)}
limit=600
keep=""
memory=3072
lockdown=""
run_cmd=""
kernels=()
while [ $# -gt 0 ]; do
  case "$1" in
    --agent) agent=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --memory) memory=$2; shift 2 ;;
    --lockdown) lockdown=$2; shift 2 ;;
    --run) run_cmd=$2; shift 2 ;;
    all) kernels+=(5.10 6.1 6.12 newest); shift ;;
    5.10|6.1|6.12|newest) kernels+=("$1"); shift ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "vmtests/run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#kernels[@]} -gt 0 ] || { echo "vmtests/run.sh: name a kernel: 5.10, 6.1, 6.12, newest or all" >&2; exit 2; }
if [ -z "$run_cmd" ]; then
  [ -x "$agent" ] || { echo "vmtests/run.sh: --agent (or MLPROF_AGENT) must name the built mlprof-ebpf" >&2; exit 2; }
  agent=$(realpath "$agent")
fi
python=$(realpath -s "$python")

# What the guests need on the host: QEMU, a static busybox, and the tools
# that fetch and unpack Debian's kernel packages.
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
case "$(ldd /bin/busybox 2>&1)" in *"not a dynamic"*) ;; *) need+=(busybox-static) ;; esac
for t in cpio:cpio depmod:kmod xz:xz-utils zstd:zstd curl:curl; do
  command -v "${t%%:*}" >/dev/null || need+=("${t##*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  pkgs=$(printf '%s\n' "${need[@]}" | sort -u | tr '\n' ' ')
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "vmtests/run.sh: installing $pkgs" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null; } \
      || { echo "vmtests/run.sh: could not install $pkgs" >&2; exit 2; }
  else
    echo "vmtests/run.sh: needs $pkgs (sudo apt-get install $pkgs)" >&2
    exit 2
  fi
fi

work_root=$(mktemp -d "${TMPDIR:-/tmp}/mlprof-vm.XXXXXX")
trap 'rm -rf "$work_root"' EXIT
failed=0
for kernel in "${kernels[@]}"; do
  t0=$(date +%s)
  work="$work_root/$kernel"
  mkdir -p "$work"
  line() { printf '%-8s %-24s %s\n' "$kernel" "${release:--}" "$*"; }
  release=""
  if ! kdir=$(bash "$here/fetch-kernel.sh" "$kernel" 2>"$work/fetch.err"); then
    line "FAILED: no kernel ($(tail -n 1 "$work/fetch.err"))"
    failed=1
    continue
  fi
  release=$(basename "$kdir")
  if ! bash "$here/make-initramfs.sh" "$kdir" "$work/initrd.gz" 2>"$work/initrd.err"; then
    line "FAILED: no initramfs ($(tail -n 1 "$work/initrd.err"))"
    failed=1
    continue
  fi
  # What the guest runs (guest-init runs /mnt/guest.sh in the host's root).
  {
    echo "export PYTHONPATH='${PYTHONPATH:-}'"
    echo "cat /sys/kernel/security/lockdown > /mnt/lockdown 2>/dev/null"
    echo "[ -r /sys/kernel/btf/vmlinux ] && echo yes > /mnt/btf || echo no > /mnt/btf"
    if [ -n "$run_cmd" ]; then
      printf 'cd /mnt\n%s\n' "$run_cmd"
    else
      echo "'$python' '$here/guest_smoke.py' --agent '$agent' --out /mnt"
    fi
  } > "$work/guest.sh"
  accel=${MLPROF_VM_ACCEL:-tcg}
  # One host thread for all vCPUs: multi-threaded TCG races the kernel's live
  # text patching (a 6.12 guest died of an int3 in handle_softirqs while the
  # agent enabled the softirq tracepoints).
  [ "$accel" = tcg ] && accel="tcg,thread=single"
  timeout --kill-after=10 "$limit" qemu-system-x86_64 -accel "$accel" -cpu max -smp 2 -m "$memory" \
    -nographic -no-reboot -kernel "$kdir/boot/vmlinuz-$release" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 panic=-1 quiet${lockdown:+ lockdown=$lockdown}" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$work,mount_tag=work,security_model=none" </dev/null >"$work/console.log" 2>&1
  qemu_rc=$?
  seconds=$(( $(date +%s) - t0 ))
  up=$(sed -n 's/.*vm: up: [^,]*, \([0-9.]*\) s.*/\1/p' "$work/console.log" | head -n 1)
  if [ "$qemu_rc" -eq 124 ] || [ "$qemu_rc" -eq 137 ]; then
    line "FAILED: the guest did not finish in ${limit} s (booted: ${up:-no}; $work/console.log)"
    failed=1
  elif [ -z "$up" ]; then
    # The kernel's panic line if it printed one, else the console's last words.
    why=$(tr -d '\r' < "$work/console.log" | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g; s/\x1bc//g' | grep -a . | grep -a -m 1 -i 'panic' \
          || tr -d '\r' < "$work/console.log" | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g; s/\x1bc//g' | grep -a . | tail -n 1)
    line "FAILED: the guest did not boot to its init (QEMU exit $qemu_rc; its console ends: $(echo "$why" | cut -c1-120))"
    failed=1
  else
    rc=$(cat "$work/guest.rc" 2>/dev/null || echo "?")
    if [ -n "$run_cmd" ]; then
      [ "$rc" = 0 ] && state=ok || { state="FAILED: exit $rc"; failed=1; }
      line "$state | boot ${up} s, total ${seconds} s"
      sed 's/^/    /' "$work/guest.log"
    else
      summary=$("$python" "$here/smoke_line.py" "$work")
      if [ "$rc" = 0 ]; then
        line "$summary | boot ${up} s, total ${seconds} s"
      else
        line "$summary | guest exit $rc, boot ${up} s, total ${seconds} s"
        failed=1
      fi
    fi
  fi
  if [ -n "$keep" ]; then mkdir -p "$keep" && cp -r "$work" "$keep/"; fi
done
exit $failed
