//! Every parser of this crate on random and mutated input: it may refuse, it must never
//! panic, and what it accepts must hold together (every counted request can be read, every
//! rendered request is valid HTTP).

use proptest::prelude::*;
use scalpel_requests::{
    DataSet, Mix, Order, RecordedSource, RenderedRequest, RequestSet, RequestTemplate,
    SourceFormat, SourceOptions,
};

fn config() -> ProptestConfig {
    ProptestConfig {
        // `./run fuzz` raises this through PROPTEST_CASES.
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(256),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Reads everything a source offers, three ways, and checks they agree with its count.
fn drain(source: &RecordedSource) {
    let len = source.len();
    assert!(len > 0);
    let mut out = RenderedRequest::default();
    let mut reader = source.reader();
    let mut n = 0;
    while let Some(r) = reader.next_into(&mut out).expect("read what was counted") {
        assert_eq!(r.index, n);
        assert!(
            out.path_and_query.starts_with('/'),
            "{:?}",
            out.path_and_query
        );
        http::uri::PathAndQuery::try_from(out.path_and_query.as_str())
            .expect("a valid request target");
        n += 1;
    }
    assert_eq!(n, len, "the reader found what opening counted");
    let mut looping = source.share(1, 2).looping(true);
    for _ in 0..3 {
        let r = looping.next_into(&mut out).unwrap().unwrap();
        assert_eq!(r.index % 2, 1);
    }
    let mut numbered = source.reader();
    for i in [len - 1, 0, len + 1] {
        assert_eq!(numbered.get_into(i, &mut out).unwrap().index, i);
    }
}

fn try_source(bytes: Vec<u8>, format: Option<SourceFormat>) {
    let mut options = SourceOptions::new().allow_unsafe(true);
    if let Some(f) = format {
        options = options.format(f);
    }
    if let Ok(source) = RecordedSource::from_bytes("input", bytes, options) {
        drain(&source);
    }
}

const LOG: &str = concat!(
    "127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] \"GET /a?x=1 HTTP/1.1\" 200 5 \"-\" \"curl/8\"\n",
    "::1 - bob [10/Oct/2000:13:55:36 -0700] \"POST http://h/p HTTP/1.1\" 201 - \"http://r/\" \"a \\\"b\\\"\" 0.004\n",
    "10.0.0.1 - - [10/Oct/2000:13:55:37 +0100] \"GET /caf\\xC3\\xA9 HTTP/1.0\" 200 1\n",
    "10.0.0.1 - - [10/Oct/2000:13:55:38 +0100] \"-\" 400 0\n",
);

const HAR: &str = r#"{"log": {"version": "1.2", "entries": [
 {"startedDateTime": "2024-01-01T00:00:00.5Z", "request": {"method": "GET", "url": "https://h/a?b=1",
  "headers": [{"name": "Accept", "value": "*/*"}, {"name": ":path", "value": "/a"}]},
  "response": {"content": {"text": "}]{\"x"}}},
 {"startedDateTime": "2024-01-01T00:00:01+02:00", "request": {"method": "POST", "url": "http://h/p",
  "headers": [], "postData": {"mimeType": "application/octet-stream", "text": "AAEC", "encoding": "base64"}}},
 {"startedDateTime": "2024-01-01T00:00:02Z", "request": {"method": "PUT", "url": "/f",
  "postData": {"params": [{"name": "a b", "value": "c&d"}]}}}
]}}"#;

const CAPTURE: &str = concat!(
    "{\"scalpel_capture\":1,\"created_us\":1}\n",
    "{\"time_us\":10,\"method\":\"GET\",\"path\":\"/a?b=1\",\"headers\":[[\"accept\",\"*/*\"]]}\n",
    "{\"time_us\":20,\"method\":\"POST\",\"path\":\"/p\",\"headers\":[[\"x\",\"/w==\",\"base64\"]],\"body\":\"AAEC\",\"body_encoding\":\"base64\"}\n",
    "{\"time_us\":30,\"method\":\"PUT\",\"path\":\"/t\",\"headers\":[],\"body\":\"text\"}\n",
);

const MIX: &str = "[[request]]\nname = \"a\"\npath = \"/u/{id}\"\nheaders = { X = \"{id}\" }\n\
                   weight = 2\n[[request]]\nname = \"b\"\nmethod = \"POST\"\npath = \"/p\"\n\
                   body = '{{\"id\": \"{id:raw}\"}}'\n";

/// A valid text with a few random edits: bytes replaced, inserted, removed, or the tail cut.
fn mutated(base: &'static str) -> impl Strategy<Value = Vec<u8>> {
    let len = base.len();
    prop::collection::vec((0..4u8, 0..len, any::<u8>()), 1..6).prop_map(move |edits| {
        let mut bytes = base.as_bytes().to_vec();
        for (kind, at, b) in edits {
            let at = at.min(bytes.len().saturating_sub(1));
            match kind {
                0 if !bytes.is_empty() => bytes[at] = b,
                1 => bytes.insert(at, b),
                2 if !bytes.is_empty() => {
                    bytes.remove(at);
                }
                _ => bytes.truncate(at),
            }
        }
        bytes
    })
}

/// Pieces of access-log lines in random order and number.
fn log_lines() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just("127.0.0.1 - - ".to_owned()),
        Just("[10/Oct/2000:13:55:36 -0700]".to_owned()),
        Just("[99/Foo/2000:13:55:36 -0700]".to_owned()),
        Just(" \"GET /a HTTP/1.1\"".to_owned()),
        Just(" \"POST http://h HTTP/1.0\"".to_owned()),
        Just(" \"\\x16\\x03\"".to_owned()),
        Just(" 200 12".to_owned()),
        Just(" \"-\" \"agent \\\"x\\\"\"".to_owned()),
        Just(" 0.004".to_owned()),
        Just("\n".to_owned()),
        Just("\"".to_owned()),
        Just("\\".to_owned()),
        "[ -~]{0,12}",
    ];
    prop::collection::vec(piece, 0..40).prop_map(|p| p.concat().into_bytes())
}

/// A JSON document of nested objects and arrays whose strings may hold a `{v}` placeholder
/// (the JSON as written, with the placeholder's value spliced in where it stands).
fn json_with_placeholders() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<i32>().prop_map(serde_json::Value::from),
        // Braces, but never `{{` (the escape) nor `{` before a name (a placeholder).
        "(\\{[ }:,.\\]-]|[ }:,.a-z\\[\\]-]){0,5}".prop_map(serde_json::Value::from),
        Just(serde_json::Value::from("{v}")),
        Just(serde_json::Value::from("x{v}y")),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map("[a-z]{1,3}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_bytes_in_every_format(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        for format in [None, Some(SourceFormat::AccessLog), Some(SourceFormat::Har), Some(SourceFormat::Capture)] {
            try_source(bytes.clone(), format);
        }
    }

    #[test]
    fn shuffled_access_log_pieces(bytes in log_lines()) {
        try_source(bytes.clone(), None);
        try_source(bytes, Some(SourceFormat::AccessLog));
    }

    #[test]
    fn mutated_access_logs(bytes in mutated(LOG)) {
        try_source(bytes, Some(SourceFormat::AccessLog));
    }

    #[test]
    fn mutated_har_files(bytes in mutated(HAR)) {
        try_source(bytes, Some(SourceFormat::Har));
    }

    #[test]
    fn mutated_capture_files(bytes in mutated(CAPTURE)) {
        try_source(bytes, Some(SourceFormat::Capture));
    }

    #[test]
    fn templates_and_values(
        method in "[A-Z]{0,3}|.{0,4}",
        path in "/?[ -~]{0,20}|.{0,10}",
        header in "[ -~]{0,20}|.{0,10}",
        body in ".{0,20}",
        values in prop::collection::vec(".{0,12}", 1..6),
        shuffle in any::<Option<u64>>(),
    ) {
        let headers = [header];
        let Ok(template) = RequestTemplate::parse(&method, &path, &headers, Some(&body)) else {
            return Ok(());
        };
        let names = template.placeholders();
        let data = (!names.is_empty()).then(|| DataSet::from_lines("v", values));
        let order = shuffle.map_or(Order::Sequential, |seed| Order::Shuffled { seed });
        let Ok(set) = RequestSet::new(template, data, order) else {
            return Ok(());
        };
        let mut out = RenderedRequest::default();
        for i in 0..(set.len() as u64 + 2) {
            set.render_into(i, &mut out);
            http::uri::PathAndQuery::try_from(out.path_and_query.as_str())
                .map_err(|e| TestCaseError::fail(format!("{:?}: {e}", out.path_and_query)))?;
        }
    }

    #[test]
    fn data_files_of_random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let dir = tempfile::tempdir().unwrap();
        for name in ["d.txt", "d.csv"] {
            let path = dir.path().join(name);
            std::fs::write(&path, &bytes).unwrap();
            if let Ok(data) = DataSet::from_path(&path) {
                let column = data.columns()[0].clone();
                let t = RequestTemplate::parse("GET", &format!("/{{{column}}}"), &[], None);
                if let Ok(t) = t
                    && let Ok(set) = RequestSet::new(t, Some(data), Order::Shuffled { seed: 1 })
                {
                    for i in 0..set.len() as u64 {
                        set.render(i);
                    }
                }
            }
        }
    }

    /// JSON is sent as written: every brace of the document is literal, only `{v}` is a
    /// placeholder (#26.2), at any nesting (`}}` closing two objects included).
    #[test]
    fn json_bodies_are_sent_as_written(doc in json_with_placeholders(), value in "[a-z0-9]{0,8}") {
        let text = doc.to_string();
        let template = RequestTemplate::parse("POST", "/", &[], Some(&text))
            .map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        let want = text.replace("{v}", &value);
        let names = template.placeholders();
        let data = (!names.is_empty()).then(|| DataSet::from_lines("v", vec![value.clone()]));
        let set = RequestSet::new(template, data, Order::Sequential)
            .map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        let out = set.render(0);
        prop_assert_eq!(String::from_utf8_lossy(&out.body), want, "{}", text);
    }

    #[test]
    fn mix_files(text in mutated(MIX), random in ".{0,80}") {
        let data = DataSet::from_lines("id", vec!["1".into(), "a b".into()]);
        for text in [String::from_utf8_lossy(&text).into_owned(), random] {
            if let Ok(mix) = Mix::parse(&text, std::path::Path::new("m.toml"), Some(data.clone()), Order::Sequential, 3) {
                let mut out = RenderedRequest::default();
                for i in 0..8 {
                    let k = mix.render_into(i, &mut out);
                    prop_assert!(k < mix.entries().len());
                    prop_assert!(mix.entries()[k].weight() > 0);
                }
            }
        }
    }
}
