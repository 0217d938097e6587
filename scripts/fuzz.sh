#!/usr/bin/env bash
# fuzz.sh GO FUZZTIME TARGET... runs each Go fuzz target (./pkg:FuzzName)
# for FUZZTIME, one after the other, with progress. FUZZ_PARALLEL, when
# set, is the number of fuzzing workers (go test -parallel; GOMAXPROCS
# otherwise): make test fuzzes with one beside a node-lane guest.
#
# FUZZ_MINIMIZE (default 200x: runs, not time) bounds how long Go spends
# minimizing an input (go test -fuzzminimizetime). Go minimizes every input
# that finds new coverage before it counts or mutates anything more, for
# up to 60 s by default, with a number of runs that grows with the square
# of the input's length: one worker minimizing a pod spec or a
# configuration of a few hundred bytes spent a target's whole budget
# doing so, and counted none of it. A failing input is written all the same, minimized as far as the
# bound went; go test -run=FuzzX/<input> reproduces it and go test -fuzz
# without the bound minimizes it further.
#
# Each package's test binary is built once, as go test -fuzz builds it
# (go test -c -fuzz: instrumented for coverage-guided fuzzing), and run
# for each of its targets as go test -fuzz runs it: from the package's
# directory (its testdata/fuzz corpus, where a failing input is written)
# with the package's cache of generated inputs, $GOCACHE/fuzz/<import
# path>. go test -fuzz would link the binary again for every target.
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
log=$(mktemp) bins=$(mktemp -d)
trap 'rm -rf "$log" "$bins"' EXIT
cache=$("$go" env GOCACHE)

# The test binary of each package, built once before any target runs.
declare -A bin=() dir=() fuzzcache=()
npkg=0
for t in "$@"; do
	pkg=${t%%:*}
	[ -z "${bin[$pkg]:-}" ] || continue
	npkg=$((npkg + 1)) bin[$pkg]=$bins/$npkg.test
	"$go" test -c -fuzz . -o "${bin[$pkg]}" "$pkg" >"$log" 2>&1 || {
		cat "$log"
		echo "fuzz: building the test binary of $pkg failed" >&2
		exit 1
	}
	read -r importpath pkgdir < <("$go" list -f '{{.ImportPath}} {{.Dir}}' "$pkg")
	dir[$pkg]=$pkgdir fuzzcache[$pkg]=$cache/fuzz/$importpath
done
echo "fuzz: built the test binaries of $npkg packages in $(($(date +%s) - start))s"

parallel=()
[ -z "${FUZZ_PARALLEL:-}" ] || parallel=(-test.parallel "$FUZZ_PARALLEL")
minimize=${FUZZ_MINIMIZE:-200x}

run() { # pkg name
	(cd "${dir[$1]}" && "${bin[$1]}" -test.paniconexit0 -test.run '^$' -test.fuzz "^$2\$" -test.fuzztime "$fuzztime" \
		-test.fuzzminimizetime "$minimize" -test.fuzzcachedir "${fuzzcache[$1]}" "${parallel[@]}") >"$log" 2>&1
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
