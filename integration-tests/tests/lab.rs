//! The lab's own loop, end to end: the `lab` binary on a tiny configuration (one repeat, the
//! `late` workload with explicit urgencies, `stock` and `scheduled`, a fast relay link),
//! whose JSON must parse and agree with the tables it printed: the same cells in the same
//! order, the same medians, minimums and maximums, the same paired differences. Then
//! `alone` and `--explain` on the same link, and `--trace` through the tun link (as root).

mod support;

use serde_json::Value;

/// `median [min, max]` of a spread in the JSON, as the table prints it.
fn spread(value: &Value, decimals: usize, signed: bool) -> String {
    let f = |key: &str| {
        let x = value[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} in {value}"));
        if signed {
            format!("{x:+.decimals$}")
        } else {
            format!("{x:.decimals$}")
        }
    };
    format!("{} [{}, {}]", f("median"), f("min"), f("max"))
}

/// [`spread`], or `-` for null (a figure the cell does not have).
fn known(value: &Value, decimals: usize) -> String {
    if value.is_null() {
        "-".to_string()
    } else {
        spread(value, decimals, false)
    }
}

fn text(value: &Value) -> String {
    value
        .as_str()
        .unwrap_or_else(|| panic!("a string: {value}"))
        .to_string()
}

#[test]
fn lab_json_agrees_with_its_tables() {
    let json_path = std::env::temp_dir().join(format!("lab-test-{}.json", std::process::id()));
    let (report, json) = support::run_lab(&tiny(&["--workloads", "late"]), &json_path);

    // The configuration asked for, and every run.
    let config = &json["config"];
    assert_eq!(config["repeats"], 1);
    assert_eq!(config["seed"], 7);
    assert_eq!(config["cases"], serde_json::json!(["stock", "scheduled"]));
    assert_eq!(config["link"]["mode"], "relay");
    assert_eq!(
        report.lines().next(),
        config["link"]["description"].as_str(),
        "the report starts with the link"
    );
    let results = json["results"].as_array().expect("results");
    assert_eq!(results.len(), 2);
    assert!(
        report.contains("\n2 runs in "),
        "the run count in:\n{report}"
    );
    for r in results {
        assert_eq!(
            (r["workload"].as_str(), r["urgencies"].as_str()),
            (Some("late"), Some("explicit"))
        );
        assert_eq!(r["repeat"], 0);
    }

    // The main table: one row per summary row, same cells.
    let (main_part, paired_part) = report
        .split_once("\nPaired differences against stock")
        .unwrap_or_else(|| panic!("no paired differences in:\n{report}"));
    let rows = support::markdown_table(main_part, "| workload ");
    let summary = json["summary"].as_array().expect("summary");
    assert_eq!(rows.len(), summary.len(), "{report}");
    assert_eq!(summary.len(), 2);
    for (row, s) in rows.iter().zip(summary) {
        let expected = vec![
            text(&s["workload"]),
            text(&s["urgencies"]),
            text(&s["case"]),
            spread(&s["critical_first_byte_ms"], 1, false),
            spread(&s["critical_complete_ms"], 1, false),
            "-".to_string(),
            spread(&s["background_kib_before_critical"], 0, false),
            spread(&s["fixture_complete_ms"], 1, false),
            spread(&s["tls_records"], 0, false),
            spread(&s["fixture_goodput_mbit"], 1, false),
            known(&s["bottleneck_share"], 2),
            known(&s["link_drops"], 0),
            known(&s["server_retransmits"], 0),
        ];
        assert_eq!(row, &expected, "table row against the JSON summary");
    }
    let cases: Vec<&str> = rows.iter().map(|r| r[2].as_str()).collect();
    assert_eq!(cases, ["stock", "scheduled"]);
    // With one repeat, each median is that run's figure.
    for (s, case) in summary.iter().zip(["stock", "scheduled"]) {
        let run = results
            .iter()
            .find(|r| r["case"] == case)
            .unwrap_or_else(|| panic!("a run of {case}"));
        for figure in [
            "critical_first_byte_ms",
            "critical_complete_ms",
            "fixture_complete_ms",
            "tls_records",
            "fixture_goodput_mbit",
            "server_retransmits",
        ] {
            assert_eq!(
                s[figure]["median"].as_f64(),
                run[figure].as_f64(),
                "{case}: {figure}"
            );
        }
    }

    // The paired table: scheduled minus stock.
    let rows = support::markdown_table(paired_part, "| workload ");
    let pairs = json["paired"].as_array().expect("paired");
    assert_eq!(rows.len(), pairs.len(), "{report}");
    assert_eq!(pairs.len(), 1);
    for (row, p) in rows.iter().zip(pairs) {
        let expected = vec![
            text(&p["workload"]),
            text(&p["urgencies"]),
            text(&p["case"]),
            spread(&p["critical_complete_ms"], 1, true),
            format!(
                "{}/{}",
                p["critical_sooner"], p["critical_complete_ms"]["n"]
            ),
            spread(&p["background_kib_before_critical"], 0, true),
            spread(&p["fixture_complete_ms"], 1, true),
        ];
        assert_eq!(row, &expected, "paired row against the JSON");
    }
}

/// The tiny configuration on a fast relay link (one repeat, explicit urgencies, stock and
/// scheduled, seed 7), plus `extra`.
fn tiny<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--repeats",
        "1",
        "--urgencies",
        "explicit",
        "--cases",
        "stock,scheduled",
        "--rtt-ms",
        "5",
        "--rate-mbit",
        "200",
        "--seed",
        "7",
    ];
    args.extend_from_slice(extra);
    args
}

/// A number of KiB as the explain table prints it, `-` for null.
fn kib(value: &Value) -> String {
    value["median"]
        .as_f64()
        .map_or_else(|| "-".to_string(), |x| format!("{x:.1}"))
}

#[test]
fn alone_is_the_floor_and_explain_agrees_with_the_json() {
    let json_path = std::env::temp_dir().join(format!("lab-alone-{}.json", std::process::id()));
    let (report, json) = support::run_lab(
        &tiny(&["--workloads", "alone,late", "--explain"]),
        &json_path,
    );
    let results = json["results"].as_array().expect("results");
    assert_eq!(results.len(), 4);
    for r in results {
        let attributed = r["case"] == "scheduled";
        for key in [
            "server_queued_bytes_at_request",
            "server_tls_buffered_at_request",
            "server_notsent_bytes_at_request",
            "server_in_flight_bytes_at_request",
            "server_bytes_after_request",
        ] {
            assert_eq!(!r[key].is_null(), attributed, "{key} in {r}");
        }
        assert!(r["link_queue_bytes_at_request"].is_null(), "relay: {r}");
        if r["workload"] == "alone" {
            assert_eq!(r["background_bytes_before_critical"], 0, "{r}");
            assert_eq!(r["background_bytes_at_critical_request"], 0, "{r}");
            if attributed {
                // Nothing else to send: the wrapper's queue held at most the connection's
                // first flight of control frames (SETTINGS, its ACK, WINDOW_UPDATE), which
                // waits for the first DATA to share its record; never a response's bytes.
                let queued = r["server_queued_bytes_at_request"].as_u64().expect("bytes");
                assert!(queued < 128, "{r}");
            }
        }
    }
    // The main table's `x alone`: the summary's ratio, 1.00 for alone itself.
    let (main_part, explain_part) = report
        .split_once("\nWhere the bytes ahead")
        .unwrap_or_else(|| panic!("no explain table in:\n{report}"));
    let rows = support::markdown_table(main_part, "| workload ");
    let summary = json["summary"].as_array().expect("summary");
    assert_eq!(rows.len(), 4);
    for (row, s) in rows.iter().zip(summary) {
        let ratio = s["critical_vs_alone"].as_f64().expect("alone was run");
        assert_eq!(row[5], format!("{ratio:.2}"), "{row:?}");
        if s["workload"] == "alone" {
            assert_eq!(row[5], "1.00");
        } else {
            let alone = summary
                .iter()
                .find(|a| a["workload"] == "alone" && a["case"] == s["case"])
                .expect("alone row");
            let expected = s["critical_complete_ms"]["median"].as_f64().unwrap()
                / alone["critical_complete_ms"]["median"].as_f64().unwrap();
            assert!((ratio - expected).abs() < 1e-9, "{ratio} vs {expected}");
        }
    }
    // The explain table: one row per cell, the JSON's medians.
    let rows = support::markdown_table(explain_part, "| workload ");
    let explain = json["explain"].as_array().expect("explain");
    assert_eq!(rows.len(), explain.len());
    assert_eq!(explain.len(), 4);
    for (row, e) in rows.iter().zip(explain) {
        let buffered = match e["server_tls_buffered_runs"].as_array() {
            Some(nm) => format!("{}/{}", nm[0], nm[1]),
            None => "-".to_string(),
        };
        let expected = vec![
            text(&e["workload"]),
            text(&e["urgencies"]),
            text(&e["case"]),
            kib(&e["link_queue_kib"]),
            kib(&e["server_queued_kib"]),
            buffered,
            kib(&e["server_notsent_kib"]),
            kib(&e["server_in_flight_kib"]),
            kib(&e["server_sent_after_request_kib"]),
            match (
                e["server_first_data_ms"]["median"].as_f64(),
                e["server_first_data_ms"]["max"].as_f64(),
            ) {
                (Some(median), Some(max)) => format!("{median:.1} [{max:.1}]"),
                _ => "-".to_string(),
            },
        ];
        assert_eq!(row, &expected, "explain row against the JSON");
        assert_eq!(row[4] == "-", row[2] == "stock", "{row:?}");
        assert_eq!(row[9] == "-", row[2] == "stock", "{row:?}");
    }
}

#[test]
fn trace_writes_a_packet_timeline_through_the_tun_link() {
    if !integration_tests::tun::is_root() {
        eprintln!("skipped: the tun link needs root");
        return;
    }
    let dir = std::env::temp_dir().join(format!("lab-trace-{}", std::process::id()));
    let json_path = dir.with_extension("json");
    let (report, json) = support::run_lab(
        &[
            "--link",
            "tun",
            "--repeats",
            "1",
            "--workloads",
            "late",
            "--urgencies",
            "explicit",
            "--cases",
            "scheduled",
            "--seed",
            "1",
            "--trace",
            dir.to_str().expect("a UTF-8 path"),
        ],
        &json_path,
    );
    let r = &json["results"][0];
    assert!(
        r["link_queue_bytes_at_request"].as_u64().is_some(),
        "tun: the link's queue is known: {r}"
    );
    assert!(report.contains("Packet traces"), "{report}");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the trace directory")
        .map(|e| e.expect("an entry").path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let csv = std::fs::read_to_string(&files[0]).expect("the trace");
    std::fs::remove_dir_all(&dir).ok();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some(
            "t_ms,due_ms,dir,flow,ip_len,flags,seq,ack,payload,queue_bytes,dropped,records,streams"
        )
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.len() > 100, "{} packets", rows.len());
    let syn = |dir: &str, flags: &str| rows.iter().any(|r| r[2] == dir && r[5] == flags);
    assert!(syn("up", "S") && syn("down", "SA"), "{csv}");
    // Server-to-client packets carry the critical stream's bytes somewhere.
    let critical = "5";
    assert!(
        rows.iter().any(|r| r[2] == "down"
            && r[3] == "fixture"
            && r[12].split(' ').any(|s| s == critical)),
        "no packet carried stream {critical}"
    );
}
