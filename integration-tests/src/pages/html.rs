//! The pages' documents, stylesheet and scripts, and the URL paths they reference.
//!
//! Every document inlines the instrumentation (`instrument.js`) first in its `<head>`,
//! after the page's configuration (`window.__labConfig`: what to time), so that it observes
//! everything the page does. Text files are ASCII or UTF-8, deterministic, and of their
//! stated sizes (see each constant).

use std::sync::LazyLock;

use serde_json::json;

use super::content::{paragraph, script_bundle, stylesheet, title, Prng};
use super::site::{
    API_ANSWERS, APP_IMAGES, APP_IMAGE_SIZE, FIGURES, FIGURE_SIZE, HERO_SIZE, KIB, MIB,
};

/// page-article's files.
pub(crate) const ARTICLE_ENTRY: &str = "/article/index.html";
pub(crate) const ARTICLE_CSS: &str = "/article/style.css";
pub(crate) const ARTICLE_FONT: &str = "/article/font.woff2";
pub(crate) const ARTICLE_HERO: &str = "/article/hero.png";
pub(crate) const ARTICLE_VIDEO: &str = "/article/video.mp4";
const ARTICLE_SCRIPTS: [&str; 2] = ["/article/analytics.js", "/article/comments.js"];
/// page-app's document and script.
pub(crate) const APP_ENTRY: &str = "/app/index.html";
pub(crate) const APP_SCRIPT: &str = "/app/app.js";
/// page-busy's document and the download it starts.
pub(crate) const BUSY_ENTRY: &str = "/busy/index.html";
pub(crate) const BUSY_DOWNLOAD: &str = "/busy/big.bin";
/// page-demo's document, its two background downloads (started first, in this order) and
/// its critical answer: the example server's demo page's `/`, `/bg/one`, `/bg/two` and
/// `/critical` (`examples::responses::INDEX_HTML`), as static files.
pub(crate) const DEMO_ENTRY: &str = "/demo/index.html";
pub(crate) const DEMO_BULK: [&str; 2] = ["/demo/bg-one.bin", "/demo/bg-two.bin"];
pub(crate) const DEMO_CRITICAL: &str = "/demo/critical.json";

/// Stated sizes of the text resources: the article's HTML about 30 KiB, its stylesheet
/// 40 KiB, each of its two async scripts 300 KiB; the app's HTML about 5 KiB and its
/// script 1.5 MiB. A document's size is that of the page's own markup: the inlined
/// instrumentation (the same on every page, [`instrument_len`]) comes on top.
const ARTICLE_HTML_LEN: usize = 30 * KIB;
const ARTICLE_CSS_LEN: usize = 40 * KIB;
const ARTICLE_SCRIPT_LEN: usize = 300 * KIB;
const APP_HTML_LEN: usize = 5 * KIB;
const APP_SCRIPT_LEN: usize = 3 * MIB / 2;

/// page-app's API answers are fetched in waves of this many, each wave after the previous
/// one completed (an app fetching its configuration, then its data).
const API_WAVE: usize = 5;

/// The article's paragraphs before its first figure: enough text to push every figure
/// below the fold of the driver's window (the first figure starts about 1,300 CSS pixels
/// down; the viewport is about 700 high).
const LEAD_PARAGRAPHS: usize = 10;

/// Paragraphs between two figures.
const PARAGRAPHS_PER_FIGURE: usize = 3;

/// The `RequestInit` of the pages' bulk downloads (the article's video, page-busy's
/// download, page-demo's two background downloads): `priority: "low"` (Fetch Priority API,
/// Chromium 101+), as a site owner marks a download that must not compete with what
/// renders the page. The browser turns it into its request priority and the `priority`
/// header's urgency.
const BULK_FETCH_INIT: &str = r#"{priority: "low"}"#;

/// The `RequestInit` of page-demo's critical answer: `priority: "high"`, as the example
/// server's demo page fetches `/critical` (`examples::responses::INDEX_HTML`).
const CRITICAL_FETCH_INIT: &str = r#"{priority: "high"}"#;

/// The measurement script, inlined in every document ([`INLINE_INSTRUMENT`]).
const INSTRUMENT_JS: &str = include_str!("instrument.js");

/// The instrumentation without comment lines, blank lines and indentation (its source is
/// written for that: see its header).
static INLINE_INSTRUMENT: LazyLock<String> = LazyLock::new(|| {
    INSTRUMENT_JS
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
});

/// Bytes the inlined instrumentation adds to every document.
pub(crate) fn instrument_len() -> usize {
    INLINE_INSTRUMENT.len()
}

/// Length of `html` without the inlined instrumentation: the page's own markup.
fn markup_len(html: &str) -> usize {
    html.len().saturating_sub(instrument_len())
}

/// What the instrumentation times on a page (`window.__labConfig`).
struct LabConfig<'a> {
    css: Option<&'a str>,
    hero: Option<&'a str>,
    api: Vec<String>,
    /// Background downloads the page fetches itself whose end is measured (the later
    /// `responseEnd` of them, `bulk_end_ms`); none: no such figure.
    bulk: Vec<&'a str>,
    /// Whether First and Largest Contentful Paint are expected (not for page-busy's first
    /// tab, which goes to the background when the measured tab opens, nor for page-demo,
    /// measured by its responses).
    paints: bool,
}

/// A document's start: doctype, `<head>` with the instrumentation first, then `head`.
fn document_head(page_title: &str, config: &LabConfig<'_>, head: &str) -> String {
    let config = json!({
        "css": config.css,
        "hero": config.hero,
        "api": config.api,
        "bulk": config.bulk,
        "paints": config.paints,
    });
    // `<link rel="icon" href="data:,">`: no `/favicon.ico` request outside the site.
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{page_title}</title>\n<link rel=\"icon\" href=\"data:,\">\n\
         <script>\nwindow.__labConfig = {config};\n{}\n</script>\n{head}</head>\n",
        *INLINE_INSTRUMENT
    )
}

/// URL paths of the article's figures.
pub(crate) fn figure_paths() -> Vec<String> {
    (1..=FIGURES)
        .map(|n| format!("/article/img/{n}.png"))
        .collect()
}

/// URL paths of the app's images.
pub(crate) fn app_image_paths() -> Vec<String> {
    (1..=APP_IMAGES)
        .map(|n| format!("/app/img/{n}.png"))
        .collect()
}

/// URL paths of the app's API answers, in fetch order.
pub(crate) fn api_paths() -> Vec<String> {
    (1..=API_ANSWERS)
        .map(|n| format!("/app/api/{n}.json"))
        .collect()
}

/// The article's two async scripts: URL path and source.
pub(crate) fn article_scripts() -> Vec<(&'static str, String)> {
    ARTICLE_SCRIPTS
        .into_iter()
        .map(|path| {
            let name = path.trim_start_matches("/article/").trim_end_matches(".js");
            let work = format!(
                "var sum = 0;\nfor (var i = 0; i < table.length; i++) {{ sum = (sum * 31 + table[i]) % 1000003; }}\n\
                 window.__labScripts = window.__labScripts || {{}};\nwindow.__labScripts[\"{name}\"] = sum;"
            );
            let header = format!("// {name}: a data table and a little work, as bundles have.");
            let source = script_bundle(&mut Prng::seeded(path), &header, &work, ARTICLE_SCRIPT_LEN);
            (path, source)
        })
        .collect()
}

/// page-article's document.
pub(crate) fn article_document() -> String {
    let mut rng = Prng::seeded(ARTICLE_ENTRY);
    let headline = title(&mut rng, 5);
    let config = LabConfig {
        css: Some(ARTICLE_CSS),
        hero: Some(ARTICLE_HERO),
        api: Vec::new(),
        bulk: Vec::new(),
        paints: true,
    };
    // The video fetch comes before the stylesheet link: an inline script after a
    // stylesheet would wait for it, and the point is to start the bulk download early.
    let mut head = format!(
        "<script>\nwindow.__labPage.fetch(\"{ARTICLE_VIDEO}\", {BULK_FETCH_INIT});\n</script>\n\
         <link rel=\"stylesheet\" href=\"{ARTICLE_CSS}\">\n"
    );
    for path in ARTICLE_SCRIPTS {
        head.push_str(&format!("<script async src=\"{path}\"></script>\n"));
    }
    let mut html = document_head(&headline, &config, &head);
    let (hero_width, hero_height) = HERO_SIZE;
    html.push_str(&format!(
        "<body>\n<header class=\"masthead\"><p class=\"brand\">The Daily Packet</p></header>\n\
         <main class=\"article\">\n<h1>{headline}</h1>\n\
         <p class=\"byline\">By our network desk &middot; 6 min read</p>\n\
         <img class=\"hero\" src=\"{ARTICLE_HERO}\" width=\"{hero_width}\" height=\"{hero_height}\" alt=\"{}\">\n",
        title(&mut rng, 4)
    ));
    push_article_body(&mut html, &mut rng);
    html
}

/// The article's text and figures, filled with paragraphs to [`ARTICLE_HTML_LEN`], and the
/// document's end.
fn push_article_body(html: &mut String, rng: &mut Prng) {
    const END: &str = "</main>\n</body>\n</html>\n";
    let push_paragraphs = |html: &mut String, rng: &mut Prng, count: usize| {
        for _ in 0..count {
            html.push_str(&format!("<p>{}</p>\n", paragraph(rng)));
        }
    };
    push_paragraphs(html, rng, LEAD_PARAGRAPHS);
    let (width, height) = FIGURE_SIZE;
    for path in figure_paths() {
        let caption = title(rng, 4);
        html.push_str(&format!(
            "<figure><img src=\"{path}\" width=\"{width}\" height=\"{height}\" alt=\"{caption}\">\
             <figcaption>{caption}</figcaption></figure>\n"
        ));
        push_paragraphs(html, rng, PARAGRAPHS_PER_FIGURE);
    }
    while markup_len(html) + END.len() < ARTICLE_HTML_LEN {
        push_paragraphs(html, rng, 1);
    }
    html.push_str(END);
}

/// page-article's stylesheet: the page's rules (the web font for all text) and utility
/// rules up to [`ARTICLE_CSS_LEN`].
pub(crate) fn article_stylesheet() -> String {
    let base = format!(
        "@font-face {{ font-family: \"Lab Serif\"; src: url(\"{ARTICLE_FONT}\") format(\"woff2\"); }}\n\
         body {{ margin: 0; font-family: \"Lab Serif\", Georgia, serif; font-size: 16px; line-height: 1.6; color: #1b1b1b; background: #fff; }}\n\
         .masthead {{ border-bottom: 1px solid #ddd; padding: 8px 16px; }}\n\
         .brand {{ margin: 0; font-weight: bold; letter-spacing: 0.05em; }}\n\
         .article {{ max-width: 640px; margin: 0 auto; padding: 0 16px; }}\n\
         .article h1 {{ font-size: 28px; line-height: 1.2; }}\n\
         .byline {{ color: #555; font-size: 14px; }}\n\
         .hero {{ display: block; width: 100%; height: auto; }}\n\
         figure {{ margin: 24px 0; }}\n\
         figcaption {{ color: #555; font-size: 13px; }}\n"
    );
    stylesheet(&mut Prng::seeded(ARTICLE_CSS), &base, ARTICLE_CSS_LEN)
}

/// page-app's document: an app shell whose script does the work.
pub(crate) fn app_document() -> String {
    let config = LabConfig {
        css: None,
        hero: None,
        api: api_paths(),
        bulk: Vec::new(),
        paints: true,
    };
    let head = format!(
        "<script defer src=\"{APP_SCRIPT}\"></script>\n<style>\n\
         body {{ margin: 0; font-family: sans-serif; }}\n\
         .bar {{ background: #234; color: #fff; padding: 12px 16px; }}\n\
         #gallery img {{ margin: 4px; }}\n</style>\n"
    );
    let mut html = document_head("Lab app", &config, &head);
    html.push_str(
        "<body>\n<div class=\"bar\">Lab app</div>\n<p id=\"status\">Loading&hellip;</p>\n\
         <div id=\"gallery\"></div>\n<ul id=\"feed\"></ul>\n<footer>\n",
    );
    const END: &str = "</footer>\n</body>\n</html>\n";
    let mut rng = Prng::seeded(APP_ENTRY);
    while markup_len(&html) + END.len() < APP_HTML_LEN {
        html.push_str(&format!("<p>{}</p>\n", paragraph(&mut rng)));
    }
    html.push_str(END);
    html
}

/// page-app's script: a bundle of [`APP_SCRIPT_LEN`] whose work starts the images, then
/// fetches the API answers in waves of [`API_WAVE`], each after the previous one.
pub(crate) fn app_script() -> String {
    let (width, height) = APP_IMAGE_SIZE;
    let images = serde_json::to_string(&app_image_paths()).unwrap_or_default();
    let waves: Vec<Vec<String>> = api_paths()
        .chunks(API_WAVE)
        .map(<[String]>::to_vec)
        .collect();
    let waves = serde_json::to_string(&waves).unwrap_or_default();
    // Displayed at half size: large on screen, still decoded in full.
    let work = format!(
        "var lab = window.__labPage;\n\
         var gallery = document.getElementById(\"gallery\");\n\
         var feed = document.getElementById(\"feed\");\n\
         {images}.forEach(function (path) {{\n\
         var image = document.createElement(\"img\");\n\
         image.src = path; image.width = {}; image.height = {}; image.alt = \"\";\n\
         gallery.appendChild(image);\n}});\n\
         function show(bytes) {{\n\
         if (!bytes) return;\n\
         var answer = JSON.parse(new TextDecoder().decode(bytes));\n\
         var item = document.createElement(\"li\");\n\
         item.textContent = \"answer \" + answer.id + \": \" + answer.items.length + \" items\";\n\
         feed.appendChild(item);\n}}\n\
         function wave(paths) {{\n\
         return Promise.all(paths.map(function (path) {{ return lab.fetch(path).then(show); }}));\n}}\n\
         lab.track({waves}.reduce(function (previous, paths) {{\n\
         return previous.then(function () {{ return wave(paths); }});\n}}, Promise.resolve()));\n\
         document.getElementById(\"status\").textContent = \"Loaded \" + table.length + \" records\";",
        width / 2,
        height / 2
    );
    let header =
        "// The lab app's bundle: data, then the app (images, then two waves of API calls).";
    script_bundle(&mut Prng::seeded(APP_SCRIPT), header, &work, APP_SCRIPT_LEN)
}

/// page-busy's document: starts the download and shows nothing else of note.
pub(crate) fn busy_document() -> String {
    let config = LabConfig {
        css: None,
        hero: None,
        api: Vec::new(),
        bulk: Vec::new(),
        paints: false,
    };
    let mut html = document_head("Lab download", &config, "");
    html.push_str(&format!(
        "<body>\n<h1>Downloading</h1>\n<p>A large download shares this origin's connection.</p>\n\
         <script>\nwindow.__labPage.fetch(\"{BUSY_DOWNLOAD}\", {BULK_FETCH_INIT});\n</script>\n\
         </body>\n</html>\n"
    ));
    html
}

/// page-demo's document: the example server's demo page (`examples::responses::INDEX_HTML`)
/// on the lab's instrumentation. Its script starts, without waiting for any, the two
/// background downloads ([`BULK_FETCH_INIT`]) and then the critical answer
/// ([`CRITICAL_FETCH_INIT`]), reads each to its end (the instrumentation hashes it) and
/// lists it; the critical answer is timed as an API answer, the downloads' end as
/// `bulk_end_ms`. No paint timings: the page is measured by its responses.
pub(crate) fn demo_document() -> String {
    let config = LabConfig {
        css: None,
        hero: None,
        api: vec![DEMO_CRITICAL.to_owned()],
        bulk: DEMO_BULK.to_vec(),
        paints: false,
    };
    let [one, two] = DEMO_BULK;
    let mut html = document_head("RFC 9218 priorities demo", &config, "");
    html.push_str(&format!(
        "<body>\n<h1>RFC 9218 priorities demo</h1>\n\
         <p>This page loads one critical 4 KiB resource and two 1 MiB background resources \
         over the same connection.</p>\n<ul id=\"results\"></ul>\n<script>\n\
         var lab = window.__labPage;\n\
         var results = document.getElementById(\"results\");\n\
         function load(path, init) {{\n\
         return lab.fetch(path, init).then(function (bytes) {{\n\
         if (!bytes) return;\n\
         var item = document.createElement(\"li\");\n\
         item.textContent = path + \": \" + bytes.length + \" bytes in \" + Math.round(performance.now()) + \" ms\";\n\
         results.appendChild(item);\n}});\n}}\n\
         load(\"{one}\", {BULK_FETCH_INIT});\n\
         load(\"{two}\", {BULK_FETCH_INIT});\n\
         load(\"{DEMO_CRITICAL}\", {CRITICAL_FETCH_INIT});\n\
         </script>\n</body>\n</html>\n"
    ));
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inlined_instrumentation_cannot_end_its_script_element() {
        let inlined = &*INLINE_INSTRUMENT;
        assert!(!inlined.to_ascii_lowercase().contains("</script"));
        assert!(inlined.contains("window.__lab = {done: false};"));
        assert!(!inlined.lines().any(|line| line.starts_with("//")));
    }

    #[test]
    fn documents_reference_their_resources() {
        let article = article_document();
        for path in [ARTICLE_CSS, ARTICLE_HERO, ARTICLE_VIDEO] {
            assert!(article.contains(path), "{path}");
        }
        assert!(figure_paths().iter().all(|p| article.contains(p.as_str())));
        assert!(article_stylesheet().contains(ARTICLE_FONT));
        assert!(app_document().contains(APP_SCRIPT));
        assert!(busy_document().contains(BUSY_DOWNLOAD));
    }

    #[test]
    fn demo_starts_the_background_then_the_critical_answer() {
        let demo = demo_document();
        let [one, two] = DEMO_BULK;
        let starts = [
            format!("load(\"{one}\", {BULK_FETCH_INIT});"),
            format!("load(\"{two}\", {BULK_FETCH_INIT});"),
            format!("load(\"{DEMO_CRITICAL}\", {CRITICAL_FETCH_INIT});"),
        ];
        let at: Vec<usize> = starts
            .iter()
            .map(|start| {
                demo.find(start.as_str())
                    .unwrap_or_else(|| panic!("{start}"))
            })
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{at:?}");
        // The critical answer is timed as an API answer; the downloads' end as bulk.
        assert!(demo.contains(r#""api":["/demo/critical.json"]"#), "{demo}");
        assert!(demo.contains(r#""bulk":["/demo/bg-one.bin","/demo/bg-two.bin"]"#));
        assert!(demo.contains(r#""paints":false"#));
    }
}
