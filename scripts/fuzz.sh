#!/usr/bin/env bash
# fuzz.sh GO FUZZTIME TARGET... runs each Go fuzz target (./pkg:FuzzName)
# for FUZZTIME, one after the other, with progress.
#
# A target fails when Go reports a failing input (it writes it under
# <pkg>/testdata/fuzz/<FuzzName>: fix the code, keep the input as a seed)
# or any other error. One failure is not the target's: Go 1.26's fuzzing
# coordinator can report "context deadline exceeded" at the end of
# -fuzztime without any failing input (go.dev/issue/75804, fixed in Go
# 1.27). Such a run is said so and made once more; a second one fails.
set -euo pipefail
go=$1 fuzztime=$2
shift 2
total=$# n=0 start=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log"' EXIT

run() { # pkg name
	"$go" test -run '^$' -fuzz "^$2\$" -fuzztime "$fuzztime" "$1" >"$log" 2>&1
}

coordinator_race() { # the log shows go.dev/issue/75804 and nothing else
	! grep -q 'Failing input written to' "$log" &&
		grep -A1 -E '^--- FAIL: Fuzz' "$log" | grep -qx '    context deadline exceeded'
}

for t in "$@"; do
	n=$((n + 1)) pkg=${t%%:*} name=${t#*:}
	echo "fuzz [$n/$total] $pkg $name for $fuzztime"
	if ! run "$pkg" "$name"; then
		if coordinator_race; then
			echo "fuzz: $name stopped with \"context deadline exceeded\" and no failing input (Go's coordinator race, go.dev/issue/75804); running it again"
			run "$pkg" "$name" || {
				cat "$log"
				echo "fuzz: $pkg $name failed twice; a failing input, if any, is in $pkg/testdata/fuzz/$name" >&2
				exit 1
			}
		else
			cat "$log"
			echo "fuzz: $pkg $name failed; its input is in $pkg/testdata/fuzz/$name" >&2
			exit 1
		fi
	fi
	grep -E '^fuzz: elapsed' "$log" | tail -n 1 || true
done
echo "fuzz: $total targets passed in $(($(date +%s) - start))s"
