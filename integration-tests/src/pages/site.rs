//! The lab's site: the files of every [`Page`], written once into a directory that any
//! static file server serves as its document root, and their manifest ([`Site`]).
//!
//! Invariants: a file's URL path is its path relative to the directory; its bytes are a
//! pure function of its path (every call writes the same bytes, so every server serves
//! byte-identical files); its extension is one of [`SITE_CONTENT_TYPES`](crate::peers::SITE_CONTENT_TYPES); directories are
//! mode 0755 and files 0644, so that a server that drops privileges can read them.

use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::content::{api_answer, api_answer_of_len, Prng};
use super::html;
use super::png;

/// Bytes in a KiB and a MiB: the site's stated sizes are binary.
pub(crate) const KIB: usize = 1024;
pub(crate) const MIB: usize = 1024 * KIB;

/// page-article's web font: about 60 KiB. It starts with the WOFF2 signature, and the rest
/// is not a font (there is no font encoder here): Chromium downloads it, its sanitizer
/// rejects it, and the text falls back to another font. Until the download ends the text
/// stays invisible (up to the font's block period), which is the delay a font causes and
/// what the lab measures.
const FONT_LEN: usize = 60 * KIB;

/// WOFF2's signature, `wOF2` (W3C WOFF 2.0, section 3).
const WOFF2_SIGNATURE: &[u8; 4] = b"wOF2";

/// page-article's bulk download, fetched by the page itself from `<head>`: 4 MiB. Its bytes
/// are opaque: it is fetched, never played.
const VIDEO_LEN: usize = 4 * MIB;

/// page-app's API answers: ten of about 2 KiB each.
pub(crate) const API_ANSWER_LEN: usize = 2 * KIB;
pub(crate) const API_ANSWERS: usize = 10;

/// page-demo's critical answer: 4 KiB, exactly the example server's critical resource
/// (`examples::responses::CRITICAL_LEN`, `GET /critical` of its demo page).
const DEMO_CRITICAL_LEN: usize = examples::responses::CRITICAL_LEN as usize;

/// page-demo's two background downloads: 1 MiB each, exactly the example server's
/// (`examples::responses::BG_LEN`, `GET /bg/{name}` of its demo page).
const DEMO_BULK_LEN: usize = examples::responses::BG_LEN as usize;

/// page-busy's download on the shared connection: 20 MiB.
const BUSY_DOWNLOAD_LEN: usize = 20 * MIB;

/// How much of page-busy's download must have arrived before the driver loads the article
/// in the second tab: 1 MiB, so the download is well under way (many HTTP/2 frames and TLS
/// records in flight) when the article's requests start.
pub const BUSY_HEAD_START: u64 = MIB as u64;

// Images: (width, height) of 8-bit RGB PNGs, chosen for the file size noted with each
// (three bytes a pixel, stored deflate: see `png::encoded_len`).

/// page-article's hero, the Largest Contentful Paint element: about 200 KiB.
pub(crate) const HERO_SIZE: (u32, u32) = (400, 170);
/// page-article's figures below the fold: twelve of about 100 KiB.
pub(crate) const FIGURE_SIZE: (u32, u32) = (240, 142);
pub(crate) const FIGURES: usize = 12;
/// page-app's images: three of about 2 MiB.
pub(crate) const APP_IMAGE_SIZE: (u32, u32) = (1024, 682);
pub(crate) const APP_IMAGES: usize = 3;

/// A page of the lab, as the driver loads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Page {
    /// A news article: text, a render-blocking stylesheet, a web font, a hero image (the
    /// LCP element), twelve images below the fold, two async scripts, and a 4 MiB video
    /// the page fetches itself from `<head>` (bulk sharing the connection).
    Article,
    /// A single-page app: a 1.5 MiB script that starts three 2 MiB images, then fetches ten
    /// small JSON API answers (the critical responses) in two waves of five.
    App,
    /// The article loaded in a second tab while the same HTTP/2 connection carries a 20 MiB
    /// download that `/busy/index.html` started in the first tab.
    Busy,
    /// The example server's demo page (`examples::responses::INDEX_HTML`): a small document
    /// whose script starts two 1 MiB background downloads (`priority: "low"`), then one
    /// 4 KiB JSON answer (`priority: "high"`, the critical response), all at once on one
    /// connection. No paint timings: what it measures is the critical answer's time and
    /// the background's end.
    Demo,
}

impl Page {
    /// Every page, in the order they are documented.
    pub const ALL: [Page; 4] = [Page::Article, Page::App, Page::Busy, Page::Demo];

    /// The page's name on command lines and in reports (`page-article`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Page::Article => "page-article",
            Page::App => "page-app",
            Page::Busy => "page-busy",
            Page::Demo => "page-demo",
        }
    }

    /// The page named `name` ([`Page::name`]).
    pub fn from_name(name: &str) -> Option<Page> {
        Page::ALL.into_iter().find(|page| page.name() == name)
    }

    /// URL path of the document the driver opens first: for page-busy, the page that
    /// starts the download (the article is then [`Page::measured`]).
    pub fn entry(self) -> &'static str {
        match self {
            Page::Article => html::ARTICLE_ENTRY,
            Page::App => html::APP_ENTRY,
            Page::Busy => html::BUSY_ENTRY,
            Page::Demo => html::DEMO_ENTRY,
        }
    }

    /// URL path of the document whose load is measured.
    pub fn measured(self) -> &'static str {
        match self {
            Page::Article | Page::Busy => html::ARTICLE_ENTRY,
            Page::App => html::APP_ENTRY,
            Page::Demo => html::DEMO_ENTRY,
        }
    }

    /// Whether a load of the page measures First and Largest Contentful Paint (required by
    /// [`PageLoad::check`](super::PageLoad::check)): every page but page-demo.
    pub fn measures_paints(self) -> bool {
        self != Page::Demo
    }

    /// The site directories (URL path prefixes) whose files a load of the page fetches.
    fn directories(self) -> &'static [&'static str] {
        match self {
            Page::Article => &["/article/"],
            Page::App => &["/app/"],
            Page::Busy => &["/busy/", "/article/"],
            Page::Demo => &["/demo/"],
        }
    }
}

/// As its [`Page::name`].
impl serde::Serialize for Page {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl fmt::Display for Page {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One file of the site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteFile {
    /// URL path, e.g. `/article/hero.png`: the path relative to the site directory.
    pub path: String,
    /// Length in bytes.
    pub len: u64,
    /// SHA-256 of the bytes, lowercase hex.
    pub sha256: String,
}

/// A generated site: where it is and what it holds.
#[derive(Debug, Clone)]
pub struct Site {
    /// The document root.
    pub dir: PathBuf,
    /// Every file, in the order they were written.
    pub files: Vec<SiteFile>,
}

impl Site {
    /// The file at URL path `path`.
    pub fn file(&self, path: &str) -> Option<&SiteFile> {
        self.files.iter().find(|file| file.path == path)
    }

    /// The files a load of `page` fetches (page-busy: its own and the article's).
    pub fn files_of(&self, page: Page) -> impl Iterator<Item = &SiteFile> {
        self.files
            .iter()
            .filter(move |file| page.directories().iter().any(|d| file.path.starts_with(d)))
    }
}

/// Writes every page's files into `dir` (created if needed; existing files are
/// overwritten with the same bytes) and returns the manifest.
pub fn generate_site(dir: &Path) -> io::Result<Site> {
    make_dir(dir)?;
    let mut files = Vec::new();
    // One page's bytes in memory at a time (page-busy's are 20 MiB).
    let pages: [fn() -> io::Result<Vec<GeneratedFile>>; Page::ALL.len()] =
        [article_files, app_files, busy_files, demo_files];
    for page_files in pages {
        for (path, bytes) in page_files()? {
            files.push(write_file(dir, &path, &bytes)?);
        }
    }
    Ok(Site {
        dir: dir.to_owned(),
        files,
    })
}

/// A URL path and the file's bytes.
type GeneratedFile = (String, Vec<u8>);

fn article_files() -> io::Result<Vec<GeneratedFile>> {
    let mut files = vec![
        text_file(html::ARTICLE_ENTRY, html::article_document()),
        text_file(html::ARTICLE_CSS, html::article_stylesheet()),
        (
            html::ARTICLE_FONT.to_owned(),
            font_bytes(html::ARTICLE_FONT),
        ),
        image_file(html::ARTICLE_HERO, HERO_SIZE)?,
    ];
    for path in html::figure_paths() {
        files.push(image_file(&path, FIGURE_SIZE)?);
    }
    for (path, script) in html::article_scripts() {
        files.push(text_file(path, script));
    }
    files.push((
        html::ARTICLE_VIDEO.to_owned(),
        opaque_bytes(html::ARTICLE_VIDEO, VIDEO_LEN),
    ));
    Ok(files)
}

fn app_files() -> io::Result<Vec<GeneratedFile>> {
    let mut files = vec![
        text_file(html::APP_ENTRY, html::app_document()),
        text_file(html::APP_SCRIPT, html::app_script()),
    ];
    for path in html::app_image_paths() {
        files.push(image_file(&path, APP_IMAGE_SIZE)?);
    }
    for (n, path) in html::api_paths().into_iter().enumerate() {
        let answer = api_answer(&mut Prng::seeded(&path), n + 1, API_ANSWER_LEN);
        files.push(text_file(&path, answer));
    }
    Ok(files)
}

fn busy_files() -> io::Result<Vec<GeneratedFile>> {
    Ok(vec![
        text_file(html::BUSY_ENTRY, html::busy_document()),
        (
            html::BUSY_DOWNLOAD.to_owned(),
            opaque_bytes(html::BUSY_DOWNLOAD, BUSY_DOWNLOAD_LEN),
        ),
    ])
}

fn demo_files() -> io::Result<Vec<GeneratedFile>> {
    let mut files = vec![text_file(html::DEMO_ENTRY, html::demo_document())];
    for path in html::DEMO_BULK {
        files.push((path.to_owned(), opaque_bytes(path, DEMO_BULK_LEN)));
    }
    let answer = api_answer_of_len(&mut Prng::seeded(html::DEMO_CRITICAL), 1, DEMO_CRITICAL_LEN);
    files.push(text_file(html::DEMO_CRITICAL, answer));
    Ok(files)
}

fn text_file(path: &str, text: String) -> GeneratedFile {
    (path.to_owned(), text.into_bytes())
}

/// A PNG of `size` with pseudo-random (incompressible) pixels seeded by `path`.
fn image_file(path: &str, (width, height): (u32, u32)) -> io::Result<GeneratedFile> {
    let pixels = Prng::seeded(path).bytes(width as usize * height as usize * png::BYTES_PER_PIXEL);
    let file = png::encode_rgb(width, height, &pixels)
        .ok_or_else(|| io::Error::other(format!("{path}: cannot encode {width}x{height}")))?;
    Ok((path.to_owned(), file))
}

/// [`FONT_LEN`] bytes that start like a WOFF2 font (see [`FONT_LEN`] for why it is not one).
fn font_bytes(path: &str) -> Vec<u8> {
    let mut bytes = WOFF2_SIGNATURE.to_vec();
    bytes.extend(Prng::seeded(path).bytes(FONT_LEN - WOFF2_SIGNATURE.len()));
    bytes
}

/// `len` pseudo-random bytes seeded by `path`.
fn opaque_bytes(path: &str, len: usize) -> Vec<u8> {
    Prng::seeded(path).bytes(len)
}

/// Mode of the site's directories and files: readable (and directories searchable) by all.
const DIR_MODE: u32 = 0o755;
const FILE_MODE: u32 = 0o644;

/// Writes `bytes` at URL path `path` under `root`, with its directories, and describes it.
fn write_file(root: &Path, path: &str, bytes: &[u8]) -> io::Result<SiteFile> {
    let relative = Path::new(path.trim_start_matches('/'));
    let file = root.join(relative);
    let mut dir = root.to_owned();
    for part in relative.parent().into_iter().flat_map(Path::components) {
        dir.push(part);
        make_dir(&dir)?;
    }
    fs::write(&file, bytes).map_err(|e| context(e, &file))?;
    fs::set_permissions(&file, fs::Permissions::from_mode(FILE_MODE))
        .map_err(|e| context(e, &file))?;
    Ok(SiteFile {
        path: path.to_owned(),
        len: bytes.len() as u64,
        sha256: hex(&Sha256::digest(bytes)),
    })
}

/// Creates `dir` if needed and gives it [`DIR_MODE`] whatever the umask.
fn make_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir).map_err(|e| context(e, dir))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE)).map_err(|e| context(e, dir))
}

fn context(error: io::Error, path: &Path) -> io::Error {
    io::Error::new(error.kind(), format!("{}: {error}", path.display()))
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary directory, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let dir = std::env::temp_dir().join(format!("pages-site-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// The sizes the lab's page descriptions state, per URL path (documents: their own
    /// markup, without the inlined instrumentation).
    fn stated_len(path: &str) -> usize {
        match path {
            "/article/index.html" => 30 * KIB,
            "/article/style.css" => 40 * KIB,
            "/article/font.woff2" => 60 * KIB,
            "/article/hero.png" => 200 * KIB,
            "/article/video.mp4" => 4 * MIB,
            "/app/index.html" => 5 * KIB,
            "/app/app.js" => 1536 * KIB,
            "/busy/big.bin" => 20 * MIB,
            p if p.starts_with("/article/img/") => 100 * KIB,
            p if p.starts_with("/article/") && p.ends_with(".js") => 300 * KIB,
            p if p.starts_with("/app/img/") => 2 * MIB,
            p if p.starts_with("/app/api/") => 2 * KIB,
            "/demo/bg-one.bin" | "/demo/bg-two.bin" => MIB,
            "/demo/critical.json" => 4 * KIB,
            // The busy and demo pages' documents: small, no stated size.
            "/busy/index.html" | "/demo/index.html" => 0,
            other => panic!("unexpected file {other}"),
        }
    }

    #[test]
    fn site_is_deterministic_and_sized_as_stated() {
        let (one, two) = (TempDir::new("one"), TempDir::new("two"));
        let first = generate_site(&one.0).unwrap();
        let second = generate_site(&two.0).unwrap();
        assert_eq!(first.files, second.files, "two generations differ");

        for file in &first.files {
            let stated = stated_len(&file.path);
            let on_disk = fs::metadata(one.0.join(&file.path[1..])).unwrap();
            assert_eq!(on_disk.len(), file.len, "{}", file.path);
            assert_eq!(
                on_disk.permissions().mode() & 0o777,
                FILE_MODE,
                "{}",
                file.path
            );
            if stated > 0 {
                let own = match file.path.ends_with(".html") {
                    true => file.len - html::instrument_len() as u64,
                    false => file.len,
                };
                let off = (own as f64 / stated as f64 - 1.0).abs();
                assert!(
                    off <= 0.05,
                    "{}: {} bytes, stated {stated}",
                    file.path,
                    file.len
                );
            }
            let extension = file.path.rsplit_once('.').unwrap().1;
            assert!(
                crate::peers::SITE_CONTENT_TYPES
                    .iter()
                    .any(|(e, _)| *e == extension),
                "{}",
                file.path
            );
        }
        let mode = fs::metadata(one.0.join("article/img"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, DIR_MODE);
        assert_eq!(first.files_of(Page::Article).count(), 19);
        assert_eq!(first.files_of(Page::App).count(), 15);
        assert_eq!(first.files_of(Page::Busy).count(), 21);
        assert_eq!(first.files_of(Page::Demo).count(), 4);
        // page-demo's resources are exactly the example server's demo page's sizes.
        for (path, len) in [
            ("/demo/bg-one.bin", examples::responses::BG_LEN),
            ("/demo/bg-two.bin", examples::responses::BG_LEN),
            ("/demo/critical.json", examples::responses::CRITICAL_LEN),
        ] {
            assert_eq!(first.file(path).map(|f| f.len), Some(len), "{path}");
        }
    }

    #[test]
    fn pages_round_trip_their_names() {
        for page in Page::ALL {
            assert_eq!(Page::from_name(page.name()), Some(page));
            assert!(page.entry().ends_with("/index.html"));
        }
        assert_eq!(Page::from_name("page-nope"), None);
    }
}
