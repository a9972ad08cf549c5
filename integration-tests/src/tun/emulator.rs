//! The packet emulator between the two TUN devices: per direction, a reader thread that
//! decides whether each packet the sender's kernel hands to its device is lost
//! ([`super::impair`]), queues it (tail drop when the queue is full) and computes when it
//! leaves the wire (fixed rate or rate trace, [`super::rate_trace`]) and when it is due at
//! the receiver (one-way delay plus jitter), and a delivery thread that writes it to the
//! receiver's device then (see the [module documentation](super)).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::impair::{stream_rng, Fate, Jitter, Loss, LossModel, Stream};
use super::rate_trace::{Bottleneck, TraceSchedule};
use super::trace::{Direction, PacketEvent, PayloadArrival, QueueGauge, Recorder, TcpFields};
use super::{sys, TunConfig, MAX_PACKET};

/// Counters of one direction of the emulator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectionStats {
    /// Packets delivered to the receiver's TUN device.
    pub delivered: u64,
    /// IP bytes delivered.
    pub delivered_bytes: u64,
    /// Packets dropped because the queue was full (tail drop).
    pub dropped: u64,
    /// Packets lost by the random loss model ([`TunConfig::loss_percent`]), before the
    /// queue: not counted in `dropped`.
    pub lost: u64,
    /// Largest queue occupancy seen, in packets (the arriving one included).
    pub max_queue: u64,
    /// Sum of how late deliveries were after their due time, in microseconds.
    pub late_us_total: u64,
    /// Latest delivery after its due time, in microseconds.
    pub late_us_max: u64,
    /// Packets the receiver's TUN device refused (written while it was going down).
    pub write_errors: u64,
}

impl DirectionStats {
    /// Mean lateness of a delivery, in microseconds.
    pub fn late_us_mean(&self) -> f64 {
        if self.delivered == 0 {
            0.0
        } else {
            self.late_us_total as f64 / self.delivered as f64
        }
    }
}

/// Counters of both directions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TunStats {
    /// Client to server.
    pub upstream: DirectionStats,
    /// Server to client.
    pub downstream: DirectionStats,
}

#[derive(Default)]
struct Counters {
    delivered: AtomicU64,
    delivered_bytes: AtomicU64,
    dropped: AtomicU64,
    lost: AtomicU64,
    max_queue: AtomicU64,
    late_us_total: AtomicU64,
    late_us_max: AtomicU64,
    write_errors: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> DirectionStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DirectionStats {
            delivered: get(&self.delivered),
            delivered_bytes: get(&self.delivered_bytes),
            dropped: get(&self.dropped),
            lost: get(&self.lost),
            max_queue: get(&self.max_queue),
            late_us_total: get(&self.late_us_total),
            late_us_max: get(&self.late_us_max),
            write_errors: get(&self.write_errors),
        }
    }
}

/// The four threads moving packets between the two TUN devices.
pub(super) struct Emulator {
    /// Dropping it (EOF on the pipe) stops the reader threads.
    stop: Option<io::PipeWriter>,
    deliveries: [Arc<Delivery>; 2],
    threads: Vec<JoinHandle<()>>,
    /// [upstream, downstream].
    counters: [Arc<Counters>; 2],
    recorder: Arc<Recorder>,
}

/// Per-direction parameters.
#[derive(Clone, Copy)]
struct Params {
    one_way: Duration,
    queue_packets: usize,
}

impl Emulator {
    /// Starts the four threads; `origin` is trace time 0 of a rate trace.
    pub(super) fn start(
        config: &TunConfig,
        origin: Instant,
        client: Arc<File>,
        server: Arc<File>,
    ) -> io::Result<Emulator> {
        let params = Params {
            one_way: config.one_way_delay(),
            queue_packets: config.queue_packets,
        };
        let loss = LossModel::new(config.loss_percent, config.loss_burst)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let (stop_reader, stop) = io::pipe()?;
        let mut emulator = Emulator {
            stop: Some(stop),
            deliveries: [Arc::default(), Arc::default()],
            threads: Vec::new(),
            counters: [Arc::default(), Arc::default()],
            recorder: Arc::new(Recorder::new(config.trace_packets)),
        };
        // [upstream, downstream].
        let gauges: [Arc<QueueGauge>; 2] = [Arc::default(), Arc::default()];
        // From here on, dropping `emulator` stops whatever was started.
        for (i, (direction, from, to)) in [
            (Direction::Upstream, client.clone(), server.clone()),
            (Direction::Downstream, server, client),
        ]
        .into_iter()
        .enumerate()
        {
            let name = match direction {
                Direction::Upstream => "upstream",
                Direction::Downstream => "downstream",
            };
            let delivery = emulator.deliveries[i].clone();
            let counters = emulator.counters[i].clone();
            let recorder = emulator.recorder.clone();
            let downstream = gauges[1].clone();
            emulator.threads.push(
                std::thread::Builder::new()
                    .name(format!("tun-{name}-deliver"))
                    .spawn(move || {
                        delivery.run(&to, &counters, |sent, packet| {
                            if direction == Direction::Upstream {
                                recorder.delivered_upstream(sent, packet, &downstream);
                            }
                        })
                    })?,
            );
            let bottleneck = match config.rate_trace.as_ref().and_then(|t| t.get(direction)) {
                Some(trace) => Bottleneck::Trace(TraceSchedule::new(
                    trace.clone(),
                    origin,
                    config
                        .rate_trace
                        .as_ref()
                        .map_or(Duration::ZERO, |t| t.start),
                )),
                None => Bottleneck::Fixed {
                    bits_per_sec: config.rate_mbit * 1e6,
                    free_at: origin,
                },
            };
            let reader = Reader {
                direction,
                params,
                bottleneck,
                loss: Loss::new(loss, stream_rng(config.seed, direction, Stream::Loss)),
                jitter: Jitter::new(
                    config.jitter,
                    stream_rng(config.seed, direction, Stream::Jitter),
                ),
                delivery: emulator.deliveries[i].clone(),
                counters: emulator.counters[i].clone(),
                gauge: gauges[i].clone(),
                recorder: emulator.recorder.clone(),
            };
            let stop = stop_reader.try_clone()?;
            emulator.threads.push(
                std::thread::Builder::new()
                    .name(format!("tun-{name}-read"))
                    .spawn(move || reader.run(&from, &stop))?,
            );
        }
        Ok(emulator)
    }
}

impl Emulator {
    /// The counters so far.
    pub(super) fn stats(&self) -> TunStats {
        TunStats {
            upstream: self.counters[0].snapshot(),
            downstream: self.counters[1].snapshot(),
        }
    }

    /// The client-to-server packets with TCP payload so far (the first ones), in order.
    pub(super) fn payload_arrivals(&self) -> Vec<PayloadArrival> {
        self.recorder.arrivals()
    }

    /// Every packet so far, up to [`TunConfig::trace_packets`].
    pub(super) fn trace(&self) -> Vec<PacketEvent> {
        self.recorder.trace()
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        drop(self.stop.take());
        for delivery in &self.deliveries {
            delivery.stop();
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        // The devices' last references were the threads': the TUN devices are gone now.
    }
}

/// One direction's reader: the packets the sender's kernel hands to its TUN device.
struct Reader {
    direction: Direction,
    params: Params,
    bottleneck: Bottleneck,
    loss: Loss,
    jitter: Jitter,
    delivery: Arc<Delivery>,
    counters: Arc<Counters>,
    gauge: Arc<QueueGauge>,
    recorder: Arc<Recorder>,
}

impl Reader {
    /// Reads packets from `from`, applies loss and the queue and schedules their delivery,
    /// until `stop` reports end of file.
    fn run(mut self, from: &File, stop: &io::PipeReader) {
        let params = self.params;
        let mut buf = vec![0u8; MAX_PACKET];
        loop {
            match sys::wait_readable(from.as_fd(), stop.as_fd()) {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    tracing::warn!(%error, "tun link: waiting for a packet");
                    return;
                }
            }
            let len = match (&*from).read(&mut buf) {
                Ok(0) => continue,
                Ok(len) => len,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                    ) =>
                {
                    continue
                }
                Err(error) => {
                    tracing::warn!(%error, "tun link: reading a packet");
                    return;
                }
            };
            let now = Instant::now();
            // Lost on the way in: it never occupies the queue (in a trace, `dropped`).
            let fate = self.loss.next();
            if fate == Fate::Lost {
                self.counters.lost.fetch_add(1, Ordering::Relaxed);
            }
            let bottleneck = &mut self.bottleneck;
            let mut departure = None;
            let admitted = match fate {
                Fate::Lost => None,
                Fate::Kept => self.gauge.admit(now, len, params.queue_packets, || {
                    *departure.insert(bottleneck.departure(now, len))
                }),
            };
            let due = match (admitted, departure) {
                (Some(_), Some(left)) => self.jitter.due(left + params.one_way),
                _ => now,
            };
            self.recorder.packet(|| PacketEvent {
                at: now,
                due,
                direction: self.direction,
                ip_len: len as u16,
                tcp: TcpFields::parse(&buf[..len]),
                dropped: admitted.is_none(),
                queue_bytes: admitted.map_or(0, |(_, bytes)| bytes as u32),
            });
            let Some((packets, _)) = admitted else {
                if fate == Fate::Kept {
                    self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            };
            self.counters
                .max_queue
                .fetch_max(packets as u64, Ordering::Relaxed);
            self.delivery.push(due, now, buf[..len].to_vec());
        }
    }
}

/// The packets of one direction on their way to the receiver, due in FIFO order (departures
/// never decrease, the delay is constant and jitter never reorders), and the thread that
/// writes them when due.
#[derive(Default)]
struct Delivery {
    state: Mutex<DeliveryState>,
    changed: Condvar,
}

#[derive(Default)]
struct DeliveryState {
    /// Due time, when the packet was read, the packet.
    queue: VecDeque<(Instant, Instant, Vec<u8>)>,
    stopping: bool,
}

impl Delivery {
    fn lock(&self) -> MutexGuard<'_, DeliveryState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, due: Instant, read_at: Instant, packet: Vec<u8>) {
        let mut state = self.lock();
        let was_empty = state.queue.is_empty();
        state.queue.push_back((due, read_at, packet));
        drop(state);
        // Only a new head changes the deadline the delivery thread waits for.
        if was_empty {
            self.changed.notify_one();
        }
    }

    fn stop(&self) {
        self.lock().stopping = true;
        self.changed.notify_one();
    }

    /// Writes every packet to `to` at or after its due time, until stopped; tells
    /// `delivered` each packet written and when it was read.
    fn run(&self, to: &File, counters: &Counters, delivered: impl Fn(Instant, &[u8])) {
        let mut due_now = Vec::new();
        let mut state = self.lock();
        loop {
            if state.stopping {
                return;
            }
            let now = Instant::now();
            while state.queue.front().is_some_and(|(due, _, _)| *due <= now) {
                due_now.extend(state.queue.pop_front());
            }
            if due_now.is_empty() {
                state = match state.queue.front() {
                    Some(&(due, _, _)) => {
                        self.changed
                            .wait_timeout(state, due - now)
                            .unwrap_or_else(|e| e.into_inner())
                            .0
                    }
                    None => self.changed.wait(state).unwrap_or_else(|e| e.into_inner()),
                };
                continue;
            }
            drop(state);
            for (due, read_at, packet) in due_now.drain(..) {
                // A TUN device takes a packet whole, or not at all.
                match (&*to).write(&packet) {
                    Ok(n) if n == packet.len() => {
                        let late = Instant::now().saturating_duration_since(due).as_micros() as u64;
                        counters.delivered.fetch_add(1, Ordering::Relaxed);
                        counters
                            .delivered_bytes
                            .fetch_add(packet.len() as u64, Ordering::Relaxed);
                        counters.late_us_total.fetch_add(late, Ordering::Relaxed);
                        counters.late_us_max.fetch_max(late, Ordering::Relaxed);
                        delivered(read_at, &packet);
                    }
                    Ok(_) | Err(_) => {
                        counters.write_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            state = self.lock();
        }
    }
}
