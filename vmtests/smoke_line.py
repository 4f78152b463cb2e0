"""vmtests/run.sh's line for one guest's smoke: python smoke_line.py WORK_DIR.

Reads WORK_DIR/smoke.json (vmtests/guest_smoke.py), lockdown and btf (the
guest's /sys/kernel/security/lockdown and whether it has
/sys/kernel/btf/vmlinux); prints "ok | btf yes, lockdown none | programs:
tp_btf, session_spans | smoke 6.3 s" or "FAILED: ... | ...".
"""

import json
import os
import sys


def read(work: str, name: str, default: str) -> str:
    """WORK_DIR/name's first line, or default."""
    try:
        with open(os.path.join(work, name)) as f:
            return f.read().strip() or default
    except OSError:
        return default


def main() -> int:
    work = sys.argv[1]
    try:
        with open(os.path.join(work, "smoke.json")) as f:
            d = json.load(f)
    except (OSError, ValueError):
        print("FAILED: the smoke wrote no result (guest.log has its output)")
        return 0
    watching = next((l for l in d.get("agent_lines", []) if ": watching " in l), "")
    # "watching pid 109 (tp_btf, per-span probes), 1 process attached; ..."
    programs = watching[watching.find("(") + 1: watching.find(")")] if watching else "?"
    lockdown = read(work, "lockdown", "-")  # "[none] integrity confidentiality"
    if "[" in lockdown:
        lockdown = lockdown[lockdown.find("[") + 1: lockdown.find("]")]
    state = "ok" if d.get("ok") else "FAILED: " + "; ".join(d.get("failed", []))[:1500]
    print(f"{state} | btf {read(work, 'btf', '?')}, lockdown {lockdown} | programs: {programs} | "
          f"smoke {d.get('seconds')} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
