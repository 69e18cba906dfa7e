#!/usr/bin/env bash
# bench-run.sh COMMAND...: runs a `go test -bench` command and prints only what it measured
# and what failed: benchmark result lines, the logs benchmarks print under "--- BENCH:",
# failures with their messages, panics with their stacks, build errors and each package's
# ok/FAIL line. The log lines of the components under test (klog, gRPC, etcd) are dropped;
# rerun the command without this wrapper to see them. Exits with the command's status.
set -o pipefail
"$@" 2>&1 | awk '
	/^(panic:|fatal error:)/           { dump = 1 }
	dump                               { print; next }
	/^--- (FAIL|BENCH|SKIP)/           { print; block = 1; next }
	block && /^(    |\t)/              { print; next }
	{ block = 0 }
	/^Benchmark/                       { print; next }
	/^(ok|FAIL|PASS)([ \t]|$)/         { print; next }
	/^pkg: /                           { print; next }
	/^# /                              { print; next }
	/\.go:[0-9]+:[0-9]+: /             { print; next }
	/FIGURE: /                         { print; next }
'
