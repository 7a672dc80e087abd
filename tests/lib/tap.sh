# tap.sh: the shell side of tests/lib/tap.h, sourced by test scripts. check NAME COMMAND... runs
# COMMAND and prints "ok - NAME" or "not ok - NAME" (with the first lines of its output, indented);
# tap_finish PROGRAM prints the closing count and returns non-zero if anything failed. Scripts set
# $root (a scratch directory) before calling check.
pass=0
fail=0
check() {
	local name=$1
	shift
	if "$@" >"$root/check.out" 2>&1; then
		echo "ok - $name"
		pass=$((pass + 1))
	else
		echo "not ok - $name"
		sed 's/^/#   /' "$root/check.out" | head -n 20
		fail=$((fail + 1))
	fi
}
tap_finish() {
	echo "# $1: $pass passed, $fail failed"
	[ "$fail" -eq 0 ]
}
