#!/usr/bin/env python3
"""Misbehaving clients of pboxd's control plane, for tests/net/integration.sh.

  ctl-abuse.py noread HOST PORT N SECONDS KEYFILE   prove the box key, then
        send N STATS requests on one connection and never read a reply;
        hold it SECONDS; print "NOREAD sent=K dropped=yes|no" (dropped: the
        box closed it)
  ctl-abuse.py auth HOST PORT KEYFILE     what an unauthenticated client gets:
        STATS, a blank line, a line holding a NUL, an AUTH after a tab and
        one with trailing words before the handshake (an ERR each), a PROVE with a wrong key (the box must close the
        connection), a line over 256 bytes before the proof (ERR, closed),
        then the handshake with the right key and STATS, an UNREGISTER with
        an octal job, one of a job never registered and a LIST with a field
        (an ERR each); prints one line per step
  ctl-abuse.py idle HOST PORT N SECONDS [KEYFILE]     open N connections
        that say nothing, hold them SECONDS; print "IDLE open=A refused=R
        closed=C evicted=E" (refused: answered ERR at once; closed: by the
        box while held; evicted: closed with the ERR that a newer connection
        took its place). With KEYFILE the first one proves the box key first
        (a job's rank 0 holding its connection with nothing to say), and
        " authed=open" or " authed=closed" follows: the box must keep that one
  ctl-abuse.py drip HOST PORT SECONDS KEYFILE SRC,SRC,...    16 connections
        from each SRC address, each dripping an endless AUTH line one byte
        every 0.5 s, each one the box closes opened again 50 ms later; meanwhile
        a key holder connects and proves the key every 0.25 s, from the
        first SRC and from the default address in turn. Prints "DRIP
        opened=O max_age=A keyholder=K/T" (max_age: the longest any
        dripping connection stayed open, s; K of T handshakes taken)
  ctl-abuse.py httpdrip HOST PORT SECONDS SRC,SRC,...    8 connections from
        each SRC to the metrics port, each dripping an endless HTTP header
        one byte every 0.5 s (opened again 50 ms after it is closed); meanwhile a scrape
        of /metrics every 0.25 s from the default address. Prints "HTTPDRIP
        opened=O max_age=A scrapes=K/T"
"""
import select
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


def endpoints(s):
    """ENDPOINTS' reply: its EP lines and its OK line."""
    s.sendall(b"ENDPOINTS\n")
    eps = []
    while True:
        ln = _line(s) or "closed"
        if not ln.startswith("EP "):
            return eps, ln
        eps.append(ln)


def rooms(s):
    """How many EP lines say room=, of how many, and whether OK says txref=."""
    eps, ok = endpoints(s)
    return "%d/%d %s" % (sum(" room=" in e for e in eps), len(eps),
                         "txref" if " txref=" in ok else "no-txref")


def auth(host, port, keyfile):
    key = read_key(keyfile)
    s = socket.create_connection((host, port), timeout=5)
    s.sendall(b"STATS\n")
    print("BEFORE " + (_line(s) or "closed"), flush=True)
    print("ROOMSBEFORE " + rooms(s), flush=True)  # the box's memory: only to key holders
    s.sendall(b"  \t \n")  # one reply per request, an empty one too
    print("BLANK " + (_line(s) or "closed"), flush=True)
    s.sendall(b"STA\0TS\n")
    print("NUL " + (_line(s) or "closed"), flush=True)
    nc = os.urandom(16).hex().encode()  # AUTH as strict as REGISTER
    s.sendall(b"AUTH\t" + nc + b"\n")
    print("TABAUTH " + (_line(s) or "closed"), flush=True)
    s.sendall(b"AUTH " + nc + b" and more\n")
    print("TRAILAUTH " + (_line(s) or "closed"), flush=True)
    # an impostor ignores that the box's proof did not verify, and proves anyway
    print("WRONGKEY " + ("taken" if handshake(s, bytes(32), False) else "refused"), flush=True)
    time.sleep(0.5)
    try:
        s.sendall(b"STATS\n")
        print("AFTER " + (_line(s) or "closed"), flush=True)
    except OSError:
        print("AFTER closed", flush=True)
    s = socket.create_connection((host, port), timeout=5)
    s.sendall(b"AUTH " + b"0" * 300)  # longer than any line before the proof
    print("LONG " + (_line(s) or "closed") + (" closed" if s.recv(10) == b"" else " open"),
          flush=True)
    s = socket.create_connection((host, port), timeout=5)
    ok = handshake(s, key)
    s.sendall(b"STATS\n")
    first = _line(s) or "closed"
    print("RIGHTKEY " + ("taken" if ok else "refused") + " " + first.split("=")[0], flush=True)
    while (_line(s) or "OK").startswith("STAT "):  # the rest of STATS' reply
        pass
    print("ROOMSAFTER " + rooms(s), flush=True)
    # after the proof: UNREGISTER only as the codec writes it, no fields
    # where a request takes none
    s.sendall(b"UNREGISTER job=010 proof=" + b"0" * 64 + b"\n")
    print("UNREGOCTAL " + (_line(s) or "closed"), flush=True)
    s.sendall(b"UNREGISTER job=4242 proof=" + b"0" * 64 + b"\n")
    print("UNREGNONE " + (_line(s) or "closed"), flush=True)
    s.sendall(b"LIST jobs=all\n")
    print("LISTARGS " + (_line(s) or "closed"), flush=True)


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


class _Drip:
    """Connections from @srcs that drip @line one byte at a time, each opened
    again when the server closes it; the longest any stayed open."""

    def __init__(self, host, port, srcs, per, line):
        self.addr, self.line = (host, port), line
        self.conns, self.opened, self.max_age, self.due = {}, 0, 0.0, []
        for src in srcs:
            for _ in range(per):
                self.open(src)

    def open(self, src):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((src, 0))
        s.setblocking(False)
        try:
            s.connect(self.addr)
        except (BlockingIOError, InterruptedError):
            pass
        self.conns[s] = [src, time.monotonic(), 0, time.monotonic()]
        self.opened += 1

    def close(self, s):
        src, t0 = self.conns.pop(s)[:2]
        self.max_age = max(self.max_age, time.monotonic() - t0)
        s.close()
        self.due.append((time.monotonic() + 0.05, src))

    def step(self, every=0.5):
        now = time.monotonic()
        while self.due and self.due[0][0] <= now:
            self.open(self.due.pop(0)[1])
        for s, st in list(self.conns.items()):
            if now - st[3] >= every:
                st[3] = now
                try:
                    s.send(self.line[st[2] % len(self.line):][:1])
                    st[2] += 1
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    self.close(s)
        r, _, _ = select.select(list(self.conns), [], [], 0.02)
        for s in r:
            try:
                if not s.recv(4096):
                    self.close(s)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self.close(s)

    def end(self):
        for s in list(self.conns):
            s.close()


def _under_drip(d, secs, attempt):
    """@attempt(k) every 0.25 s for @secs while @d drips; (successes, tries)."""
    ok = tries = 0
    end = time.monotonic() + secs
    nxt = time.monotonic()
    while time.monotonic() < end:
        d.step()
        if time.monotonic() >= nxt:
            nxt += 0.25
            try:
                ok += attempt(tries)
            except OSError:
                pass
            tries += 1
    d.end()
    return ok, tries


def drip(host, port, secs, keyfile, srcs):
    key = read_key(keyfile)

    def keyholder(k):  # from a dripping address and from another, in turn
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if k % 2 == 0:
                s.bind((srcs[0], 0))
            s.settimeout(3)
            s.connect((host, port))
            return handshake(s, key)

    d = _Drip(host, port, srcs, 16, b"AUTH " + b"0" * 10000)
    taken, tries = _under_drip(d, secs, keyholder)
    print(f"DRIP opened={d.opened} max_age={d.max_age:.1f} keyholder={taken}/{tries}", flush=True)


def httpdrip(host, port, secs, srcs):
    def scrape(_):
        with socket.create_connection((host, port), timeout=3) as s:
            s.sendall(b"GET /metrics HTTP/1.0\r\nHost: box\r\n\r\n")
            return s.recv(12).startswith(b"HTTP/1.")

    d = _Drip(host, port, srcs, 8, b"GET /metrics HTTP/1.1\r\n" + b"X-Drip: " + b"a" * 10000)
    got, tries = _under_drip(d, secs, scrape)
    print(f"HTTPDRIP opened={d.opened} max_age={d.max_age:.1f} scrapes={got}/{tries}", flush=True)


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
    closed = evicted = 0
    for s in conns:
        s.settimeout(0.01)
        try:
            got = b""
            while True:
                more = s.recv(4096)
                if not more:
                    closed += 1
                    break
                got += more
        except (socket.timeout, OSError):
            pass
        evicted += got.startswith(b"ERR a newer connection took this one's place")
    tail = ""
    if authed:
        authed.settimeout(0.01)
        try:
            tail = " authed=closed" if authed.recv(200) == b"" else " authed=open"
        except socket.timeout:
            tail = " authed=open"
        except OSError:
            tail = " authed=closed"
    print(f"IDLE open={len(conns)} refused={refused} closed={closed} evicted={evicted}{tail}",
          flush=True)


if __name__ == "__main__":
    mode, host, port = sys.argv[1:4]
    if mode == "auth":
        auth(host, int(port), sys.argv[4])
    elif mode == "drip":
        drip(host, int(port), float(sys.argv[4]), sys.argv[5], sys.argv[6].split(","))
    elif mode == "httpdrip":
        httpdrip(host, int(port), float(sys.argv[4]), sys.argv[5].split(","))
    elif mode == "noread":
        noread(host, int(port), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6])
    else:
        idle(host, int(port), int(sys.argv[4]), float(sys.argv[5]),
             sys.argv[6] if len(sys.argv) > 6 else None)
