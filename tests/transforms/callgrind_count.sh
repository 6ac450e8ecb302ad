#!/bin/bash
# Instruction count of a measuring script's measured part under callgrind. The
# script (percall_callgrind.py, jitter_cost.py callgrind ...) gets a go file as
# its last argument: it prints READY once its imports are done and starts
# measuring when the go file appears; only that part is counted.
# usage: tests/transforms/callgrind_count.sh PYTHONPATH TAG SCRIPT [ARGS...]   -> "TAG instructions"
path=$1 tag=$2; shift 2
go=/tmp/callgrind_go_$tag; rm -f "$go"
out=/tmp/callgrind_$tag.out log=/tmp/callgrind_$tag.log
PYTHONPATH=$path valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no \
    --toggle-collect=builtin_exec --callgrind-out-file="$out" \
    "${PYTHON:-python}" "$@" "$go" > "$log" 2>&1 &
vpid=$!
for _ in $(seq 1 900); do grep -q READY "$log" && break; sleep 1; done
callgrind_control -i on "$vpid" > /dev/null   # instrument only once the imports are done
touch "$go"
wait "$vpid"
grep -h "summary:" "$out" | awk -v t="$tag" '{print t, $2}'
