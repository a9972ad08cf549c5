#!/usr/bin/env python3
"""An HTTP/2 client (python `h2`) that sends RFC 9218 PRIORITY_UPDATE frames, valid and
malformed, to an example server, checks every response body byte, and prints a JSON
summary on stdout (the last line). Used by examples/tests/interop.rs.

    python3 priority_update_client.py HOST PORT [--flood N]

The h2 library does not know PRIORITY_UPDATE (frame type 0x10), so the frames are built
here and written on the socket between flushes of `conn.data_to_send()`, i.e. always at
a frame boundary; the h2 state machine never sees them, and the server sends nothing back
for them (unknown to hyper's h2, which ignores unknown frame types).

What is sent, in order, on one connection:
  1. before the stream opens: PRIORITY_UPDATE for the next stream id, then its request
     (`/critical`, 4096 bytes, the response pins `priority: u=0`);
  2. during a response: `/bg/during` (1 MiB) with `priority: u=5, i`; while the first
     64 KiB window is unacknowledged (the response cannot have ended) two updates for it;
  3. after streams ended: one update each for the two finished streams;
  4. malformed, one of each kind: payload under 4 bytes, prioritized stream id 0, a
     non-ASCII field value, and a well-formed payload on a non-zero stream;
  5. a flood of N (default 5000) updates for idle stream ids far above any the client
     opens, written while `/size/300000` is in flight;
  6. one more request (`/size/300000`) after all that: the connection keeps serving.
Then GOAWAY and close, so the server logs the connection's counters.

Exit status 0 only if every response was 200 with the exact pattern body
(byte i == i % 251) and the expected `priority` response header.
"""

import argparse
import json
import socket
import ssl
import struct
import sys
import time

import h2
import h2.config
import h2.connection
import h2.events

PRIORITY_UPDATE = 0x10
TIMEOUT = 30.0
FLOOD_BASE = 1_000_001  # odd (client-initiated), far above the ids this client opens


def pattern(n):
    block = bytes(range(251))
    reps, rest = divmod(n, 251)
    return block * reps + block[:rest]


def raw_frame(kind, flags, stream_id, payload):
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream_id & 0x7FFFFFFF)
        + payload
    )


def update_payload(prioritized, value):
    if isinstance(value, str):
        value = value.encode("ascii")
    return struct.pack(">I", prioritized) + value


class Stream:
    def __init__(self, path):
        self.path = path
        self.status = None
        self.headers = {}
        self.body = bytearray()
        self.ended = False
        self.reset = None
        self.unacked = 0  # flow-controlled bytes held back while `hold` is set
        self.hold = False


class Client:
    def __init__(self, host, port):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        raw = socket.create_connection((host, port), timeout=TIMEOUT)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.local_port = raw.getsockname()[1]
        self.sock = ctx.wrap_socket(raw, server_hostname="localhost")
        alpn = self.sock.selected_alpn_protocol()
        if alpn != "h2":
            raise SystemExit(f"ALPN negotiated {alpn!r}, not h2")
        self.authority = f"{host}:{port}".encode()
        self.conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.conn.initiate_connection()
        self.flush()
        self.streams = {}
        self.terminated = None
        self.raw_frames = 0
        self.pings = 0

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def send_raw(self, frames):
        """Writes raw frames at a frame boundary: after everything h2 has queued."""
        self.flush()
        self.sock.sendall(b"".join(frames))
        self.raw_frames += len(frames)

    def request(self, path, priority=None):
        sid = self.conn.get_next_available_stream_id()
        headers = [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":authority", self.authority),
            (b":path", path.encode()),
            (b"user-agent", f"python-h2/{h2.__version__}".encode()),
        ]
        if priority is not None:
            headers.append((b"priority", priority.encode()))
        self.streams[sid] = Stream(path)
        self.conn.send_headers(sid, headers, end_stream=True)
        self.flush()
        return sid

    def release(self, sid):
        s = self.streams[sid]
        s.hold = False
        if s.unacked:
            self.conn.acknowledge_received_data(s.unacked, sid)
            s.unacked = 0
        self.flush()

    def pump(self, until, what):
        deadline = time.monotonic() + TIMEOUT
        while not until():
            if self.terminated is not None:
                raise SystemExit(f"connection terminated while waiting for {what}: {self.terminated}")
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            data = self.sock.recv(65536)
            if not data:
                raise SystemExit(f"server closed the connection while waiting for {what}")
            for ev in self.conn.receive_data(data):
                self.on_event(ev)
            self.flush()

    def on_event(self, ev):
        if isinstance(ev, h2.events.ResponseReceived):
            s = self.streams[ev.stream_id]
            for k, v in ev.headers:
                s.headers[k.decode()] = v.decode()
            s.status = int(s.headers[":status"])
        elif isinstance(ev, h2.events.DataReceived):
            s = self.streams[ev.stream_id]
            s.body += ev.data
            if s.hold:
                s.unacked += ev.flow_controlled_length
            else:
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            self.streams[ev.stream_id].ended = True
        elif isinstance(ev, h2.events.StreamReset):
            self.streams[ev.stream_id].reset = ev.error_code
            self.streams[ev.stream_id].ended = True
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.terminated = f"GOAWAY error={ev.error_code} last_stream={ev.last_stream_id}"
        elif isinstance(ev, h2.events.PingAckReceived):
            self.pings += 1

    def wait_ended(self, sid):
        self.pump(lambda: self.streams[sid].ended, f"end of stream {sid} ({self.streams[sid].path})")

    def close(self):
        self.conn.close_connection()
        self.flush()
        try:
            self.sock.unwrap()
        except (OSError, ssl.SSLError):
            pass
        self.sock.close()


def check(stream, length, priority_header, failures):
    """Records a failure unless `stream` is a complete 200 with `length` pattern bytes."""
    what = stream.path
    if stream.reset is not None:
        failures.append(f"{what}: reset with error {stream.reset}")
        return
    if stream.status != 200:
        failures.append(f"{what}: status {stream.status}")
    body = bytes(stream.body)
    expected = pattern(length)
    if body != expected:
        bad = next(
            (i for i, (a, b) in enumerate(zip(body, expected)) if a != b),
            min(len(body), len(expected)),
        )
        failures.append(f"{what}: {len(body)} bytes, differs from the {length}-byte pattern at {bad}")
    got = stream.headers.get("priority", "")
    if got != priority_header:
        failures.append(f"{what}: priority response header {got!r}, expected {priority_header!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--flood", type=int, default=5000)
    args = ap.parse_args()

    c = Client(args.host, args.port)
    failures = []
    checked = 0
    sent = {
        "before_open": 0,
        "during_response": 0,
        "after_end": 0,
        "malformed": {},
        "idle_flood": 0,
    }

    # 1. Before the stream opens: the update names the id the next request will use.
    next_id = c.conn.get_next_available_stream_id()
    c.send_raw([raw_frame(PRIORITY_UPDATE, 0, 0, update_payload(next_id, "u=2"))])
    sent["before_open"] += 1
    s1 = c.request("/critical", priority="u=6")
    assert s1 == next_id, (s1, next_id)
    c.wait_ended(s1)
    check(c.streams[s1], 4096, "u=0", failures)
    checked += 4096

    # 2. During a response: hold the first window unacknowledged, so the 1 MiB response
    # cannot end before the updates are read.
    s3 = c.request("/bg/during", priority="u=5, i")
    c.streams[s3].hold = True
    c.pump(lambda: len(c.streams[s3].body) > 0, "first DATA of /bg/during")
    in_flight = len(c.streams[s3].body)
    c.send_raw(
        [
            raw_frame(PRIORITY_UPDATE, 0, 0, update_payload(s3, "u=1")),
            raw_frame(PRIORITY_UPDATE, 0, 0, update_payload(s3, "u=6, i")),
        ]
    )
    sent["during_response"] += 2
    c.release(s3)
    c.wait_ended(s3)
    check(c.streams[s3], 1 << 20, "", failures)
    checked += 1 << 20

    # 3. After the streams ended (the server wrote their END_STREAM before we saw it).
    c.send_raw([raw_frame(PRIORITY_UPDATE, 0, 0, update_payload(sid, "u=3")) for sid in (s1, s3)])
    sent["after_end"] += 2

    # 4. Malformed, one of each kind.
    malformed = {
        "short_payload": raw_frame(PRIORITY_UPDATE, 0, 0, b"\x00\x00\x01"),
        "zero_stream_id": raw_frame(PRIORITY_UPDATE, 0, 0, update_payload(0, "u=1")),
        "non_ascii": raw_frame(PRIORITY_UPDATE, 0, 0, update_payload(s3, "u=1, \u00e9".encode("utf-8"))),
        "non_zero_stream": raw_frame(PRIORITY_UPDATE, 0, s3, update_payload(s3, "u=1")),
    }
    c.send_raw(list(malformed.values()))
    sent["malformed"] = {k: 1 for k in malformed}

    # 5. The flood for idle streams, while a response is in flight (held at its first
    # window, so it is still open when the flood is read).
    s5 = c.request("/size/300000", priority="u=4")
    c.streams[s5].hold = True
    c.pump(lambda: len(c.streams[s5].body) > 0, "first DATA of /size/300000")
    batch = []
    for k in range(args.flood):
        value = f"u={k % 8}" + (", i" if k % 2 else "")
        batch.append(raw_frame(PRIORITY_UPDATE, 0, 0, update_payload(FLOOD_BASE + 2 * k, value)))
        if len(batch) == 500:
            c.send_raw(batch)
            batch = []
    if batch:
        c.send_raw(batch)
    sent["idle_flood"] = args.flood
    c.release(s5)
    c.wait_ended(s5)
    check(c.streams[s5], 300000, "", failures)
    checked += 300000

    # 6. The connection keeps serving: a PING round trip and one more request.
    c.conn.ping(b"interop!")
    c.flush()
    c.pump(lambda: c.pings > 0, "PING ack")
    s7 = c.request("/size/300000")
    c.wait_ended(s7)
    check(c.streams[s7], 300000, "", failures)
    checked += 300000
    served_after = c.streams[s7].status == 200 and c.streams[s7].ended and c.terminated is None

    c.close()

    summary = {
        "h2_version": h2.__version__,
        "python": sys.version.split()[0],
        "local_port": c.local_port,
        "streams": {
            str(sid): {
                "path": s.path,
                "status": s.status,
                "bytes": len(s.body),
                "priority": s.headers.get("priority", ""),
            }
            for sid, s in c.streams.items()
        },
        "first_window_bytes": in_flight,
        "sent": sent,
        "valid_to_open_streams": sent["during_response"],
        "raw_frames": c.raw_frames,
        "bytes_checked": checked,
        "served_after": served_after,
        "failures": failures,
    }
    print(json.dumps(summary, sort_keys=True))
    return 0 if not failures and served_after else 1


if __name__ == "__main__":
    sys.exit(main())
