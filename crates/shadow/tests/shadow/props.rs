//! Property tests: the redaction rules take any name, target, body or difference path a
//! user or a network can give without panicking, and never leave a named secret's value
//! in a JSON body.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;
use scalpel_diff::{DiffKind, Difference};
use scalpel_shadow::{REDACTED, Redactor};

fn grammar_string() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("$".to_string()),
        Just(".".to_string()),
        Just("[\"".to_string()),
        Just("\"]".to_string()),
        Just("\\".to_string()),
        Just("%".to_string()),
        Just("%7".to_string()),
        Just("=".to_string()),
        Just("&".to_string()),
        Just("?".to_string()),
        Just("+".to_string()),
        Just("é".to_string()),
        Just("header:".to_string()),
        Just("token".to_string()),
        "[a-z]{1,4}",
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn redaction_rules_never_panic(
        names in prop::collection::vec(grammar_string(), 0..3),
        target in grammar_string(),
        path in grammar_string(),
        body in prop::collection::vec(any::<u8>(), 0..64),
        form in any::<bool>(),
    ) {
        let r = Redactor::new(&names);
        let _ = r.target(&target);
        let mut h = HeaderMap::new();
        if form {
            h.insert("content-type", HeaderValue::from_static("application/x-www-form-urlencoded"));
        }
        let _ = r.body(&h, &Bytes::from(body));
        let _ = r.body(&h, &Bytes::from(target.clone()));
        let mut d = Difference::new(path, DiffKind::ValueChanged, Some(target.clone()), None);
        r.difference(&mut d);
        let _ = r.headers(&h);
    }

    #[test]
    fn a_named_json_field_never_keeps_its_value(
        name in "[a-zA-Z_][a-zA-Z0-9_]{0,8}",
        secret in "[a-z0-9]{12}",
        depth in 0usize..4,
    ) {
        let mut doc = serde_json::json!({ name.clone(): secret.clone(), "other": 1 });
        for _ in 0..depth {
            doc = serde_json::json!({ "wrap": [doc] });
        }
        let r = Redactor::new([name.to_uppercase()]);
        let out = r.body(&HeaderMap::new(), &Bytes::from(doc.to_string()));
        let text = String::from_utf8(out.to_vec()).unwrap();
        prop_assert!(!text.contains(&secret), "{}", text);
        prop_assert!(text.contains(REDACTED));
    }
}
