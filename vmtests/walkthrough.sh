#!/bin/sh
# docs/ebpf.md's "Diagnosis in a VM", scripted: run inside a guest by
#   vmtests/run.sh --run "sh vmtests/walkthrough.sh PYTHON AGENT" KERNEL
# (the guest runs the host's root, so the paths are the host's). Starts the
# example model server, attaches mlprof-ebpf --pid to it, sends 20 requests,
# and prints the agent's summary; the profile goes to /mnt/profile.json.
set -e
python=${1:?usage: walkthrough.sh PYTHON MLPROF_EBPF}
agent=${2:?usage: walkthrough.sh PYTHON MLPROF_EBPF}
here=$(cd "$(dirname "$0")" && pwd)
"$python" -u "$here/example_server.py" --port 8080 > /mnt/server.log 2>&1 &
server=$!
until grep -q listening /mnt/server.log; do sleep 0.2; done
"$agent" --pid "$server" -o /mnt/profile.json > /mnt/agent.txt 2> /mnt/agent.err &
agent_pid=$!
until grep -q "attached to pid $server" /mnt/agent.err; do sleep 0.2; done
"$python" - <<'PY'
import urllib.request
for i in range(20):
    urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:8080/predict", data=b"[1, 2, 3, 4]")).read()
PY
kill -INT "$agent_pid"
wait "$agent_pid"
kill "$server"
cat /mnt/agent.txt
