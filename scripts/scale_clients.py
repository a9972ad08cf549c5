#!/usr/bin/env python3
"""Many TLS + HTTP/2 client connections from one process, for scripts/scale.sh.

    scale_clients.py idle URL N
    scale_clients.py stalled URL N PATH
    scale_clients.py stalled-then-read URL N /size/BYTES

Opens N connections to URL (https://IP:PORT; the certificate is not verified; ALPN h2) with
non-blocking sockets under one selector, at most --parallel of them in TCP/TLS setup at a
time, and sends the HTTP/2 preface with Chromium-sized flow-control settings
(SETTINGS_INITIAL_WINDOW_SIZE 6 MiB, a connection WINDOW_UPDATE to 15 MiB, header table
64 KiB, no push).

- idle: waits for the server's SETTINGS (and acknowledges them), then keeps the connection
  open, answering what the server sends but sending nothing else.
- stalled: GETs PATH on stream 1, reads until the response headers arrive and then never
  reads that socket again (default socket buffers: the kernel's receive buffer fills, then
  the server's send buffer and queues).

- stalled-then-read: like stalled until SIGUSR1; then reads every response to its end,
  acknowledging what it reads (WINDOW_UPDATEs, so bodies larger than the windows complete),
  and checks each body byte-exact against what the examples' `/size/BYTES` sends: BYTES
  bytes, the byte at offset i being i % 251 (examples/src/body.rs), plus a matching
  content-length. Each connection is closed once its response has ended.

Prints one line `ready ok=K failed=F secs=S` on stdout once every connection is set up (or
failed, or --timeout passed). idle and stalled then hold the connections until SIGTERM or
SIGINT, close them, print `closed` and exit 0. stalled-then-read holds them until SIGUSR1
(SIGTERM or SIGINT close them as above), reads, and prints
`read completed=C failed=F bytes=B secs=S` (B: body bytes received and checked, S: from the
signal until the last response ended; connections that failed at setup count as failed),
then exits 0 if every download completed byte-exact, 1 otherwise (or when --read-timeout
passed first). Errors go to stderr (the first few, then "..."). Needs the `h2` package
(pip install h2).
"""

import argparse
import errno
import os
import re
import selectors
import signal
import socket
import ssl
import sys
import time
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.events
import h2.settings
from h2.settings import SettingCodes

STREAM_WINDOW = 6 * 1024 * 1024
CONN_WINDOW = 15 * 1024 * 1024
DEFAULT_CONN_WINDOW = 65535

# The examples' body pattern (examples/src/body.rs): the byte at offset i is i % 251.
PATTERN_PERIOD = 251
# Enough pattern to compare any DATA frame at any offset with one slice: a frame carries at
# most SETTINGS_MAX_FRAME_SIZE bytes, which these clients leave at its 16 KiB default
# (RFC 9113 section 6.5.2); 64 KiB leaves room, and longer chunks are compared in pieces.
PATTERN_SPAN = 64 * 1024
PATTERN = bytes(i % PATTERN_PERIOD for i in range(PATTERN_SPAN + PATTERN_PERIOD))

CONNECTING, HANDSHAKE, SETUP, READY, STALLED, READING, DONE, FAILED = range(8)


def pattern_matches(offset, data):
    """True when data is the body pattern from offset on."""
    view = memoryview(data)
    while view:
        k = min(len(view), PATTERN_SPAN)
        start = offset % PATTERN_PERIOD
        if view[:k] != PATTERN[start : start + k]:
            return False
        view = view[k:]
        offset += k
    return True


class Conn:
    __slots__ = ("sock", "tls", "h2", "state", "out", "status", "events", "got", "unacked")

    def __init__(self):
        self.sock = None
        self.tls = None
        self.h2 = None
        self.state = CONNECTING
        self.out = b""
        self.status = None
        self.events = 0
        self.got = 0  # body bytes received (and checked) so far
        self.unacked = 0  # flow-controlled bytes not yet acknowledged


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["idle", "stalled", "stalled-then-read"])
    ap.add_argument("url")
    ap.add_argument("n", type=int)
    ap.add_argument("path", nargs="?", default="/size/16777216")
    ap.add_argument("--parallel", type=int, default=200, help="connections in setup at once")
    ap.add_argument("--timeout", type=float, default=300, help="seconds for the setup")
    ap.add_argument(
        "--read-timeout", type=float, default=1800, help="seconds for the reads after SIGUSR1"
    )
    args = ap.parse_args()
    reads = args.mode == "stalled-then-read"
    stalls = args.mode != "idle"
    expected = None
    if reads:
        m = re.fullmatch(r"/size/([0-9]+)", args.path)
        if not m:
            ap.error("stalled-then-read needs a /size/BYTES path (its body is known)")
        expected = int(m.group(1))

    u = urlsplit(args.url)
    host, port = u.hostname, u.port or 443
    authority = u.netloc.encode()
    addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])

    sel = selectors.DefaultSelector()
    conns = []
    errors = []  # the first few, printed with the ready line
    noted = 0
    pending = args.n  # not yet started
    in_setup = 0
    done = 0  # READY, STALLED or FAILED
    stop = False
    go = False  # SIGUSR1 came: read (stalled-then-read)
    completed = 0
    read_failed = 0
    read_bytes = 0

    def on_signal(_sig, _frame):
        nonlocal stop
        stop = True

    def on_go(_sig, _frame):
        nonlocal go
        go = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if reads:
        signal.signal(signal.SIGUSR1, on_go)

    def set_events(c, ev):
        if ev == c.events:
            return
        if c.events == 0:
            sel.register(c.sock, ev, c)
        elif ev == 0:
            sel.unregister(c.sock)
        else:
            sel.modify(c.sock, ev, c)
        c.events = ev

    def note(why):
        nonlocal noted
        noted += 1
        if noted > 6:
            return
        why = why if noted <= 5 else "..."
        if go:  # past the ready line: at once
            print(f"scale_clients: {why}", file=sys.stderr, flush=True)
        else:
            errors.append(why)

    def fail(c, why):
        nonlocal in_setup, done, read_failed
        note(why)
        if c.state in (CONNECTING, HANDSHAKE, SETUP):
            in_setup -= 1
            done += 1
        elif c.state in (STALLED, READING):
            read_failed += 1
        set_events(c, 0)
        c.state = FAILED
        try:
            c.sock.close()
        except OSError:
            pass

    def finish_setup(c, state):
        nonlocal in_setup, done
        in_setup -= 1
        done += 1
        c.state = state

    def start_one():
        nonlocal pending, in_setup
        pending -= 1
        in_setup += 1
        c = Conn()
        conns.append(c)
        c.sock = socket.socket(addr[0], socket.SOCK_STREAM)
        c.sock.setblocking(False)
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rc = c.sock.connect_ex(addr[4])
        if rc not in (0, errno.EINPROGRESS):
            fail(c, f"connect: {os.strerror(rc)}")
            return
        set_events(c, selectors.EVENT_WRITE)

    def finish_read(c):
        nonlocal completed, read_bytes
        completed += 1
        read_bytes += c.got
        set_events(c, 0)
        c.state = DONE
        try:
            c.sock.close()
        except OSError:
            pass

    def start_reading():
        for c in conns:
            if c.state == STALLED:
                c.state = READING
                if c.unacked:  # what came with the response headers
                    c.h2.acknowledge_received_data(c.unacked, 1)
                    c.unacked = 0
                step(c, selectors.EVENT_READ)

    def flush(c):
        """Sends c.out and what h2 has queued; False if the socket would block."""
        c.out += c.h2.data_to_send()
        while c.out:
            try:
                k = c.tls.send(c.out)
            except (ssl.SSLWantWriteError, BlockingIOError):
                return False
            c.out = c.out[k:]
        return True

    def start_h2(c):
        cfg = h2.config.H2Configuration(client_side=True, header_encoding=None)
        c.h2 = h2.connection.H2Connection(config=cfg)
        c.h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                SettingCodes.HEADER_TABLE_SIZE: 65536,
                SettingCodes.ENABLE_PUSH: 0,
                SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                SettingCodes.MAX_HEADER_LIST_SIZE: 262144,
            },
        )
        c.h2.initiate_connection()
        c.h2.increment_flow_control_window(CONN_WINDOW - DEFAULT_CONN_WINDOW)
        if stalls:
            c.h2.send_headers(
                1,
                [
                    (b":method", b"GET"),
                    (b":scheme", b"https"),
                    (b":authority", authority),
                    (b":path", args.path.encode()),
                ],
                end_stream=True,
            )
        c.state = SETUP

    def read_h2(c):
        """Reads what the socket has and feeds h2; returns False on EOF/error."""
        while True:
            try:
                data = c.tls.recv(65536)
            except (ssl.SSLWantReadError, BlockingIOError):
                return True
            except (ssl.SSLError, OSError) as e:
                fail(c, f"recv: {e}")
                return False
            if not data:
                if c.state == SETUP:
                    fail(c, "server closed the connection during setup")
                elif c.state == READING:
                    fail(c, f"server closed the connection after {c.got} of {expected} bytes")
                else:
                    set_events(c, 0)
                    c.state = FAILED
                return False
            try:
                evs = c.h2.receive_data(data)
            except Exception as e:  # h2 protocol errors
                fail(c, f"h2: {e!r}")
                return False
            for ev in evs:
                if isinstance(ev, h2.events.RemoteSettingsChanged):
                    if args.mode == "idle" and c.state == SETUP:
                        finish_setup(c, READY)
                elif isinstance(ev, h2.events.ResponseReceived):
                    if c.state == SETUP:
                        headers = dict(ev.headers)
                        status = headers.get(b":status")
                        if status != b"200":
                            fail(c, f"status {status!r}")
                            return False
                        length = headers.get(b"content-length")
                        if reads and length != str(expected).encode():
                            fail(c, f"content-length {length!r}, expected {expected}")
                            return False
                        finish_setup(c, STALLED)
                elif isinstance(ev, h2.events.DataReceived):
                    if not reads:
                        continue
                    if not pattern_matches(c.got, ev.data):
                        end = c.got + len(ev.data)
                        fail(c, f"body differs from the pattern within bytes {c.got}..{end}")
                        return False
                    c.got += len(ev.data)
                    c.unacked += ev.flow_controlled_length
                    if c.got > expected:
                        fail(c, f"body longer than {expected} bytes")
                        return False
                elif isinstance(ev, h2.events.StreamEnded):
                    if reads and c.state in (STALLED, READING):
                        if c.got != expected:
                            fail(c, f"body ended after {c.got} of {expected} bytes")
                            return False
                        finish_read(c)
                        return False
                elif isinstance(ev, (h2.events.ConnectionTerminated, h2.events.StreamReset)):
                    if c.state in (SETUP, STALLED, READING):
                        fail(c, f"h2: {ev!r} after {c.got} body bytes")
                        return False
            if c.state == READING and c.unacked:
                # Return what was read to both windows (h2 sends a WINDOW_UPDATE once enough
                # has been acknowledged), so that bodies beyond the windows keep coming.
                c.h2.acknowledge_received_data(c.unacked, 1)
                c.unacked = 0
            if c.state == STALLED:
                # Never read again: whatever else arrived stays in the kernel buffer.
                set_events(c, 0)
                return True

    def step(c, mask):
        if c.state == CONNECTING:
            err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                fail(c, f"connect: {os.strerror(err)}")
                return
            set_events(c, 0)
            c.tls = ctx.wrap_socket(c.sock, do_handshake_on_connect=False)
            c.sock = c.tls
            c.state = HANDSHAKE
            mask = 0
        if c.state == HANDSHAKE:
            try:
                c.tls.do_handshake()
            except ssl.SSLWantReadError:
                set_events(c, selectors.EVENT_READ)
                return
            except ssl.SSLWantWriteError:
                set_events(c, selectors.EVENT_WRITE)
                return
            except (ssl.SSLError, OSError) as e:
                fail(c, f"handshake: {e}")
                return
            if c.tls.selected_alpn_protocol() != "h2":
                fail(c, f"ALPN: {c.tls.selected_alpn_protocol()!r}")
                return
            start_h2(c)
            mask = selectors.EVENT_READ  # the server may have sent its SETTINGS already
        if c.state in (SETUP, READY, READING):
            if mask & selectors.EVENT_READ and not read_h2(c):
                return
            if c.state in (FAILED, DONE):
                return
            try:
                sent = flush(c)
            except (ssl.SSLError, OSError) as e:
                fail(c, f"send: {e}")
                return
            if c.state == STALLED:
                return
            set_events(c, selectors.EVENT_READ | (0 if sent else selectors.EVENT_WRITE))

    t0 = time.monotonic()
    deadline = t0 + args.timeout
    reported = False
    reading = False
    t_read = None
    while not stop:
        while pending and in_setup < args.parallel:
            start_one()
        if not reported and (done == args.n or time.monotonic() > deadline):
            ok = sum(c.state in (READY, STALLED, DONE) for c in conns)
            for why in errors:
                print(f"scale_clients: {why}", file=sys.stderr)
            print(f"ready ok={ok} failed={args.n - ok} secs={time.monotonic() - t0:.2f}", flush=True)
            reported = True
        if go and reported and not reading:
            reading = True
            t_read = time.monotonic()
            start_reading()
        if reading:
            if completed + read_failed == ok:
                break
            if time.monotonic() > t_read + args.read_timeout:
                note(f"--read-timeout: {ok - completed - read_failed} downloads unfinished")
                read_failed = ok - completed
                break
        try:
            ready = sel.select(timeout=0.5)
        except InterruptedError:
            continue
        for key, mask in ready:
            step(key.data, mask)
    for c in conns:
        try:
            c.sock.close()
        except OSError:
            pass
    if reading:
        failed = args.n - completed
        secs = time.monotonic() - t_read
        print(
            f"read completed={completed} failed={failed} bytes={read_bytes} secs={secs:.2f}",
            flush=True,
        )
        sys.exit(1 if failed else 0)
    print("closed", flush=True)


if __name__ == "__main__":
    main()
