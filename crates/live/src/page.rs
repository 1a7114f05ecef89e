//! The page, its assets and the snapshot reply.

use std::borrow::Cow;
use std::time::{SystemTime, UNIX_EPOCH};

use scalpel_present::{Chart, STYLE, escape_html};
use serde::Serialize;

/// Where the page polls for its [`Snapshot`] (relative to the page: `live/snapshot`).
pub const SNAPSHOT_PATH: &str = "/live/snapshot";

const INDEX: &str = include_str!("../assets/index.html");
const SCRIPT: &str = include_str!("../assets/live.js");
const LIVE_CSS: &str = include_str!("../assets/live.css");

/// How often the page asks for a snapshot.
const INTERVAL_MS: u64 = 1000;

/// Which tool's page: selects the renderer in the front-end (each reads its own documented
/// JSON, `docs/live.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// `scalpel serve`: apps, workers, routes, A/B arms, mirrors.
    Serve,
    /// `scalpel shadow proxy`: consistency per endpoint, newest differences, latencies.
    Shadow,
    /// `scalpel load --dashboard`: the run as it goes.
    Load,
}

impl Kind {
    /// The name in the page and the snapshot (`serve`, `shadow`, `load`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Serve => "serve",
            Kind::Shadow => "shadow",
            Kind::Load => "load",
        }
    }
}

/// A button in the page's header that sends a request to the tool (e.g. serve's reload).
#[derive(Debug, Clone, Serialize)]
pub struct Action {
    label: String,
    method: &'static str,
    path: String,
}

impl Action {
    /// A `POST` to `path`, relative to the page (`reload` for the tool's `/reload`). The
    /// page sends the admin token when the user gave one, and shows the answer.
    pub fn post(label: &str, path: &str) -> Action {
        Action {
            label: label.to_string(),
            method: "POST",
            path: path.trim_start_matches('/').to_string(),
        }
    }
}

/// An answer for the tool's server to send as it is: status, content type, headers, body.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Cow<'static, [u8]>,
}

impl Reply {
    /// Every header to send (the content type included): no caching of live data, no
    /// sniffing, and a content security policy that allows only this origin's own script,
    /// style and fetches (the page loads nothing from elsewhere, and must not).
    pub fn headers(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            ("content-type", self.content_type),
            ("cache-control", "no-store"),
            ("x-content-type-options", "nosniff"),
            (
                "content-security-policy",
                "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            ),
        ]
    }

    fn new(content_type: &'static str, body: Cow<'static, [u8]>) -> Reply {
        Reply {
            status: 200,
            content_type,
            body,
        }
    }
}

/// What a tool hands the page on each poll: its own JSON and the charts to draw.
#[derive(Debug, Clone)]
pub struct Snapshot {
    data: serde_json::Value,
    charts: Vec<(String, Chart)>,
}

impl Snapshot {
    /// A snapshot of `data` (the tool's documented JSON; a value that fails to serialize
    /// becomes `null`).
    pub fn new(data: impl Serialize) -> Snapshot {
        Snapshot {
            data: serde_json::to_value(data).unwrap_or(serde_json::Value::Null),
            charts: Vec::new(),
        }
    }

    /// Adds a chart, shown in the order added; `id` keeps its place on the page.
    pub fn chart(mut self, id: &str, chart: Chart) -> Snapshot {
        self.charts.push((id.to_string(), chart));
        self
    }

    /// Adds a chart in place.
    pub fn push_chart(&mut self, id: &str, chart: Chart) {
        self.charts.push((id.to_string(), chart));
    }
}

/// One tool's live page.
#[derive(Debug, Clone)]
pub struct Page {
    kind: Kind,
    title: String,
    actions: Vec<Action>,
    html: String,
}

impl Page {
    /// The page of `kind`, titled `title`.
    pub fn new(kind: Kind, title: &str) -> Page {
        let mut page = Page {
            kind,
            title: title.to_string(),
            actions: Vec::new(),
            html: String::new(),
        };
        page.html = page.render();
        page
    }

    /// Adds a button to the header.
    pub fn with_action(mut self, action: Action) -> Page {
        self.actions.push(action);
        self.html = self.render();
        self
    }

    fn render(&self) -> String {
        let actions = serde_json::to_string(&self.actions).unwrap_or_else(|_| "[]".into());
        INDEX
            .replace("{{TITLE}}", &escape_html(&self.title))
            .replace("{{KIND}}", self.kind.name())
            .replace("{{ACTIONS}}", &escape_html(&actions))
    }

    /// The answer to `method path` if it is one of the page's own resources: `/` (or
    /// `/index.html`), `/live/live.css`, `/live/live.js`; `None` for anything else.
    /// `HEAD` gets the same answer (the server drops the body).
    pub fn asset(&self, method: &str, path: &str) -> Option<Reply> {
        if method != "GET" && method != "HEAD" {
            return None;
        }
        Some(match path {
            "/" | "/index.html" => Reply::new(
                "text/html; charset=utf-8",
                Cow::Owned(self.html.clone().into_bytes()),
            ),
            "/live/live.css" => Reply::new(
                "text/css; charset=utf-8",
                Cow::Owned(format!("{}\n{LIVE_CSS}", STYLE).into_bytes()),
            ),
            "/live/live.js" => Reply::new(
                "text/javascript; charset=utf-8",
                Cow::Borrowed(SCRIPT.as_bytes()),
            ),
            _ => return None,
        })
    }

    /// The reply to a poll of [`SNAPSHOT_PATH`]: `{"kind", "title", "at_ms", "interval_ms",
    /// "data", "charts": [{"id", "svg"}]}`.
    pub fn snapshot(&self, snapshot: &Snapshot) -> Reply {
        #[derive(Serialize)]
        struct ChartOut<'a> {
            id: &'a str,
            svg: String,
        }
        #[derive(Serialize)]
        struct Envelope<'a> {
            kind: &'static str,
            title: &'a str,
            at_ms: u64,
            interval_ms: u64,
            data: &'a serde_json::Value,
            charts: Vec<ChartOut<'a>>,
        }
        let envelope = Envelope {
            kind: self.kind.name(),
            title: &self.title,
            at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            interval_ms: INTERVAL_MS,
            data: &snapshot.data,
            charts: snapshot
                .charts
                .iter()
                .map(|(id, chart)| ChartOut {
                    id,
                    svg: chart.render(),
                })
                .collect(),
        };
        let body = serde_json::to_vec(&envelope).unwrap_or_else(|_| b"{}".to_vec());
        Reply::new("application/json", Cow::Owned(body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Line;

    #[test]
    fn the_page_embeds_its_assets_and_loads_nothing_from_elsewhere() {
        let page = Page::new(Kind::Shadow, "shadow <proxy>")
            .with_action(Action::post("Reload \"all\"", "/reload"))
            .with_action(Action::post("Second", "x"));
        let html = String::from_utf8(page.asset("GET", "/").unwrap().body.into_owned()).unwrap();
        assert!(html.contains("<title>shadow &lt;proxy&gt;</title>"));
        assert!(html.contains(r#"data-kind="shadow""#));
        assert_eq!(page.actions.len(), 2);
        assert_eq!(page.actions[0].path, "reload");
        assert!(html.contains("Reload \\&quot;all\\&quot;"), "{html}");
        for asset in ["/", "/live/live.css", "/live/live.js"] {
            let reply = page.asset("GET", asset).expect(asset);
            let text = String::from_utf8(reply.body.into_owned()).unwrap();
            // No absolute URL to anywhere: every resource is this origin's own.
            for needle in ["http://", "https://", "//cdn", "@import"] {
                assert!(!text.contains(needle), "{asset} contains {needle}");
            }
        }
        assert!(page.asset("POST", "/").is_none());
        assert!(page.asset("GET", "/status").is_none());
        assert!(page.asset("GET", "/live/../etc/passwd").is_none());
    }

    #[test]
    fn a_snapshot_reply_carries_the_data_and_each_chart_as_svg() {
        let page = Page::new(Kind::Load, "load");
        let snap = Snapshot::new(serde_json::json!({"state": "running"})).chart(
            "rate",
            Chart {
                title: "rate".into(),
                lines: vec![Line {
                    name: "a".into(),
                    points: vec![(0.0, 1.0), (1.0, 2.0)],
                    ..Line::default()
                }],
                ..Chart::default()
            },
        );
        let reply = page.snapshot(&snap);
        let v: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(v["kind"], "load");
        assert_eq!(v["data"]["state"], "running");
        assert!(v["interval_ms"].as_u64().unwrap() <= 1000);
        assert_eq!(v["charts"][0]["id"], "rate");
        let svg = v["charts"][0]["svg"].as_str().unwrap();
        roxmltree::Document::parse(svg).expect("the chart is well-formed SVG");
        assert!(
            reply
                .headers()
                .iter()
                .any(|(k, v)| *k == "cache-control" && *v == "no-store")
        );
    }
}
