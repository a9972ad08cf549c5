//! The bytes of the lab's resources other than images: article prose, a stylesheet, script
//! bundles, API answers and opaque bulk bytes, each of a target size.
//!
//! Everything is a pure function of its arguments (a [`Prng`] seeded from the file's
//! path), so every call produces the same bytes. Lengths land within one generated unit (a
//! paragraph, a rule, a number) of the target, which the site's tests bound, except
//! [`api_answer_of_len`]'s, which are exact.

use std::fmt::Write as _;

/// A small deterministic pseudo-random generator (SplitMix64, Steele, Lea and Flood,
/// "Fast splittable pseudorandom number generators", 2014): the same seed gives the same
/// bytes on every platform and version, which `rand`'s generators do not promise.
#[derive(Debug, Clone)]
pub(crate) struct Prng(u64);

/// SplitMix64's increment (the golden ratio in 64 bits) and output mixing constants.
const SPLITMIX_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
const SPLITMIX_MUL1: u64 = 0xbf58_476d_1ce4_e5b9;
const SPLITMIX_MUL2: u64 = 0x94d0_49bb_1331_11eb;

impl Prng {
    /// A generator seeded from `label` (e.g. the file's URL path), so files differ.
    pub(crate) fn seeded(label: &str) -> Prng {
        // FNV-1a (64-bit offset basis and prime) folds the label into the seed.
        let seed = label.bytes().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
        Prng(seed)
    }

    /// The next 64 pseudo-random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(SPLITMIX_GAMMA);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(SPLITMIX_MUL1);
        z = (z ^ (z >> 27)).wrapping_mul(SPLITMIX_MUL2);
        z ^ (z >> 31)
    }

    /// A number below `bound` (`bound > 0`; the slight modulo bias does not matter here).
    pub(crate) fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound as u64) as usize
    }

    /// `len` pseudo-random bytes: incompressible, so no layer can shrink them.
    pub(crate) fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(len);
        out
    }
}

/// Sentences the article's paragraphs are drawn from: ordinary prose about the web, so the
/// page has text of realistic word and line lengths to lay out and paint.
const SENTENCES: &[&str] = &[
    "Most of what a reader waits for on a news page is not the text itself but the handful of requests that stand between the first byte and the first paint.",
    "A stylesheet in the head blocks rendering until it arrives, which is why it deserves the connection before anything else.",
    "Images further down the page can wait; the one at the top is usually the largest thing the reader sees.",
    "Browsers have long guessed which responses matter most, and they now tell the server what they guessed.",
    "The guess travels as a small header with an urgency from zero to seven and a flag for incremental delivery.",
    "A server that ignores it sends responses in whatever order its buffers happen to fill.",
    "On a fast link nobody notices, but on a train or a crowded café the difference is measured in seconds.",
    "Video that starts downloading early competes with the stylesheet for the same congestion window.",
    "Web fonts are another quiet source of delay, because text stays invisible until the font arrives or its block period ends.",
    "Analytics scripts are marked async precisely so that they never stand in the way of the content.",
    "Engineers who measure this tend to look at first contentful paint and largest contentful paint together.",
    "The first tells you when anything appeared; the second tells you when the page looked finished to most people.",
    "Both depend on the order in which bytes leave the server, not just on how many there are.",
    "Encryption adds its own framing, and a record that mixes urgent and bulk bytes delays the urgent ones.",
    "A single connection carries everything, so one slow stream can hold up the rest if the server lets it.",
    "The fix is rarely more bandwidth; it is usually sending the right bytes first.",
    "Readers do not see protocols, but they feel the moment the headline and the photo appear.",
    "Publishers learned this the hard way when pages grew heavier every year while attention spans did not.",
    "Caching helps the second visit, yet the first visit is the one that decides whether there is a second.",
    "Our editors tested the page on an old phone over a weak signal before publishing it.",
    "What they saw was a blank screen for longer than anyone liked, then everything at once.",
    "After the change, the text and the main image arrived first, and the rest filled in while they read.",
    "Nothing about the page itself changed; only the order in which the server answered.",
    "That is the kind of improvement that never shows up in a feature list but shows up in every session.",
];

/// Words for headings and captions.
const WORDS: &[&str] = &[
    "network",
    "priority",
    "stream",
    "server",
    "browser",
    "latency",
    "render",
    "layout",
    "signal",
    "urgent",
    "background",
    "window",
    "reader",
    "headline",
    "photo",
    "cache",
    "record",
    "packet",
    "session",
    "origin",
    "connection",
    "response",
    "request",
    "paint",
];

/// The longest paragraph, in bytes: short paragraphs keep each text block smaller than the
/// hero image, so that the image stays the Largest Contentful Paint element. In the
/// article's 640-pixel column a paragraph is at most three lines (640x77 CSS pixels in
/// Chromium 156: 49,000 px²), and LCP counts the hero at its natural size (400x170:
/// 68,000 px²) however large it is displayed.
const PARAGRAPH_MAX: usize = 240;

/// One paragraph of prose, at most [`PARAGRAPH_MAX`] bytes, from `rng`.
pub(crate) fn paragraph(rng: &mut Prng) -> String {
    let mut text = String::from(SENTENCES[rng.below(SENTENCES.len())]);
    loop {
        let next = SENTENCES[rng.below(SENTENCES.len())];
        if text.len() + 1 + next.len() > PARAGRAPH_MAX || text.contains(next) {
            return text;
        }
        text.push(' ');
        text.push_str(next);
    }
}

/// A few words, capitalised, for a heading or a caption.
pub(crate) fn title(rng: &mut Prng, words: usize) -> String {
    let mut out = String::new();
    for n in 0..words {
        let word = WORDS[rng.below(WORDS.len())];
        if n == 0 {
            let mut chars = word.chars();
            out.extend(chars.next().map(|c| c.to_ascii_uppercase()));
            out.push_str(chars.as_str());
        } else {
            out.push(' ');
            out.push_str(word);
        }
    }
    out
}

/// A stylesheet of about `target` bytes: `base` (the page's own rules) then utility rules
/// as a CSS framework ships them, most of them unused by the page.
pub(crate) fn stylesheet(rng: &mut Prng, base: &str, target: usize) -> String {
    const PROPERTIES: &[(&str, &str)] = &[
        ("margin", "px"),
        ("padding", "px"),
        ("gap", "px"),
        ("font-size", "px"),
        ("line-height", "%"),
        ("max-width", "px"),
        ("border-radius", "px"),
        ("letter-spacing", "em"),
    ];
    let mut css = String::from(base);
    let mut n = 0usize;
    while css.len() < target {
        let (property, unit) = PROPERTIES[rng.below(PROPERTIES.len())];
        let value = rng.below(200);
        let colour = rng.next_u64() & 0xff_ffff;
        // `writeln!` into a `String` cannot fail.
        let _ = writeln!(
            css,
            ".u-{n:04} {{ {property}: {value}{unit}; color: #{colour:06x}; }}"
        );
        n += 1;
    }
    css
}

/// A script of about `target` bytes that JavaScript engines parse and run: a large array
/// literal (as bundles carry data tables), then `work`, a statement that may use the array
/// as `table`.
pub(crate) fn script_bundle(rng: &mut Prng, header: &str, work: &str, target: usize) -> String {
    let mut js = format!("{header}\n(function () {{\n\"use strict\";\nvar table = [");
    let budget = target.saturating_sub(js.len() + work.len() + "];\n\n})();\n".len());
    let mut line_len = 0;
    while js.len() < budget {
        let _ = write!(js, "{},", rng.below(1_000_000));
        line_len += 7;
        // Line breaks keep the file readable in a browser's source view.
        if line_len > 100 {
            js.push('\n');
            line_len = 0;
        }
    }
    let _ = write!(js, "0];\n{work}\n}})();\n");
    js
}

/// An API answer: a JSON object of about `target` bytes describing a list of items.
pub(crate) fn api_answer(rng: &mut Prng, id: usize, target: usize) -> String {
    let mut items = Vec::new();
    let mut answer = serde_json::json!({ "id": id, "items": [] }).to_string();
    while answer.len() < target {
        items.push(api_item(rng, id, items.len()));
        answer = serde_json::json!({ "id": id, "items": items }).to_string();
    }
    answer
}

/// An API answer of exactly `len` bytes: [`api_answer`]'s object with the items that fit,
/// and a `pad` string of spaces that makes up the rest. `len` must be at least that of the
/// object with no item and an empty `pad` (28 bytes for a one-digit `id`:
/// `{"id":1,"items":[],"pad":""}`); a shorter `len` gets that object.
pub(crate) fn api_answer_of_len(rng: &mut Prng, id: usize, len: usize) -> String {
    let padded = |items: &[serde_json::Value], pad: usize| {
        serde_json::json!({ "id": id, "items": items, "pad": " ".repeat(pad) }).to_string()
    };
    let mut items = Vec::new();
    loop {
        items.push(api_item(rng, id, items.len()));
        if padded(&items, 0).len() > len {
            items.pop();
            break;
        }
    }
    let unpadded = padded(&items, 0).len();
    padded(&items, len.saturating_sub(unpadded))
}

/// The `n`th item of API answer `id`.
fn api_item(rng: &mut Prng, id: usize, n: usize) -> serde_json::Value {
    serde_json::json!({
        "id": format!("item-{id}-{n}"),
        "title": title(rng, 3),
        "score": rng.below(10_000),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prng_is_deterministic_and_seeded() {
        let a: Vec<u64> = (0..4).map(|_| Prng::seeded("a").next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(Prng::seeded("a").next_u64(), Prng::seeded("b").next_u64());
        assert_eq!(Prng::seeded("x").bytes(13).len(), 13);
    }

    #[test]
    fn paragraphs_stay_short() {
        let mut rng = Prng::seeded("p");
        for _ in 0..200 {
            let p = paragraph(&mut rng);
            assert!(!p.is_empty() && p.len() <= PARAGRAPH_MAX, "{p}");
        }
    }

    #[test]
    fn api_answers_are_json_of_the_target_size() {
        let answer = api_answer(&mut Prng::seeded("api"), 3, 2048);
        let value: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(value["id"], 3);
        assert!(
            (2048..2048 + 100).contains(&answer.len()),
            "{}",
            answer.len()
        );
    }

    #[test]
    fn exact_api_answers_are_json_of_exactly_their_length() {
        // 28: `{"id":1,"items":[],"pad":""}`, the shortest.
        for len in [28, 100, 4096] {
            let answer = api_answer_of_len(&mut Prng::seeded("exact"), 1, len);
            assert_eq!(answer.len(), len, "{answer}");
            let value: serde_json::Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(value["id"], 1);
        }
        let answer = api_answer_of_len(&mut Prng::seeded("exact"), 1, 4096);
        let value: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert!(value["items"].as_array().unwrap().len() > 30, "{answer}");
    }

    #[test]
    fn bundles_reach_their_target() {
        let js = script_bundle(&mut Prng::seeded("js"), "// x", "table.length;", 10_000);
        assert!(js.len().abs_diff(10_000) < 50, "{}", js.len());
        assert!(js.ends_with("})();\n"));
    }
}
