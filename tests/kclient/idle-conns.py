#!/usr/bin/env python3
"""idle-conns.py: holds many idle TCP connections to a server, as a hostile client would.

Usage: idle-conns.py HOST PORT SOURCE_ADDR COUNT READY_FILE

Opens COUNT connections to HOST:PORT, each bound to SOURCE_ADDR (a loopback address such as
127.0.0.2, so that they all come from one client address other than the test's own), sends
nothing on any of them, writes "connected=N" to READY_FILE once all were attempted, and then
sleeps until it is terminated. The server may close some of them (its per-address cap): that is
what the test is about, and they are left closed.
"""
import resource
import signal
import socket
import sys
import time


def main():
    host, port, source, count, ready = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = count + 64
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard) if hard != resource.RLIM_INFINITY else want, hard))
    socks = []
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((source, 0))
            s.connect((host, port))
            socks.append(s)
        except OSError:
            s.close()
    with open(ready, "w") as f:
        f.write(f"connected={len(socks)}\n")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
