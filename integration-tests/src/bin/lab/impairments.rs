//! The tun link's impairment flags (`--loss`, `--loss-burst`, `--jitter-ms`,
//! `--rate-trace`): checking them, applying them to the link's configuration, and the
//! profile the JSON's `config.link.impairments` shows. Each run's link seed is
//! [`crate::args::LabConfig::tun_for_repeat`]'s, and so is its start in a rate trace
//! ([`trace_start`]).

use std::time::Duration;

use integration_tests::tun::{Direction, RateTrace, RateTraces, TunConfig, MAX_JITTER};
use integration_tests::BoxError;

use crate::args::LabArgs;

/// The first of the tun link's impairment flags given, if any.
/// Where in `trace` the runs of `repeat` start: repeat 0 at its beginning, then spread
/// over the whole recording by the golden ratio's fractional part (each new start falls
/// in the largest gap left), whole milliseconds.
pub fn trace_start(trace: &RateTrace, repeat: usize) -> Duration {
    const GOLDEN_FRACTION: f64 = 0.618_033_988_749_895;
    let fraction = (repeat as f64 * GOLDEN_FRACTION).fract();
    Duration::from_millis((fraction * trace.period().as_millis() as f64) as u64)
}

pub fn first_flag(args: &LabArgs) -> Option<&'static str> {
    [
        (args.loss.is_some(), "--loss"),
        (args.loss_burst.is_some(), "--loss-burst"),
        (args.jitter_ms.is_some(), "--jitter-ms"),
        (args.rate_trace.is_some(), "--rate-trace"),
    ]
    .into_iter()
    .find_map(|(given, flag)| given.then_some(flag))
}

/// Applies `--loss`, `--loss-burst`, `--jitter-ms` and `--rate-trace` to the tun link
/// (checking them; loading the traces).
pub fn apply(args: &LabArgs, tun: &mut TunConfig) -> Result<(), BoxError> {
    if let Some(loss) = args.loss {
        if !(loss.is_finite() && (0.0..=100.0).contains(&loss)) {
            return Err(format!("--loss must be a percentage, 0 to 100, not {loss}").into());
        }
        tun.loss_percent = loss;
    }
    if let Some(burst) = args.loss_burst {
        if !(burst.is_finite() && burst >= 1.0) {
            return Err(format!("--loss-burst must be at least 1 (packets), not {burst}").into());
        }
        tun.loss_burst = Some(burst);
    }
    if let Some(ms) = args.jitter_ms {
        let jitter = Duration::try_from_secs_f64(ms / 1e3)
            .ok()
            .filter(|j| *j <= MAX_JITTER)
            .ok_or_else(|| {
                format!(
                    "--jitter-ms must be 0 to {} ms, not {ms}",
                    MAX_JITTER.as_millis()
                )
            })?;
        tun.jitter = jitter;
    }
    if let Some(specs) = &args.rate_trace {
        let (down, up) = match specs.as_slice() {
            [down] => (down, None),
            [down, up] => (down, Some(up)),
            _ => {
                return Err(format!(
                    "--rate-trace takes DOWN or DOWN,UP (one or two traces), not {} values",
                    specs.len()
                )
                .into())
            }
        };
        tun.rate_trace = Some(RateTraces {
            downstream: RateTrace::resolve(down.trim(), Direction::Downstream)
                .map_err(|e| format!("--rate-trace: {e}"))?,
            upstream: up
                .map(|up| RateTrace::resolve(up.trim(), Direction::Upstream))
                .transpose()
                .map_err(|e| format!("--rate-trace: {e}"))?,
            start: Duration::ZERO,
        });
    }
    // What one flag cannot check alone: a loss rate too high for its bursts.
    tun.validate()
        .map_err(|e| format!("--loss and --loss-burst: {e}").into())
}

/// The tun link's impairment profile (each direction alike, except the rate traces): loss,
/// burst, jitter, the rate trace of each direction (`null`: the fixed rate), and how each
/// run's seed is made.
pub fn to_json(tun: &TunConfig) -> serde_json::Value {
    let trace = |t: &RateTrace| {
        serde_json::json!({
            "name": t.name(),
            "mean_rate_mbit": t.mean_rate_mbit(),
            "period_s": t.period().as_secs_f64(),
            "opportunities": t.opportunities(),
        })
    };
    let traces = tun.rate_trace.as_ref();
    serde_json::json!({
        "loss_percent": tun.loss_percent,
        "loss_model": match (tun.loss_percent > 0.0, tun.loss_burst) {
            (false, _) => "none",
            (true, None) => "bernoulli",
            (true, Some(_)) => "gilbert-elliott",
        },
        "loss_burst": tun.loss_burst,
        "jitter_ms": tun.jitter.as_secs_f64() * 1e3,
        "jitter_distribution": "uniform [0, 2 x jitter_ms], no reordering",
        "rate_trace": {
            "down": traces.map(|t| trace(&t.downstream)),
            "up": traces.and_then(|t| t.upstream.as_ref()).map(trace),
        },
        "seed": "per repeat (every case of a repeat alike): derive_seed(seed, repeat); each direction and impairment its own stream",
        "rate_trace_start": "per repeat: the trace's period x fract(repeat x 0.618...), whole ms",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::tests::{args, report_first_line};
    use crate::args::LabConfig;
    use crate::report::config_json;
    use clap::Parser as _;

    #[test]
    fn impairment_flags() {
        let config = LabConfig::from_args(&args(&[
            "--link",
            "tun",
            "--loss",
            "1",
            "--loss-burst",
            "3",
            "--jitter-ms",
            "5",
            "--rate-trace",
            "Verizon-LTE-short",
            "--seed",
            "11",
        ]))
        .unwrap();
        assert_eq!(config.tun.loss_percent, 1.0);
        assert_eq!(config.tun.loss_burst, Some(3.0));
        assert_eq!(config.tun.jitter, Duration::from_millis(5));
        let traces = config.tun.rate_trace.clone().unwrap();
        assert_eq!(traces.downstream.name(), "Verizon-LTE-short.down");
        assert_eq!(traces.upstream, None);
        let line = report_first_line(&config);
        assert!(
            line.starts_with(
                "tun link: 20 ms RTT, down rate trace Verizon-LTE-short.down (mean 5.03 \
                 Mbit/s, looping every 140 s), up 20 Mbit/s, queue 1000 packets"
            ),
            "{line}"
        );
        assert!(line.contains("loss 1% each way (Gilbert-Elliott, bursts of 3 packets"));
        assert!(line.contains("jitter 5 ms each way (uniform 0 to 10 ms, no reordering)"));
        let json = config_json(&config);
        let profile = &json["link"]["impairments"];
        assert_eq!(profile["loss_percent"], 1.0);
        assert_eq!(profile["loss_model"], "gilbert-elliott");
        assert_eq!(profile["loss_burst"], 3.0);
        assert_eq!(profile["jitter_ms"], 5.0);
        assert_eq!(
            profile["rate_trace"]["down"]["name"],
            "Verizon-LTE-short.down"
        );
        assert_eq!(profile["rate_trace"]["up"], serde_json::Value::Null);
        // Each repeat its own seed and stretch of the trace: reproducible, different from
        // repeat to repeat, within the trace.
        assert_eq!(config.tun_for_repeat(3), config.tun_for_repeat(3));
        assert_ne!(config.tun_for_repeat(3).seed, config.tun_for_repeat(4).seed);
        let starts: Vec<Duration> = (0..20)
            .map(|r| config.tun_for_repeat(r).rate_trace.unwrap().start)
            .collect();
        let period = config.tun.rate_trace.as_ref().unwrap().downstream.period();
        assert_eq!(starts[0], Duration::ZERO);
        assert!(starts.iter().all(|s| *s < period));
        let mut distinct = starts.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), starts.len(), "{starts:?}");
        let both = LabConfig::from_args(&args(&[
            "--link",
            "tun",
            "--rate-trace",
            "TMobile-LTE-short,TMobile-LTE-short",
        ]))
        .unwrap();
        let traces = both.tun.rate_trace.unwrap();
        assert_eq!(traces.upstream.unwrap().name(), "TMobile-LTE-short.up");
        for (bad, says) in [
            (&["--loss", "1"][..], "--loss applies to --link tun only"),
            (
                &["--jitter-ms", "5"],
                "--jitter-ms applies to --link tun only",
            ),
            (
                &["--rate-trace", "Verizon-LTE-short"],
                "--rate-trace applies",
            ),
            (
                &["--link", "tun", "--loss", "101"],
                "--loss must be a percentage",
            ),
            (
                &["--link", "tun", "--loss", "1", "--loss-burst", "0.5"],
                "at least 1",
            ),
            (
                &["--link", "tun", "--loss", "60", "--loss-burst", "1"],
                "at most 50.0%",
            ),
            (&["--link", "tun", "--jitter-ms=-1"], "--jitter-ms must be"),
            (
                &["--link", "tun", "--jitter-ms", "inf"],
                "--jitter-ms must be",
            ),
            (&["--link", "tun", "--rate-trace", "Nowhere"], "known names"),
            (
                &["--link", "tun", "--rate-trace", "a,b,c"],
                "DOWN or DOWN,UP",
            ),
        ] {
            let err = LabConfig::from_args(&args(bad)).unwrap_err().to_string();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
        assert!(LabArgs::try_parse_from(["lab", "--link", "tun", "--loss-burst", "3"]).is_err());
    }
}
