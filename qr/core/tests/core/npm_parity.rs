//! Tier-0 parity: for fixed texts, `qr_core::modules` must equal what npm `qrcode`
//! (configured per docs/qr.md) draws. `data/npm_parity.jsonl` was produced by npm
//! `qrcode` 1.5.4 with `data/npm_parity.js`; regenerate it there, never by hand.

#[test]
fn modules_equal_npm_qrcode_for_every_reference_text() {
    let data = include_str!("../data/npm_parity.jsonl");
    let mut checked = 0;
    for line in data.lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let text = row["text"].as_str().unwrap();
        let size = row["size"].as_u64().unwrap() as usize;
        let hex = row["modules_hex"].as_str().unwrap();
        let npm_bits: Vec<bool> = (0..size * size)
            .map(|i| {
                let byte = u8::from_str_radix(&hex[(i / 8) * 2..(i / 8) * 2 + 2], 16).unwrap();
                byte & (0x80 >> (i % 8)) != 0
            })
            .collect();

        let ours = qr_core::modules(text).unwrap();
        assert_eq!(ours.size(), size, "size for {text:?}");
        assert_eq!(u64::from(ours.version()), row["version"].as_u64().unwrap());
        assert_eq!(
            u64::from(ours.mask()),
            row["mask"].as_u64().unwrap(),
            "mask for {text:?}"
        );
        for y in 0..size {
            for x in 0..size {
                assert_eq!(
                    ours.is_dark(x, y),
                    npm_bits[y * size + x],
                    "module ({x},{y}) of {text:?}"
                );
            }
        }
        checked += 1;
    }
    assert!(checked >= 40, "reference file holds {checked} texts");
}
