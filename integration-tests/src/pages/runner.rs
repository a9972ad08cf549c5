//! Page loads through an emulated link, as the lab runs them: a fresh server and a fresh
//! link for every load, and Chromium as the client ([`run_page_relay`] behind the loopback
//! relay, [`run_page_tun`] through the kernel-faithful tun link).
//!
//! The server of a [`Case`]: ours ([`Case::setup`]) is the site behind the case's setup
//! ([`start_site_server`]: `ServeDir` under the wrapper); a peer ([`Case::Peer`]) serves a
//! copy of the site beside its fixture ([`PeerOptions::site`]). The browser reaches it at
//! `https://{addr}`, where `addr` is the server as the client sees it (the relay's address,
//! or the server's in the tun link's server namespace), and trusts its certificate.
//!
//! Invariants:
//! - nothing carries over from one load to the next: a new server, link and browser (with
//!   an empty profile) every time, all stopped and removed before the function returns,
//!   also when the load failed;
//! - a load that is not complete and byte-exact ([`PageLoad::check`]) is an error naming
//!   what was missing, never a result;
//! - an external server ([`Case::External`]) is refused: it serves the priority fixture,
//!   not the site.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use super::load::{load_page, LoadOptions};
use super::report::PageLoad;
use super::site::{Page, Site};
use crate::link::{LinkConfig, RelayLink};
use crate::peers::PeerOptions;
use crate::server::LoopbackServer;
use crate::site_server::start_site_server;
use crate::tun::{self, CrossTraffic, Side, TunConfig, TunLink};
use crate::workload::{link_drops, start_cross, Case, TunServer};
use crate::BoxError;

/// The part of a page load's time limit that does not depend on the link: the browser's
/// start and shutdown and the page's own work (a whole load takes 1 to 3 s on loopback,
/// `tests/pages.rs`), with ample room for a loaded machine.
const LOAD_BASE_TIMEOUT: Duration = Duration::from_secs(30);

/// How many times the page's transfer time at the link's rate a load may take on top of
/// [`LOAD_BASE_TIMEOUT`]: the same margin as the priority workloads' run limit.
const TRANSFER_MARGIN: u32 = 4;

/// Round trips allowed on top of the transfer time (handshakes, the page's request waves,
/// slow start).
const TIMEOUT_RTTS: u32 = 50;

/// One page load through the tun link, with what the link saw.
#[derive(Debug, Clone)]
pub struct PageRun {
    /// The load (complete and byte-exact: [`PageLoad::check`] passed).
    pub load: PageLoad,
    /// Packets the link's server-to-client direction dropped (tail drops and random
    /// losses) while the page loaded, every flow counted.
    pub link_drops: u64,
    /// With cross traffic ([`TunConfig::cross_flows`]): the bytes its sink received while
    /// the page loaded.
    pub cross_bytes: Option<u64>,
}

/// A time limit for one load of `page` from `site` over a link of `rate_mbit` and `rtt`
/// shared with `cross_flows` bulk flows: 30 s (the browser and the page's own work), plus
/// four times the page's bytes at its share of the rate, plus 50 round trips.
pub fn page_timeout(
    site: &Site,
    page: Page,
    rate_mbit: f64,
    rtt: Duration,
    cross_flows: usize,
) -> Duration {
    let bits = site.files_of(page).map(|f| f.len).sum::<u64>() as f64 * 8.0;
    let share_bits_per_s = rate_mbit * 1e6 / (1 + cross_flows) as f64;
    let transfer = Duration::try_from_secs_f64(bits / share_bits_per_s).unwrap_or(Duration::MAX);
    LOAD_BASE_TIMEOUT
        .saturating_add(transfer.saturating_mul(TRANSFER_MARGIN))
        .saturating_add(rtt.saturating_mul(TIMEOUT_RTTS))
}

/// Loads `page` once in a fresh Chromium from a fresh server for `case` serving `site`,
/// behind a fresh loopback relay link with `link`; the load may take `timeout`. The server
/// and the relay listen on 127.0.0.1 and the browser runs in the caller's network
/// namespace. Fails when anything fails to start, the load cannot be measured, or the load
/// is not complete and byte-exact ([`PageLoad::check`]), with an error saying what was
/// missing.
pub async fn run_page_relay(
    case: &Case,
    page: Page,
    site: &Site,
    link: &LinkConfig,
    timeout: Duration,
) -> Result<PageLoad, BoxError> {
    let label = format!("{case}/{page}");
    refuse_external(case, &label)?;
    let server = start_loopback_server(case, site)
        .await
        .map_err(|e| format!("{label}: starting the server: {e}"))?;
    let (upstream, certificate) = server.endpoint();
    let loaded = match RelayLink::start(upstream, *link).await {
        Ok(relay) => {
            let options = LoadOptions {
                namespace: None,
                timeout,
                trusted_certificates: vec![certificate],
            };
            let loaded = load_blocking(page, relay.addr(), options).await;
            drop(relay);
            loaded
        }
        Err(e) => Err(format!("starting the link: {e}").into()),
    };
    let stopped = server.stop().await;
    // Let the connection's close travel before the next run starts (as the priority
    // workloads do).
    tokio::time::sleep(link.rtt).await;
    let load = loaded.map_err(|e| format!("{label}: {e}"))?;
    stopped.map_err(|e| format!("{label}: stopping the server: {e}"))?;
    checked(load, site).map_err(|e| format!("{label}: {e}").into())
}

/// Loads `page` once like [`run_page_relay`], through a fresh tun link with `config`
/// instead (root only): the server in the link's server namespace (ours on a thread there,
/// a peer under `ip netns exec`), Chromium in the client namespace. With
/// [`TunConfig::cross_flows`], the cross traffic runs through the same bottleneck from its
/// head start before the browser starts until the load is done, as in
/// [`run_tun_traced`](crate::workload::run_tun_traced). The link's namespaces are removed
/// before this returns.
pub async fn run_page_tun(
    case: &Case,
    page: Page,
    site: &Site,
    config: &TunConfig,
    timeout: Duration,
) -> Result<PageRun, BoxError> {
    let label = format!("{case}/{page}");
    refuse_external(case, &label)?;
    let start_config = config.clone();
    let link = tun::blocking(move || TunLink::start(start_config))
        .await?
        .map_err(|e| format!("{label}: starting the tun link: {e}"))?;
    let started = TunSetup::start(link, case, site).await;
    let setup = started.map_err(|e| format!("{label}: {e}"))?;
    let measured = setup.load(page, timeout).await;
    let stopped = setup.stop().await;
    let (load, link_drops, cross_bytes) = measured.map_err(|e| format!("{label}: {e}"))?;
    stopped.map_err(|e| format!("{label}: {e}"))?;
    let load = checked(load, site).map_err(|e| format!("{label}: {e}"))?;
    Ok(PageRun {
        load,
        link_drops,
        cross_bytes,
    })
}

/// An error for an external server, which serves no site.
fn refuse_external(case: &Case, label: &str) -> Result<(), BoxError> {
    match case {
        Case::External { addr, .. } => Err(format!(
            "{label}: an external server ({addr}) cannot serve the pages: the page workloads \
             need a server started with the lab's generated site (ours or a peer)"
        )
        .into()),
        _ => Ok(()),
    }
}

/// `load` when it is complete and byte-exact; otherwise an error listing what was wrong.
fn checked(load: PageLoad, site: &Site) -> Result<PageLoad, String> {
    match load.check(site) {
        Ok(()) => Ok(load),
        Err(problems) => Err(format!("incomplete load: {problems}")),
    }
}

/// Loads `page` from `https://{addr}` with `options` on a blocking thread ([`load_page`]
/// blocks on a thread and runtime of its own).
async fn load_blocking(
    page: Page,
    addr: SocketAddr,
    options: LoadOptions,
) -> Result<PageLoad, BoxError> {
    let origin = format!("https://{addr}");
    tokio::task::spawn_blocking(move || load_page(&options, page, &origin))
        .await
        .map_err(|e| format!("the page load's task: {e}"))?
}

/// Starts the server of `case` serving `site` on 127.0.0.1 and a free port.
async fn start_loopback_server(case: &Case, site: &Site) -> Result<LoopbackServer, BoxError> {
    let any_port = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    match (case.setup(), case.peer()) {
        (Some(setup), _) => Ok(LoopbackServer::InProcess(
            start_site_server(setup, &site.dir, any_port).await?,
        )),
        (None, Some(kind)) => {
            let options = PeerOptions {
                site: Some(site.dir.clone()),
                ..PeerOptions::default()
            };
            LoopbackServer::start_peer(kind, options).await
        }
        (None, None) => Err(format!("`{case}` starts no server").into()),
    }
}

/// A tun link with the server of a run in its server namespace, and the cross traffic.
struct TunSetup {
    link: TunLink,
    server: TunServer,
    cross: Option<CrossTraffic>,
}

/// What a load through the tun link measured: the load, the link's drops meanwhile, and
/// the cross traffic's bytes meanwhile.
type TunMeasured = (PageLoad, u64, Option<u64>);

impl TunSetup {
    /// Starts the server of `case` serving `site` in `link`'s server namespace, then the
    /// link's cross traffic; on failure stops what started and removes the link.
    async fn start(link: TunLink, case: &Case, site: &Site) -> Result<TunSetup, BoxError> {
        let server = match start_tun_server(&link, case, site).await {
            Ok(server) => server,
            Err(e) => {
                tun::blocking(move || drop(link)).await?;
                return Err(format!("starting the server: {e}").into());
            }
        };
        let flows = link.config().cross_flows;
        match start_cross(&link, flows).await {
            Ok(cross) => Ok(TunSetup {
                link,
                server,
                cross,
            }),
            Err(e) => {
                let setup = TunSetup {
                    link,
                    server,
                    cross: None,
                };
                // The cross traffic's error is the one to report.
                let _ = setup.stop().await;
                Err(format!("cross traffic: {e}").into())
            }
        }
    }

    /// Loads `page` in Chromium in the client namespace, trusting the server's certificate.
    async fn load(&self, page: Page, timeout: Duration) -> Result<TunMeasured, BoxError> {
        let (addr, certificate) = self.server.endpoint();
        let options = LoadOptions {
            namespace: Some(self.link.namespace(Side::Client).to_owned()),
            timeout,
            trusted_certificates: vec![certificate],
        };
        let drops_before = link_drops(&self.link);
        let started = Instant::now();
        let load = load_blocking(page, addr, options).await?;
        let ended = Instant::now();
        let drops = link_drops(&self.link) - drops_before;
        let cross_bytes = self
            .cross
            .as_ref()
            .map(|cross| cross.received_between(started, ended));
        Ok((load, drops, cross_bytes))
    }

    /// Stops the cross traffic and the server, then removes the link (all blocking: off
    /// the runtime's threads); the first error, if any, once everything is gone.
    async fn stop(self) -> Result<(), BoxError> {
        let TunSetup {
            link,
            server,
            cross,
        } = self;
        let cross_stopped = match cross {
            Some(cross) => tun::blocking(move || cross.stop().map(drop))
                .await?
                .map_err(|e| format!("cross traffic: {e}")),
            None => Ok(()),
        };
        let server_stopped = tun::blocking(move || server.stop())
            .await?
            .map_err(|e| format!("stopping the server: {e}"));
        tun::blocking(move || drop(link)).await?;
        cross_stopped?;
        server_stopped?;
        Ok(())
    }
}

/// Starts the server of `case` serving `site` in `link`'s server namespace.
async fn start_tun_server(link: &TunLink, case: &Case, site: &Site) -> Result<TunServer, BoxError> {
    let dir = site.dir.clone();
    match (case.setup(), case.peer()) {
        (Some(setup), _) => {
            TunServer::start_with(link, move |addr| async move {
                start_site_server(setup, &dir, addr).await
            })
            .await
        }
        (None, Some(kind)) => TunServer::start_peer(link, kind, Some(dir)).await,
        (None, None) => Err(format!("`{case}` starts no server").into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pages::SiteFile;

    fn site_of(len: u64) -> Site {
        Site {
            dir: std::path::PathBuf::from("/nonexistent"),
            files: vec![SiteFile {
                path: "/app/index.html".into(),
                len,
                sha256: String::new(),
            }],
        }
    }

    #[test]
    fn timeout_grows_with_the_page_and_the_cross_traffic() {
        let rtt = Duration::from_millis(20);
        // 2.5 MB at 20 Mbit/s: 1 s of transfer, four times, plus 50 RTTs.
        let site = site_of(2_500_000);
        let alone = page_timeout(&site, Page::App, 20.0, rtt, 0);
        assert_eq!(alone, Duration::from_secs(35));
        let shared = page_timeout(&site, Page::App, 20.0, rtt, 1);
        assert_eq!(shared, Duration::from_secs(39));
        // The article has no file in this site: the base and the RTTs only.
        let empty = page_timeout(&site, Page::Article, 20.0, rtt, 0);
        assert_eq!(empty, Duration::from_secs(31));
    }

    #[tokio::test]
    async fn external_servers_are_refused() {
        let case = Case::External {
            name: "mine".into(),
            addr: "127.0.0.1:9".parse().unwrap(),
        };
        let site = site_of(1);
        let err = run_page_relay(
            &case,
            Page::App,
            &site,
            &LinkConfig::default(),
            LOAD_BASE_TIMEOUT,
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("cannot serve the pages"), "{err}");
        let err = run_page_tun(
            &case,
            Page::App,
            &site,
            &TunConfig::default(),
            LOAD_BASE_TIMEOUT,
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("cannot serve the pages"), "{err}");
    }
}
