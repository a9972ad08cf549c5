//! The link's two network namespaces: creating them (`ip netns add`), entering one from a
//! thread (`setns(2)`), configuring one (sysctls, the TUN device), and deleting them, also
//! those a crashed process left behind.

use std::collections::BTreeSet;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use super::{sys, CongestionControl, CLIENT_PREFIX, DEVICE, SERVER_PREFIX};

/// Where `ip netns` keeps named namespaces.
const NETNS_DIR: &str = "/run/netns";

/// Runs `f` on a scoped thread that entered the namespace `name`.
pub(super) fn in_namespace<T, F>(name: &str, f: F) -> io::Result<T>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name(format!("netns-{name}"))
            .spawn_scoped(scope, || {
                enter_namespace(name)?;
                Ok(f())
            })?;
        thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Moves the **calling thread** into the network namespace `name` (`/run/netns/NAME`, as
/// made by `ip netns add`), for good: call it only on a thread of your own that is meant to
/// live in that namespace. Sockets the thread creates from then on, and threads it starts,
/// belong to the namespace.
pub fn enter_namespace(name: &str) -> io::Result<()> {
    let path = Path::new(NETNS_DIR).join(name);
    let file = File::open(&path).map_err(|e| context(e, path.display()))?;
    sys::setns_net(&file).map_err(|e| context(e, format!("entering network namespace {name}")))
}

/// In the namespace the calling thread entered: IPv6 off, the congestion control, no TCP
/// metrics cache; then the TUN device.
pub(super) fn setup_namespace(cc: CongestionControl) -> io::Result<File> {
    let ipv6 = Path::new("/proc/sys/net/ipv6/conf");
    if ipv6.exists() {
        // `default` first, so that the TUN device is created without IPv6; `all` for lo.
        for conf in ["default", "all"] {
            write_sysctl(&ipv6.join(conf).join("disable_ipv6"), "1")?;
        }
    }
    let cc_path = Path::new("/proc/sys/net/ipv4/tcp_congestion_control");
    write_sysctl(cc_path, cc.name())?;
    let set = fs::read_to_string(cc_path)?;
    if set.trim() != cc.name() {
        return Err(io::Error::other(format!(
            "tcp_congestion_control is `{}` after setting `{cc}`",
            set.trim()
        )));
    }
    write_sysctl(Path::new("/proc/sys/net/ipv4/tcp_no_metrics_save"), "1")?;
    let device = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .map_err(|e| context(e, "/dev/net/tun"))?;
    sys::tun_set_iff(&device, DEVICE).map_err(|e| context(e, format!("TUNSETIFF {DEVICE}")))?;
    Ok(device)
}

/// The host's list of congestion controls a namespace other than the initial one may make
/// its default.
const ALLOWED_CC: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

/// Adds `cc` to the host's `net.ipv4.tcp_allowed_congestion_control` when it is not there:
/// Linux lets a network namespace other than the initial one choose only an allowed
/// congestion control as its default (`EPERM` otherwise), and allows only the host's own
/// default and reno out of the box. The list is global (it also says which congestion
/// controls unprivileged sockets may pick with `TCP_CONGESTION`); this only ever adds to it.
pub(super) fn allow_congestion_control(cc: CongestionControl) -> io::Result<()> {
    let allowed = fs::read_to_string(ALLOWED_CC).map_err(|e| context(e, ALLOWED_CC))?;
    if allowed.split_whitespace().any(|name| name == cc.name()) {
        return Ok(());
    }
    let wanted = format!("{} {cc}", allowed.trim());
    write_sysctl(Path::new(ALLOWED_CC), &wanted).map_err(|e| {
        context(
            e,
            format!("allowing {cc} in network namespaces (is the tcp_{cc} module available?)"),
        )
    })?;
    tracing::info!(%cc, allowed = %wanted, "added to net.ipv4.tcp_allowed_congestion_control");
    Ok(())
}

/// Writes a sysctl through `/proc/sys`, which shows the calling thread's network namespace.
fn write_sysctl(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(|e| context(e, format!("{} = {value}", path.display())))
}

pub(super) fn context(error: io::Error, what: impl fmt::Display) -> io::Error {
    io::Error::new(error.kind(), format!("{what}: {error}"))
}

/// Runs `ip ARGS` (with `stdin` as its input), failing with its stderr.
pub(super) fn ip(args: &[&str], stdin: Option<&str>) -> io::Result<()> {
    let shown = format!("ip {}", args.join(" "));
    let mut child = Command::new("ip")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| context(e, format!("{shown} (is iproute2 installed?)")))?;
    if let (Some(text), Some(mut input)) = (stdin, child.stdin.take()) {
        input.write_all(text.as_bytes())?;
    }
    let output = child.wait_with_output()?;
    if output.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{shown}: {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// Whether this process runs as root (effective user id 0).
pub fn is_root() -> bool {
    // The second field of `Uid:` is the effective user id.
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// The names of the network namespaces `ip netns list` shows.
pub fn list_namespaces() -> io::Result<Vec<String>> {
    let output = Command::new("ip")
        .args(["netns", "list"])
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| context(e, "ip netns list (is iproute2 installed?)"))?;
    if !output.status.success() {
        return Err(io::Error::other(format!(
            "ip netns list: {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    // Lines are `NAME` or `NAME (id: N)`.
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .collect())
}

/// Names of the namespaces this process's live links own (registered before `ip netns add`,
/// so that a concurrent [`remove_stale`] never takes one being created).
fn live() -> MutexGuard<'static, BTreeSet<String>> {
    static LIVE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Deletes the link namespaces (`tfc-<pid>-<n>`, `tfs-<pid>-<n>`) left by processes that
/// no longer exist, and this process's that no live link owns; returns their names.
pub fn remove_stale() -> io::Result<Vec<String>> {
    let me = std::process::id();
    let mut removed = Vec::new();
    for name in list_namespaces()? {
        let Some(pid) = [CLIENT_PREFIX, SERVER_PREFIX]
            .iter()
            .find_map(|prefix| name.strip_prefix(prefix))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, n)| n.parse::<u64>().ok().and(pid.parse::<u32>().ok()))
        else {
            continue;
        };
        let stale = if pid == me {
            !live().contains(&name)
        } else {
            !Path::new("/proc").join(pid.to_string()).exists()
        };
        if stale {
            ip(&["netns", "delete", &name], None)?;
            removed.push(name);
        }
    }
    if !removed.is_empty() {
        tracing::info!(?removed, "removed stale tun link namespaces");
    }
    Ok(removed)
}

/// The namespaces a link created; deleted on drop.
#[derive(Default)]
pub(super) struct Namespaces {
    pub(super) names: Vec<String>,
}

impl Namespaces {
    pub(super) fn add(&mut self, name: &str) -> io::Result<()> {
        live().insert(name.to_string());
        if let Err(error) = ip(&["netns", "add", name], None) {
            live().remove(name);
            return Err(error);
        }
        self.names.push(name.to_string());
        Ok(())
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in self.names.drain(..).rev() {
            if let Err(error) = ip(&["netns", "delete", &name], None) {
                tracing::warn!(%error, "deleting a tun link namespace");
            }
            live().remove(&name);
        }
    }
}
