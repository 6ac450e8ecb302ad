#!/bin/bash
# Instruction count of percall_callgrind.py's measured part (see its docstring).
# usage: tests/transforms/percall_callgrind.sh PYTHONPATH fused|floor train|train-flip TAG
# prints: TAG instructions
here=$(cd "$(dirname "$0")" && pwd)
go=/tmp/percall_go_$4; rm -f "$go"
out=/tmp/percall_$4.callgrind
PYTHONPATH=$1 valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no \
    --toggle-collect=builtin_exec --callgrind-out-file="$out" \
    "${PYTHON:-python}" "$here/percall_callgrind.py" "$2" "$3" "$go" > "/tmp/percall_$4.log" 2>&1 &
vpid=$!
for _ in $(seq 1 900); do grep -q READY "/tmp/percall_$4.log" && break; sleep 1; done
callgrind_control -i on "$vpid" > /dev/null   # instrument only once the imports are done
touch "$go"
wait "$vpid"
grep -h "summary:" "$out" | awk -v t="$4" '{print t, $2}'
