//! Mix files on disk: endpoints with weights, a CSV data file, a body file, and the same
//! sequence for every target.

use std::path::Path;

use scalpel_requests::{DataSet, Mix, Order, RenderedRequest, RequestsError};

const MIX: &str = r#"# three endpoints of the payments example
[[request]]
name = "balance"
path = "/v1/accounts/{account}/balance?currency={currency}"
headers = { Accept = "application/json" }
weight = 6

[[request]]
name = "stats"
method = "GET"
path = "/v1/users/{user}/stats?days=30"
weight = 3

[[request]]
name = "transfer"
method = "POST"
path = "/v1/transfers"
headers = { "Content-Type" = "application/json", "Idempotency-Key" = "k-{user}" }
body_file = "bodies/transfer.json"
"#;

fn setup() -> (tempfile::TempDir, std::path::PathBuf, DataSet) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("bodies")).unwrap();
    std::fs::write(
        dir.path().join("bodies/transfer.json"),
        "{{\"from\": \"{account}\", \"amount_minor\": 100, \"currency\": \"{currency}\"}}\n",
    )
    .unwrap();
    let mut csv = String::from("account,currency,user\n");
    for i in 0..50 {
        csv.push_str(&format!("acc-{i},{},u{i}\n", ["EUR", "USD"][i % 2]));
    }
    std::fs::write(dir.path().join("rows.csv"), csv).unwrap();
    let mix = dir.path().join("mix.toml");
    std::fs::write(&mix, MIX).unwrap();
    let data = DataSet::from_path(&dir.path().join("rows.csv")).unwrap();
    (dir, mix, data)
}

#[test]
fn a_mix_file_renders_weighted_endpoints_from_shared_data() {
    let (_dir, path, data) = setup();
    let mix = Mix::from_path(&path, Some(data), Order::Sequential, 42).unwrap();
    let names: Vec<&str> = mix.entries().iter().map(|e| e.name()).collect();
    assert_eq!(names, ["balance", "stats", "transfer"]);
    let lines: Vec<u64> = mix.entries().iter().map(|e| e.line()).collect();
    assert_eq!(lines, [2, 8, 14]);

    let mut out = RenderedRequest::default();
    let mut counts = [0u32; 3];
    for i in 0..10_000u64 {
        let k = mix.render_into(i, &mut out);
        counts[k] += 1;
        let row = i % 50;
        let currency = ["EUR", "USD"][(row % 2) as usize];
        match k {
            0 => assert_eq!(
                out.path_and_query,
                format!("/v1/accounts/acc-{row}/balance?currency={currency}")
            ),
            1 => assert_eq!(
                out.path_and_query,
                format!("/v1/users/u{row}/stats?days=30")
            ),
            _ => {
                assert_eq!(out.method, http::Method::POST);
                assert_eq!(
                    out.body,
                    format!(
                        "{{\"from\": \"acc-{row}\", \"amount_minor\": 100, \"currency\": \"{currency}\"}}\n"
                    )
                    .as_bytes()
                );
                assert_eq!(out.headers[1].1, format!("k-u{row}").as_str());
            }
        }
    }
    // Weights 6:3:1 over 10,000 picks.
    for (k, share) in [(0, 0.6), (1, 0.3), (2, 0.1)] {
        let got = f64::from(counts[k]) / 10_000.0;
        assert!((got - share).abs() < 0.02, "{k}: {got}");
    }
}

#[test]
fn two_targets_get_the_same_sequence_and_another_seed_another() {
    let (_dir, path, data) = setup();
    // Two independent loads of the same file, as two targets of an A/B run would have.
    let a = Mix::from_path(&path, Some(data.clone()), Order::Shuffled { seed: 5 }, 7).unwrap();
    let b = Mix::from_path(&path, Some(data.clone()), Order::Shuffled { seed: 5 }, 7).unwrap();
    let c = Mix::from_path(&path, Some(data), Order::Shuffled { seed: 5 }, 8).unwrap();
    let run = |m: &Mix| -> Vec<(usize, String)> {
        let mut out = RenderedRequest::default();
        // Out of order, as threads claim them: each request depends on its index only.
        (0..2_000u64)
            .rev()
            .map(|i| {
                let k = m.render_into(i, &mut out);
                (k, out.path_and_query.clone())
            })
            .collect()
    };
    assert_eq!(run(&a), run(&b));
    assert_ne!(run(&a), run(&c));
}

#[test]
fn problems_in_files_name_the_file_and_line() {
    let (dir, _path, data) = setup();
    let mix = |text: &str| -> RequestsError {
        let p = dir.path().join("bad.toml");
        std::fs::write(&p, text).unwrap();
        Mix::from_path(&p, Some(data.clone()), Order::Sequential, 1).unwrap_err()
    };
    let text = |e: &RequestsError| {
        let t = e.to_string();
        assert!(t.contains("bad.toml"), "{t}");
        t
    };
    let e = mix("[[request]]\nname = \"a\"\npath = \"/\"\nbody_file = \"missing.json\"\n");
    let t = text(&e);
    assert!(t.contains("line 4") && t.contains("missing.json"), "{t}");

    let e = mix("[[request]]\nname = \"a\"\npath = \"/{nope}\"\n");
    let t = text(&e);
    assert!(
        t.contains("line 1") && t.contains("{nope}") && t.contains("account"),
        "{t}"
    );

    std::fs::write(dir.path().join("bin.dat"), [0xff, 0xfe, 0x00]).unwrap();
    let e = mix("[[request]]\nname = \"a\"\npath = \"/\"\nbody_file = \"bin.dat\"\n");
    assert!(text(&e).contains("not UTF-8"), "{e}");

    let e = Mix::from_path(
        Path::new("/nonexistent/mix.toml"),
        None,
        Order::Sequential,
        1,
    )
    .unwrap_err();
    assert!(e.to_string().contains("/nonexistent/mix.toml"), "{e}");
}

/// #26.2: a mix entry's `body` with JSON written as it is sent (`{"to":"{user}",…}`) was
/// refused (`unknown modifier "\"{user"`). Now it renders as written; a placeholder that
/// names no column is named, with the data file's columns.
#[test]
fn a_json_body_in_a_mix_is_written_as_sent() {
    let (dir, _path, data) = setup();
    let p = dir.path().join("json.toml");
    std::fs::write(
        &p,
        "[[request]]\nname = \"pay\"\nmethod = \"POST\"\npath = \"/v1/transfers\"\n\
         body = '{\"to\":\"{user}\",\"amount\":{\"minor\":5,\"currency\":\"{currency}\"}}'\n",
    )
    .unwrap();
    let mix = Mix::from_path(&p, Some(data.clone()), Order::Sequential, 7).unwrap();
    let mut out = RenderedRequest::default();
    mix.render_into(3, &mut out);
    assert_eq!(
        String::from_utf8_lossy(&out.body),
        r#"{"to":"u3","amount":{"minor":5,"currency":"USD"}}"#
    );

    std::fs::write(
        &p,
        "[[request]]\nname = \"pay\"\npath = \"/p\"\nbody = '{\"to\":\"{usr}\"}'\n",
    )
    .unwrap();
    let e = Mix::from_path(&p, Some(data), Order::Sequential, 7)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("{usr}") && e.contains("columns: account, currency, user"),
        "{e}"
    );
}
