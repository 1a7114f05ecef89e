//! The golden corpus: `qr_core::png` must return, byte for byte, what it returned before the
//! render was rewritten for speed (issue #27). Every tier's byte-identity check and tier 0's
//! pixel match lean on these bytes, so a faster render may not change a single one.
//!
//! `data/golden_png.txt` holds one line per case, `<digest> <label>`: the SHA-256 of the PNG
//! (computed by the `sha2` crate, independent of the code under test) or `err:<message>` for a
//! text the function refuses. It was written by the render of main at 9491f26 (the png crate's
//! adaptive filter and fdeflate), before any change to the render. Regenerate it only from a
//! commit whose bytes are trusted, never to make this test pass:
//! `QR_GOLDEN_WRITE=1 cargo test --release -p qr-core --test core golden::` (writes the file,
//! then fails so the run is never mistaken for a check).

use sha2::{Digest, Sha256};

const GOLDEN: &str = include_str!("../data/golden_png.txt");

/// A deterministic xorshift, so the corpus is the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Characters of `pool` drawn at random until the text has exactly `bytes` UTF-8 bytes
/// (the last one from the one-byte part of the pool when nothing longer fits).
fn random_text(rng: &mut Rng, pool: &[char], bytes: usize) -> String {
    let mut text = String::with_capacity(bytes);
    while text.len() < bytes {
        let c = pool[rng.below(pool.len() as u64) as usize];
        if text.len() + c.len_utf8() <= bytes {
            text.push(c);
        } else {
            text.push(char::from(b'a' + (rng.below(26) as u8)));
        }
    }
    text
}

/// The ladder's and the benches' texts, then every length for printable ASCII, then the
/// other byte classes at spread-out lengths, then the texts the function must refuse.
fn corpus() -> Vec<(String, String)> {
    let mut cases: Vec<(String, String)> = Vec::new();
    let mut add = |label: String, text: String| cases.push((label, text));

    // qr/node/bench/texts.js (the ladder's per-call texts), scripts/bench-serve.sh's URL,
    // benches/png.rs's texts, and the decode tests' texts.
    let ladder_utf8: String = {
        let head = "Zażółć gęślą jaźń — 日本語のテキスト — ";
        // JS padEnd(96, '·') counts UTF-16 units; every char here is one unit.
        let pad = 96 - head.chars().count();
        format!("{head}{}", "·".repeat(pad))
    };
    let fixed = [
        "hello world".to_string(),
        "https://example.com/orders/12345?ref=qr&x=1".to_string(),
        ladder_utf8,
        "k".repeat(256),
        "z".repeat(512),
        "https://example.com/some/fairly/long/path?with=query".to_string(),
        "https://example.com/some/path?q=hello".to_string(),
        "The quick brown fox jumps over the lazy dog. ".repeat(3)[..100].to_string(),
        "0123456789abcdef".repeat(32),
        "https://example.com/qrcode?text=hello+world&n=42".to_string(),
        "zażółć gęślą jaźń 🚀".to_string(),
        "🚀".repeat(128),
        "hi".to_string(),
        "a".to_string(),
        "repeatable".to_string(),
    ];
    for (i, text) in fixed.into_iter().enumerate() {
        add(format!("fixed-{i}"), text);
    }

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let printable: Vec<char> = (b' '..=b'~').map(char::from).collect();
    for len in 1..=512 {
        add(
            format!("ascii-{len}"),
            random_text(&mut rng, &printable, len),
        );
    }

    let digits: Vec<char> = ('0'..='9').collect();
    let upper: Vec<char> = ('A'..='Z')
        .chain('0'..='9')
        .chain(" $%*+-./:".chars())
        .collect();
    let control: Vec<char> = (0u8..0x20).chain([0x7f]).map(char::from).collect();
    let two_byte: Vec<char> = "ąćęłńóśźżßéèüöäçñøåÆΩπЖж".chars().collect();
    let three_byte: Vec<char> = "日本語のテキスト€—·™✓中文한국어".chars().collect();
    let four_byte: Vec<char> = "🚀😀🎉𝄞𝕏🐍🦀𠜎".chars().collect();
    let mixed: Vec<char> = printable
        .iter()
        .chain(&two_byte)
        .chain(&three_byte)
        .chain(&four_byte)
        .copied()
        .collect();
    let classes: [(&str, &[char], usize); 7] = [
        ("digits", &digits, 17),
        ("alnum", &upper, 19),
        ("control", &control, 23),
        ("utf8-2", &two_byte, 13),
        ("utf8-3", &three_byte, 13),
        ("utf8-4", &four_byte, 13),
        ("mixed", &mixed, 11),
    ];
    for (name, pool, step) in classes {
        for len in (1..=512).step_by(step).chain([511, 512]) {
            add(format!("{name}-{len}"), random_text(&mut rng, pool, len));
        }
    }
    // Every Unicode scalar class: chars drawn from the whole code space (surrogates skipped).
    for len in [1usize, 4, 40, 100, 257, 512] {
        let mut text = String::new();
        while text.len() < len {
            let c = char::from_u32(rng.below(0x11_0000) as u32).unwrap_or('x');
            if text.len() + c.len_utf8() <= len {
                text.push(c);
            } else {
                text.push('y');
            }
        }
        add(format!("anychar-{len}"), text);
    }
    // One byte repeated: the longest runs, light and dark.
    for (name, c) in [("same-x", 'x'), ("same-nul", '\0'), ("same-ff", 'ÿ')] {
        for len in [1usize, 2, 14, 15, 42, 43, 106, 107, 200, 331, 332, 510, 512] {
            let text: String = std::iter::repeat_n(c, len.div_ceil(c.len_utf8())).collect();
            add(format!("{name}-{len}"), text);
        }
    }

    // Refused texts: empty, one byte over, one byte over in a multi-byte char, far over.
    add("err-empty".into(), String::new());
    add("err-513".into(), "a".repeat(513));
    add("err-511+2".into(), format!("{}ż", "a".repeat(511)));
    add("err-rockets".into(), "🚀".repeat(129));
    add("err-4096".into(), "q".repeat(4096));
    cases
}

/// The digest column of one case.
fn digest(text: &str) -> String {
    match qr_core::png(text) {
        Ok(png) => Sha256::digest(&png)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
        Err(e) => format!("err:{e}"),
    }
}

#[test]
fn png_bytes_equal_the_golden_corpus() {
    let cases = corpus();
    let got: Vec<String> = cases
        .iter()
        .map(|(label, text)| format!("{} {label}", digest(text)))
        .collect();
    if std::env::var_os("QR_GOLDEN_WRITE").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/golden_png.txt");
        std::fs::write(path, got.join("\n") + "\n").unwrap();
        panic!(
            "wrote {} cases to {path}; unset QR_GOLDEN_WRITE to check",
            got.len()
        );
    }
    let want: Vec<&str> = GOLDEN.lines().collect();
    assert_eq!(
        want.len(),
        cases.len(),
        "the corpus and the golden file differ in size"
    );
    let differing: Vec<(&str, &String)> = want
        .iter()
        .zip(&got)
        .filter(|(w, g)| *w != *g)
        .map(|(w, g)| (*w, g))
        .collect();
    assert!(
        differing.is_empty(),
        "{} of {} cases differ, the first: {:#?}",
        differing.len(),
        cases.len(),
        &differing[..differing.len().min(5)]
    );
    // The corpus is what it claims to be: hundreds of PNGs and the refusals.
    let refused = want.iter().filter(|l| l.starts_with("err:")).count();
    assert_eq!(refused, 5);
    assert!(
        cases.len() - refused > 700,
        "{} PNG cases",
        cases.len() - refused
    );
}
