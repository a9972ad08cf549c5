#!/usr/bin/env python3
"""Many TLS + HTTP/2 client connections from one process, for scripts/scale.sh.

    scale_clients.py idle URL N
    scale_clients.py stalled URL N PATH

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

Prints one line `ready ok=K failed=F secs=S` on stdout once every connection is set up (or
failed, or --timeout passed), then holds the connections until SIGTERM or SIGINT, closes
them, prints `closed` and exits 0. Errors go to stderr
(the first few, then a count). Needs the `h2` package (pip install h2).
"""

import argparse
import errno
import os
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

CONNECTING, HANDSHAKE, SETUP, READY, STALLED, FAILED = range(6)


class Conn:
    __slots__ = ("sock", "tls", "h2", "state", "out", "status", "events")

    def __init__(self):
        self.sock = None
        self.tls = None
        self.h2 = None
        self.state = CONNECTING
        self.out = b""
        self.status = None
        self.events = 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["idle", "stalled"])
    ap.add_argument("url")
    ap.add_argument("n", type=int)
    ap.add_argument("path", nargs="?", default="/size/16777216")
    ap.add_argument("--parallel", type=int, default=200, help="connections in setup at once")
    ap.add_argument("--timeout", type=float, default=300, help="seconds for the setup")
    args = ap.parse_args()

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
    errors = []
    pending = args.n  # not yet started
    in_setup = 0
    done = 0  # READY, STALLED or FAILED
    stop = False

    def on_signal(_sig, _frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

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

    def fail(c, why):
        nonlocal in_setup, done
        if len(errors) < 5:
            errors.append(why)
        elif len(errors) == 5:
            errors.append("...")
        if c.state in (CONNECTING, HANDSHAKE, SETUP):
            in_setup -= 1
            done += 1
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
        if args.mode == "stalled":
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
                        status = dict(ev.headers).get(b":status")
                        if status != b"200":
                            fail(c, f"status {status!r}")
                            return False
                        finish_setup(c, STALLED)
                elif isinstance(ev, (h2.events.ConnectionTerminated, h2.events.StreamReset)):
                    if c.state == SETUP:
                        fail(c, f"h2: {ev!r}")
                        return False
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
        if c.state in (SETUP, READY):
            if mask & selectors.EVENT_READ and not read_h2(c):
                return
            if c.state == FAILED:
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
    while not stop:
        while pending and in_setup < args.parallel:
            start_one()
        if not reported and (done == args.n or time.monotonic() > deadline):
            ok = sum(c.state in (READY, STALLED) for c in conns)
            for why in errors:
                print(f"scale_clients: {why}", file=sys.stderr)
            print(f"ready ok={ok} failed={args.n - ok} secs={time.monotonic() - t0:.2f}", flush=True)
            reported = True
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
    print("closed", flush=True)


if __name__ == "__main__":
    main()
