#!/usr/bin/env python3
"""Misbehaving clients of pboxd's control plane, for tests/net/integration.sh.

  ctl-abuse.py noread HOST PORT N SECONDS   send N STATS requests on one
        connection and never read a reply; hold it SECONDS; print
        "NOREAD sent=K dropped=yes|no" (dropped: the box closed it)
  ctl-abuse.py idle HOST PORT N SECONDS     open N connections that say
        nothing, hold them SECONDS; print "IDLE open=A refused=R closed=C"
        (refused: answered ERR at once; closed: by the box while held)
"""
import socket
import sys
import time


def noread(host, port, n, hold):
    s = socket.create_connection((host, port), timeout=5)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.setblocking(False)
    line = b"STATS\n" * 64
    sent = 0
    deadline = time.monotonic() + hold
    dropped = False
    while sent < n and time.monotonic() < deadline:
        try:
            sent += s.send(line) // 6
        except BlockingIOError:
            time.sleep(0.01)
        except OSError:
            dropped = True
            break
    while not dropped and time.monotonic() < deadline:
        try:  # a send fails once the box has closed it
            s.send(b"STATS\n")
        except BlockingIOError:
            pass
        except OSError:
            dropped = True
        time.sleep(0.2)
    print(f"NOREAD sent={sent} dropped={'yes' if dropped else 'no'}", flush=True)


def idle(host, port, n, hold):
    conns, refused = [], 0
    for _ in range(n):
        s = socket.create_connection((host, port), timeout=5)
        s.settimeout(0.05)
        try:
            if s.recv(200).startswith(b"ERR"):
                refused += 1
                s.close()
                continue
        except socket.timeout:
            pass
        conns.append(s)
    print(f"IDLE open={len(conns)} refused={refused}", flush=True)
    time.sleep(hold)
    closed = 0
    for s in conns:
        s.settimeout(0.01)
        try:
            if s.recv(200) == b"":
                closed += 1
        except (socket.timeout, OSError):
            pass
    print(f"IDLE open={len(conns)} refused={refused} closed={closed}", flush=True)


if __name__ == "__main__":
    mode, host, port, n, hold = sys.argv[1:6]
    {"noread": noread, "idle": idle}[mode](host, int(port), int(n), float(hold))
