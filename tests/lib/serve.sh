# serve.sh: starting `shale serve` for a shell test, sourced after tap.sh. The caller sets
# $SHALE_BIN and works in a scratch directory holding var/exports, var/state and var/pool.
#
# start: starts the server on a free port (no portmapper), its log appended to serve.log; sets
# pid, port and url_q (libnfs's URL query naming the port and NFSv3). Fails, printing the log,
# when the server does not come up. Its arguments are more `shale serve` options.
start() {
	rm -f var/ready
	"$SHALE_BIN" serve --exports var/exports --state var/state --pool-dir var/pool --port 0 \
		--no-portmap --ready-file var/ready --log-level warn "$@" >>serve.log 2>&1 &
	pid=$!
	for _ in $(seq 200); do
		grep -q '^port=' var/ready 2>/dev/null && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	port=$(sed -n 's/^port=//p' var/ready 2>/dev/null)
	[ -n "$port" ] || { cat serve.log; return 1; }
	url_q="?nfsport=$port&mountport=$port&version=3"
}
