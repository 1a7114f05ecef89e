//! `[[route]]`: the rule (prefix, method, header), the target (one app, or a `split`
//! of weighted arms with an optional `sticky` key) and the `mirror` with its keys.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use toml::Spanned;

use super::app::AppConfig;
use super::error::{ConfigError, Fail};
use super::raw::{Mode, RawArm, RawRoute};
use crate::sticky::{self, StickyKey};

#[derive(Debug, Clone)]
pub(crate) struct RouteConfig {
    pub(crate) prefix: String,
    pub(crate) method: Option<http::Method>,
    pub(crate) header: Option<(http::HeaderName, Option<String>)>,
    /// (app index, weight); one arm for a plain route.
    pub(crate) arms: Vec<(usize, u64)>,
    pub(crate) sticky: Option<StickyKey>,
    pub(crate) mirror: Option<MirrorConfig>,
}

/// Copy a sample of a route's requests to another app and compare its answers with
/// the served ones (the `scalpel shadow` engine).
#[derive(Debug, Clone)]
pub(crate) struct MirrorConfig {
    pub(crate) app_name: Arc<str>,
    /// Everything that makes this mirror what it is, as text: a live reload keeps a
    /// mirror (its comparisons and store) only when this is unchanged.
    pub(crate) key: String,
    pub(crate) percent: f64,
    /// Mirror methods other than GET, HEAD and OPTIONS (they may change state twice).
    pub(crate) unsafe_methods: bool,
    pub(crate) comparer: scalpel_diff::Comparer,
    /// The SQLite store of counters and samples (`scalpel shadow report --store`), if any.
    pub(crate) store: Option<PathBuf>,
}

/// Every `[[route]]`, naming the apps of `apps`.
pub(super) fn routes(
    raw: &[Spanned<RawRoute>],
    apps: &[Arc<AppConfig>],
    fail: &Fail,
    base_dir: &Path,
) -> Result<Vec<RouteConfig>, ConfigError> {
    let mut routes = Vec::new();
    for spanned in raw {
        routes.push(route(spanned, apps, fail, base_dir)?);
    }
    Ok(routes)
}

fn route(
    spanned: &Spanned<RawRoute>,
    apps: &[Arc<AppConfig>],
    fail: &Fail,
    base_dir: &Path,
) -> Result<RouteConfig, ConfigError> {
    let r = spanned.get_ref();
    if !r.prefix.get_ref().starts_with('/') {
        return Err(fail.at(
            Some(r.prefix.span()),
            format!("route prefix `{}` must start with `/`", r.prefix.get_ref()),
        ));
    }
    let method = match &r.method {
        Some(m) => Some(
            http::Method::from_bytes(m.get_ref().to_ascii_uppercase().as_bytes())
                .map_err(|_| fail.at(Some(m.span()), format!("bad method `{}`", m.get_ref())))?,
        ),
        None => None,
    };
    let header = match &r.header {
        Some(h) => {
            let name = http::HeaderName::from_bytes(h.get_ref().name.as_bytes()).map_err(|_| {
                fail.at(
                    Some(h.span()),
                    format!("bad header name `{}`", h.get_ref().name),
                )
            })?;
            Some((name, h.get_ref().value.clone()))
        }
        None => None,
    };
    let arms = arms(spanned, apps, fail)?;
    let sticky = match &r.sticky {
        Some(s) => Some(sticky::parse(s.get_ref()).ok_or_else(|| {
            fail.at(
                Some(s.span()),
                format!(
                    "bad sticky key `{}`: expected {}",
                    s.get_ref(),
                    sticky::GRAMMAR
                ),
            )
        })?),
        None => None,
    };
    let mirror = mirror(spanned, &arms, apps, fail, base_dir)?;
    Ok(RouteConfig {
        prefix: r.prefix.get_ref().clone(),
        method,
        header,
        arms,
        sticky,
        mirror,
    })
}

/// The app a route names, by index: a known app, and one the balancer reaches (not
/// direct).
fn app_ref(
    s: &Spanned<String>,
    apps: &[Arc<AppConfig>],
    fail: &Fail,
) -> Result<usize, ConfigError> {
    let idx = apps
        .iter()
        .position(|a| &*a.name == s.get_ref().as_str())
        .ok_or_else(|| {
            fail.at(
                Some(s.span()),
                format!("route names unknown app `{}`", s.get_ref()),
            )
        })?;
    if apps[idx].mode == Mode::Direct {
        return Err(fail.at(
            Some(s.span()),
            format!(
                "route names app `{}`, which is mode = \"direct\": its clients connect to its own listen address and never pass the balancer, so no route, split (A/B) or mirror can reach it",
                s.get_ref()
            ),
        ));
    }
    Ok(idx)
}

/// `app`, or a non-empty `split` of arms with positive weights: (app index, weight).
fn arms(
    spanned: &Spanned<RawRoute>,
    apps: &[Arc<AppConfig>],
    fail: &Fail,
) -> Result<Vec<(usize, u64)>, ConfigError> {
    let r = spanned.get_ref();
    match (&r.app, &r.split) {
        (Some(app), None) => Ok(vec![(app_ref(app, apps, fail)?, 1)]),
        (None, Some(split)) if !split.is_empty() => split_arms(split, apps, fail),
        _ => Err(fail.at(
            Some(spanned.span()),
            "a route needs exactly one of `app` or a non-empty `split`".into(),
        )),
    }
}

fn split_arms(
    split: &[Spanned<RawArm>],
    apps: &[Arc<AppConfig>],
    fail: &Fail,
) -> Result<Vec<(usize, u64)>, ConfigError> {
    let mut arms = Vec::new();
    let mut total: u64 = 0;
    for arm in split {
        let idx = app_ref(&arm.get_ref().app, apps, fail)?;
        let w = *arm.get_ref().weight.get_ref();
        if w <= 0 {
            return Err(fail.at(
                Some(arm.get_ref().weight.span()),
                format!("split weight must be positive, not {w}"),
            ));
        }
        total = total.checked_add(w as u64).ok_or_else(|| {
            fail.at(
                Some(arm.get_ref().weight.span()),
                "split weights add up to more than 2^64: use smaller numbers (only their ratio matters)".into(),
            )
        })?;
        arms.push((idx, w as u64));
    }
    Ok(arms)
}

/// `mirror` with `mirror_percent`, `mirror_unsafe`, `mirror_ignore` and `mirror_store`
/// (none of which may stand without it).
fn mirror(
    spanned: &Spanned<RawRoute>,
    arms: &[(usize, u64)],
    apps: &[Arc<AppConfig>],
    fail: &Fail,
    base_dir: &Path,
) -> Result<Option<MirrorConfig>, ConfigError> {
    let r = spanned.get_ref();
    if let Some(p) = &r.mirror_percent {
        let pct = *p.get_ref();
        if !(pct > 0.0 && pct <= 100.0) {
            return Err(fail.at(
                Some(p.span()),
                format!("mirror_percent must be in (0, 100], not {pct}"),
            ));
        }
    }
    let Some(m) = &r.mirror else {
        let stray = [
            (
                "mirror_ignore",
                (!r.mirror_ignore.get_ref().is_empty()).then(|| r.mirror_ignore.span()),
            ),
            ("mirror_store", r.mirror_store.as_ref().map(|p| p.span())),
            (
                "mirror_percent",
                r.mirror_percent.as_ref().map(|p| p.span()),
            ),
            ("mirror_unsafe", r.mirror_unsafe.then(|| spanned.span())),
        ];
        if let Some((key, span)) = stray.into_iter().find_map(|(k, s)| s.map(|s| (k, s))) {
            return Err(fail.at(Some(span), format!("{key} without mirror")));
        }
        return Ok(None);
    };
    let idx = app_ref(m, apps, fail)?;
    let pct = r.mirror_percent.as_ref().map_or(100.0, |p| *p.get_ref());
    if arms.iter().any(|&(a, _)| a == idx) {
        return Err(fail.at(
            Some(m.span()),
            format!("mirror app `{}` is also an arm of the route", m.get_ref()),
        ));
    }
    let mut comparer = scalpel_diff::Comparer::new();
    for pattern in r.mirror_ignore.get_ref() {
        comparer = comparer
            .ignore(pattern)
            .map_err(|e| fail.at(Some(r.mirror_ignore.span()), format!("mirror_ignore: {e}")))?;
    }
    let store = r.mirror_store.as_ref().map(|p| base_dir.join(p.get_ref()));
    Ok(Some(MirrorConfig {
        app_name: m.get_ref().as_str().into(),
        key: format!(
            "{} -> {} {pct}% unsafe={} store={store:?} ignore={:?}",
            r.prefix.get_ref(),
            m.get_ref(),
            r.mirror_unsafe,
            r.mirror_ignore.get_ref()
        ),
        percent: pct,
        unsafe_methods: r.mirror_unsafe,
        comparer,
        store,
    }))
}
