#!/usr/bin/env python3
"""Misbehaving clients of pboxd's control plane, for tests/net/integration.sh.

  ctl-abuse.py noread HOST PORT N SECONDS KEYFILE   prove the box key, then
        send N STATS requests on one connection and never read a reply;
        hold it SECONDS; print "NOREAD sent=K dropped=yes|no" (dropped: the
        box closed it)
  ctl-abuse.py auth HOST PORT KEYFILE     what an unauthenticated client gets:
        STATS before the handshake, a PROVE with a wrong key (the box must
        close the connection), then the handshake with the right key and
        STATS; prints one line per step
  ctl-abuse.py idle HOST PORT N SECONDS [KEYFILE]     open N connections
        that say nothing, hold them SECONDS; print "IDLE open=A refused=R
        closed=C" (refused: answered ERR at once; closed: by the box while
        held). With KEYFILE the first one proves the box key first (a job's
        rank 0 holding its connection with nothing to say), and " authed=open"
        or " authed=closed" follows: the box must keep that one
"""
import hashlib
import hmac
import os
import socket
import sys
import time


def _line(s):
    buf = b""
    while not buf.endswith(b"\n"):
        c = s.recv(1)
        if not c:
            return None
        buf += c
    return buf.decode().rstrip("\r\n")


def handshake(s, key, check_box=True):
    """AUTH and PROVE as nic/nic_ctl.h says (HMAC-SHA-256 over both nonces);
    True when the box took our proof. False also when the box's own proof
    is wrong (it does not hold our key)."""
    nc = os.urandom(16)
    s.sendall(b"AUTH " + nc.hex().encode() + b"\n")
    reply = _line(s)
    if not reply or not reply.startswith("OK nonce="):
        return False
    f = dict(kv.split("=", 1) for kv in reply.split()[1:])
    nb = bytes.fromhex(f["nonce"])
    box = hmac.new(key, b"pbox box proof" + nc + nb, hashlib.sha256).hexdigest()
    if check_box and not hmac.compare_digest(box, f["proof"]):
        return False
    me = hmac.new(key, b"pbox client proof" + nc + nb, hashlib.sha256).hexdigest()
    s.sendall(b"PROVE " + me.encode() + b"\n")
    return _line(s) == "OK"


def read_key(path):
    with open(path) as f:
        return bytes.fromhex(f.read().strip())


def auth(host, port, keyfile):
    key = read_key(keyfile)
    s = socket.create_connection((host, port), timeout=5)
    s.sendall(b"STATS\n")
    print("BEFORE " + (_line(s) or "closed"), flush=True)
    # an impostor ignores that the box's proof did not verify, and proves anyway
    print("WRONGKEY " + ("taken" if handshake(s, bytes(32), False) else "refused"), flush=True)
    time.sleep(0.5)
    try:
        s.sendall(b"STATS\n")
        print("AFTER " + (_line(s) or "closed"), flush=True)
    except OSError:
        print("AFTER closed", flush=True)
    s = socket.create_connection((host, port), timeout=5)
    ok = handshake(s, key)
    s.sendall(b"STATS\n")
    first = _line(s) or "closed"
    print("RIGHTKEY " + ("taken" if ok else "refused") + " " + first.split("=")[0], flush=True)


def noread(host, port, n, hold, keyfile):
    s = socket.create_connection((host, port), timeout=5)
    if not handshake(s, read_key(keyfile)):
        print("NOREAD handshake refused", flush=True)
        return
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


def idle(host, port, n, hold, keyfile=None):
    conns, refused, authed = [], 0, None
    if keyfile:
        authed = socket.create_connection((host, port), timeout=5)
        if not handshake(authed, read_key(keyfile)):
            print("IDLE handshake refused", flush=True)
            return
        n -= 1
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
    tail = ""
    if authed:
        authed.settimeout(0.01)
        try:
            tail = " authed=closed" if authed.recv(200) == b"" else " authed=open"
        except socket.timeout:
            tail = " authed=open"
        except OSError:
            tail = " authed=closed"
    print(f"IDLE open={len(conns)} refused={refused} closed={closed}{tail}", flush=True)


if __name__ == "__main__":
    mode, host, port = sys.argv[1:4]
    if mode == "auth":
        auth(host, int(port), sys.argv[4])
    elif mode == "noread":
        noread(host, int(port), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6])
    else:
        idle(host, int(port), int(sys.argv[4]), float(sys.argv[5]),
             sys.argv[6] if len(sys.argv) > 6 else None)
