#!/bin/bash
# Instructions per image of jitter_cost.py's measured part (20 photos).
# usage: tests/transforms/jitter_cost.sh PYTHONPATH fused|pil TAG   -> "TAG instructions/image"
here=$(cd "$(dirname "$0")" && pwd)
go=/tmp/jitter_go_$3; rm -f "$go"
out=/tmp/jitter_$3.callgrind
PYTHONPATH=$1 valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no \
    --toggle-collect=builtin_exec --callgrind-out-file="$out" \
    "${PYTHON:-python}" "$here/jitter_cost.py" callgrind "$2" "$go" > "/tmp/jitter_$3.log" 2>&1 &
vpid=$!
for _ in $(seq 1 900); do grep -q READY "/tmp/jitter_$3.log" && break; sleep 1; done
callgrind_control -i on "$vpid" > /dev/null   # instrument only once the imports are done
touch "$go"
wait "$vpid"
grep -h "summary:" "$out" | awk -v t="$3" '{printf "%s %.2fM instructions/image\n", t, $2 / 20 / 1e6}'
