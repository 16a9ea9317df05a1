#!/usr/bin/env python3
"""Whoever reaches a job's rank 0 first, for tests/net/worker.sh: five
connections to rank 0's door, opened as soon as it listens and before the
ranks come, held until SIGTERM.

  door-abuse.py hello HOST PORT JOB TOKEN N   rank 0's bootstrap ([job],
        [peers]): a HELLO is proved with [job] token
  door-abuse.py join HOST PORT SECRET N       a rendezvous with [rendezvous]
        secret: a JOIN is proved with the secret

The five: one that says nothing; one that drips a first message a byte
every 0.2 s; one that conflicts (a HELLO with another token, a JOIN with
another world size); one as rank 1 with a made-up proof; one as rank 2 with
the rank's own words and a proof that holds on another connection (made
with the right key for another nonce: a message captured and replayed).
Each of the last three used to stop the job or take the rank's place.

Prints, once the job's ranks have come and rank 0 has answered, one line
per connection: "DOOR <kind> answered=<rank 0's first line, or ->" where
the kind is silent, drip, conflict, forged, replayed.
"""
import hashlib
import hmac
import signal
import socket
import struct
import sys
import threading
import time

PROOF_LABEL = b"pbox proof v1\0"


def job_key(token, job, nonce):
    """nic_job_key(): BLAKE2b-256 of the label and the fields, big-endian."""
    m = b"pbox job key v1\0" + struct.pack(">QIQ", token, job, nonce)
    return hashlib.blake2b(m, digest_size=32).digest()


def proof(key, nonce, line):
    mac = hmac.new(key, PROOF_LABEL + nonce + line.encode(), hashlib.sha256)
    return line + " proof=" + mac.hexdigest()


def connect(host, port):
    for _ in range(3000):  # until rank 0 listens
        try:
            return socket.create_connection((host, port), timeout=1)
        except OSError:
            time.sleep(0.01)
    sys.exit("door-abuse: rank 0 never listened at %s:%d" % (host, port))


def messages(mode, args):
    """The conflicting, forged and replayed first messages."""
    other_nonce = bytes(range(16))
    if mode == "hello":
        job, token, n = int(args[0]), int(args[1]), int(args[2])
        token_hash = struct.unpack(">Q", job_key(token, job, (1 << 64) - 1)[:8])[0]
        key = job_key(token, job, (1 << 64) - 2)

        def hello(rank, th):
            return ("HELLO rank=%d world_size=%d job=%d token=%d chunk_size=32768 mtu=9000 "
                    "bandwidth=1000 peers=0 layout=0 heartbeat=3000000 compression=0 deterministic=0 "
                    "leader_order=0 tensors=0" %
                    (rank, n, job, th))
        conflict = hello(3, 1) + "\nEND\n"
        forged = hello(1, token_hash) + " proof=" + "5a" * 32 + "\nEND\n"
        replayed = proof(key, other_nonce, hello(2, token_hash)) + "\nEND\n"
    else:
        secret, n = args[0].encode(), int(args[1])
        key = hashlib.blake2b(b"pbox rendezvous secret v1\0" + secret, digest_size=32).digest()

        def join(rank, world):
            return "JOIN rank=%d world_size=%d ep=198.18.100.%d:%d pk=%s" % (
                rank, world, 200 + rank, 40000 + rank, "00" * 32)
        conflict = join(2, n + 5) + "\n"
        forged = join(1, n) + " proof=" + "5a" * 32 + "\n"
        replayed = proof(key, other_nonce, join(2, n)) + "\n"
    return conflict.encode(), forged.encode(), replayed.encode()


def first_line(s, t):
    """rank 0's first line after its NONCE, or '-' (closed, or nothing in t s)."""
    s.settimeout(t)
    buf = b""
    try:
        while buf.count(b"\n") < 2:
            got = s.recv(4096)
            if not got:
                break
            buf += got
    except OSError:
        pass
    lines = buf.decode(errors="replace").split("\n")
    return lines[1].strip() if len(lines) > 2 and lines[1].strip() else "-"


def main():
    if len(sys.argv) < 5 or sys.argv[1] not in ("hello", "join"):
        sys.exit(__doc__)
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    conflict, forged, replayed = messages(mode, sys.argv[4:])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    kinds = ["silent", "drip", "conflict", "forged", "replayed"]
    conns = {k: connect(host, port) for k in kinds}
    for k, m in (("conflict", conflict), ("forged", forged), ("replayed", replayed)):
        conns[k].sendall(m)
    print("DOOR sent", flush=True)
    answers = {}

    def listen(k):
        answers[k] = first_line(conns[k], 60)
    readers = [threading.Thread(target=listen, args=(k,)) for k in ("conflict", "forged", "replayed")]
    for r in readers:
        r.start()
    drip = (forged if mode == "join" else conflict)[:-1]  # never whole
    i = 0
    while not stop.is_set():
        if i < len(drip):
            try:
                conns["drip"].send(drip[i:i + 1])
            except OSError:
                pass
            i += 1
        stop.wait(0.2)
    for r in readers:
        r.join(1)
    for k in kinds:
        print("DOOR %s answered=%s" % (k, answers.get(k, "-")))
        conns[k].close()


if __name__ == "__main__":
    main()
