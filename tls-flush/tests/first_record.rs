//! The connection's first response head on the wire: the wrapper seals it (with the
//! server's SETTINGS before it) as a TLS record of its own and sends that record in the
//! same write as the record of its first DATA, so a client reads the head as soon as its
//! first segment arrives, at no packet of its own. Stock hyper over tokio-rustls sends
//! the head and the start of the body in one record: the head waits for the whole record.
//!
//! The server logs where each of its socket writes starts and ends in the TCP byte stream;
//! the client (rustls driven by hand over a blocking socket) decrypts the server's records
//! one at a time, so it knows where each record lies in that stream and which frames it
//! carried.

mod serve_support;

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::{ClientConfig, ClientConnection};
use serve_support::*;
use tls_flush::{FlushConfig, FlushStream, Transport};
use tls_flush_testkit::frame::{
    parse_frames_lenient, settings_frame, Frame, DATA, END_HEADERS, END_STREAM, HEADERS, PREFACE,
};
use tls_flush_testkit::tls::localhost;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The response body: three segments' worth, so that its record ends well after the
/// first segment.
const BODY: usize = 4096;
/// TLS record header: content type, version, length.
const RECORD_HEADER: usize = 5;
/// TLS 1.3 application data (and encrypted handshake) records.
const APPLICATION_DATA: u8 = 23;

/// The server's TCP socket, logging the stream offsets each write covered.
struct LoggedTcp {
    tcp: TcpStream,
    written: u64,
    writes: Arc<Mutex<Vec<(u64, u64)>>>,
}

impl AsyncRead for LoggedTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for LoggedTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = std::task::ready!(Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs))?;
        let start = this.written;
        this.written += n as u64;
        this.writes.lock().unwrap().push((start, this.written));
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

impl Transport for LoggedTcp {
    fn tcp_stream(&self) -> Option<&TcpStream> {
        Some(&self.tcp)
    }
}

#[derive(Debug, Clone, Copy)]
enum Server {
    Stock,
    Ours,
}

/// Serves one connection; returns its address and the log of the server's writes.
async fn server(kind: Server) -> (SocketAddr, Arc<Mutex<Vec<(u64, u64)>>>, Arc<ClientConfig>) {
    let (acceptor, client) = tls_pair();
    let (listener, addr) = loopback_listener().await;
    let writes = Arc::new(Mutex::new(Vec::new()));
    let log = writes.clone();
    let app = Router::new().route("/body", get(|| async { Bytes::from(pattern(BODY)) }));
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let logged = LoggedTcp {
            tcp,
            written: 0,
            writes: log,
        };
        let tls = acceptor.accept(logged).await.unwrap();
        let service = TowerToHyperService::new(app);
        let builder = auto::Builder::new(TokioExecutor::new());
        let _ = match kind {
            Server::Stock => builder.serve_connection(TokioIo::new(tls), service).await,
            Server::Ours => {
                let stream = FlushStream::new(tls, FlushConfig::default());
                builder
                    .serve_connection(TokioIo::new(stream), service)
                    .await
            }
        };
    });
    (addr, writes, client)
}

/// One record the client received: where its ciphertext lies in the TCP stream, and the
/// application bytes it carried.
struct Received {
    start: u64,
    end: u64,
    plaintext: Vec<u8>,
}

/// `GET /body` over a new connection; returns the server's records, each decrypted alone.
fn fetch_records(addr: SocketAddr, config: Arc<ClientConfig>) -> Vec<Received> {
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(TIMEOUT)).unwrap();
    tcp.set_nodelay(true).unwrap();
    let mut tls = ClientConnection::new(config, localhost()).unwrap();
    let mut request = PREFACE.to_vec();
    request.extend(settings_frame(0, &[]).encode());
    request.extend(request_headers("/body").encode());
    tls.writer().write_all(&request).unwrap();

    let mut records = Vec::new();
    let (mut wire, mut at, mut plain) = (Vec::new(), 0u64, Vec::new());
    while !body_complete(&plain) {
        // The ClientHello; then the client's Finished and the request, once it may.
        while tls.wants_write() {
            tls.write_tls(&mut tcp).unwrap();
        }
        let mut buf = [0u8; 65536];
        let n = tcp.read(&mut buf).expect("the server's records");
        assert!(n > 0, "the server closed before the body ended");
        wire.extend_from_slice(&buf[..n]);
        while let Some(len) = record_len(&wire) {
            let record: Vec<u8> = wire.drain(..len).collect();
            let start = at;
            at += len as u64;
            // rustls takes a record in more than one read when it is large.
            let mut rest = &record[..];
            while !rest.is_empty() {
                tls.read_tls(&mut rest).unwrap();
            }
            tls.process_new_packets().unwrap();
            let mut plaintext = Vec::new();
            match tls.reader().read_to_end(&mut plaintext) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
            plain.extend_from_slice(&plaintext);
            if record[0] == APPLICATION_DATA {
                records.push(Received {
                    start,
                    end: at,
                    plaintext,
                });
            }
        }
    }
    records
}

/// The length of the whole record at the front of `wire`, once all of it is there.
fn record_len(wire: &[u8]) -> Option<usize> {
    let header = wire.get(..RECORD_HEADER)?;
    let len = RECORD_HEADER + usize::from(u16::from_be_bytes([header[3], header[4]]));
    (wire.len() >= len).then_some(len)
}

/// `GET path` on stream 1, its header block in HPACK literals.
fn request_headers(path: &str) -> Frame {
    // Indexed :method GET (2) and :scheme https (7); :authority (1) and :path (4) as
    // literals with an indexed name, not indexed.
    let mut block = vec![0x82, 0x87];
    for (name, value) in [(1u8, "localhost"), (4, path)] {
        block.push(name);
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    Frame::new(HEADERS, END_HEADERS | END_STREAM, 1, block)
}

fn body_complete(plain: &[u8]) -> bool {
    let (frames, _) = parse_frames_lenient(plain);
    frames
        .iter()
        .any(|f| f.kind == DATA && f.stream() == 1 && f.ends_stream())
}

/// Which records hold the end of stream 1's HEADERS and the start of its first DATA, and
/// whether one server write carried both records whole.
fn head_and_data(records: &[Received], writes: &[(u64, u64)]) -> (usize, usize, bool) {
    let mut ends = Vec::new();
    let mut all = Vec::new();
    for r in records {
        all.extend_from_slice(&r.plaintext);
        ends.push(all.len());
    }
    let record_at = |offset: usize| ends.iter().position(|&end| offset < end).unwrap();
    let (frames, _) = parse_frames_lenient(&all);
    let (mut head, mut data, mut offset) = (None, None, 0);
    for f in &frames {
        if f.stream() == 1 && f.kind == HEADERS {
            head.get_or_insert(record_at(offset + f.wire_len() - 1));
        }
        if f.stream() == 1 && f.kind == DATA {
            data.get_or_insert(record_at(offset));
        }
        offset += f.wire_len();
    }
    let (head, data) = (head.expect("HEADERS"), data.expect("DATA"));
    let (from, to) = (records[head].start, records[data].end);
    let one_write = writes.iter().any(|&(s, e)| s <= from && to <= e);
    (head, data, one_write)
}

async fn first_response(kind: Server) -> (usize, usize, bool) {
    let (addr, writes, client) = server(kind).await;
    let records = within(
        "the first response",
        tokio::task::spawn_blocking(move || fetch_records(addr, client)),
    )
    .await
    .unwrap();
    let body: usize = {
        let all: Vec<u8> = records.iter().flat_map(|r| r.plaintext.clone()).collect();
        let (frames, _) = parse_frames_lenient(&all);
        let data: Vec<u8> = frames
            .iter()
            .filter(|f| f.kind == DATA && f.stream() == 1)
            .flat_map(|f| f.payload.clone())
            .collect();
        assert_pattern(&data, BODY, &format!("{kind:?}: /body"));
        data.len()
    };
    assert_eq!(body, BODY);
    let writes = writes.lock().unwrap().clone();
    head_and_data(&records, &writes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_response_head_is_a_record_of_its_own_in_the_write_of_its_data() {
    let (head, data, _) = first_response(Server::Stock).await;
    // The control: one record holds the head and the body's start.
    assert_eq!(head, data, "stock: the head's record");
    let (head, data, one_write) = first_response(Server::Ours).await;
    assert_eq!(data, head + 1, "ours: the head must end its record");
    assert!(
        one_write,
        "ours: the head's record must leave with the DATA's"
    );
}
