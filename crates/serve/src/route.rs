//! A route at run time: its rule (prefix, method, header), its arms (an A/B split by
//! weight, sticky by a key) with a request counter each, and its mirror.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use http::{HeaderMap, Method};

use crate::config::RouteConfig;
use crate::mirror::Mirror;
use crate::rng::fast_random;
use crate::sticky;

/// A route at run time: its rule and a request counter per arm.
#[derive(Debug)]
pub(crate) struct Route {
    pub(crate) cfg: RouteConfig,
    pub(crate) mirror: Option<Arc<Mirror>>,
    total_weight: u64,
    /// Shared with the route of the config before a live reload that kept this route
    /// and arm (same rule, same app): a Prometheus counter must never go down, and a
    /// request that picked its route in the old table still counts here.
    pub(crate) arm_requests: Vec<Arc<AtomicU64>>,
}

impl Route {
    pub(crate) fn new(cfg: RouteConfig) -> Result<Self, scalpel_shadow::ShadowError> {
        let mirror = match &cfg.mirror {
            Some(m) => Some(Arc::new(Mirror::new(m, &cfg.prefix)?)),
            None => None,
        };
        Ok(Self::with_mirror(cfg, mirror))
    }

    /// A route whose mirror, if any, is `mirror` (kept from before a live reload).
    pub(crate) fn with_mirror(cfg: RouteConfig, mirror: Option<Arc<Mirror>>) -> Self {
        Self {
            mirror,
            total_weight: cfg.arms.iter().map(|a| a.1).sum(),
            arm_requests: cfg.arms.iter().map(|_| Arc::default()).collect(),
            cfg,
        }
    }

    /// Takes over the counters of the route of the config before a reload with the same
    /// rule (prefix, method, header): arm by arm, where the arm goes to the same app
    /// (`app_name` of an arm's app index; `old_app_name` for `old`'s). A new arm starts
    /// at zero; the counters of an arm or route the reload removed go with it.
    pub(crate) fn carry_counters<'a>(
        &mut self,
        app_name: impl Fn(usize) -> Option<&'a str>,
        old: &Route,
        old_app_name: impl Fn(usize) -> Option<&'a str>,
    ) {
        for (i, &(app, _)) in self.cfg.arms.iter().enumerate() {
            let Some(name) = app_name(app) else {
                continue;
            };
            if let Some(ai) = old
                .cfg
                .arms
                .iter()
                .position(|&(o, _)| old_app_name(o) == Some(name))
            {
                self.arm_requests[i] = old.arm_requests[ai].clone();
            }
        }
    }

    /// Same rule: what makes a route "the same route" across a reload.
    pub(crate) fn same_rule(&self, other: &Route) -> bool {
        self.cfg.prefix == other.cfg.prefix
            && self.cfg.method == other.cfg.method
            && self.cfg.header == other.cfg.header
    }

    pub(crate) fn matches(&self, method: &Method, path: &str, headers: &HeaderMap) -> bool {
        let p = &self.cfg.prefix;
        let prefix_ok = path.starts_with(p.as_str())
            && (p.ends_with('/') || path.len() == p.len() || path.as_bytes()[p.len()] == b'/');
        prefix_ok
            && self.cfg.method.as_ref().is_none_or(|m| m == method)
            && self.cfg.header.as_ref().is_none_or(|(name, value)| {
                headers.get_all(name).iter().any(|v| {
                    value
                        .as_ref()
                        .is_none_or(|want| v.to_str().is_ok_and(|v| v.trim() == want))
                })
            })
    }

    /// Index into `cfg.arms`: by the sticky key's hash when present, else at random,
    /// in proportion to the weights.
    pub(crate) fn pick_arm(&self, src: &sticky::Source<'_>) -> usize {
        if self.cfg.arms.len() == 1 {
            return 0;
        }
        let key = self.cfg.sticky.as_ref().and_then(|k| sticky::hash(k, src));
        let roll = key.unwrap_or_else(fast_random) % self.total_weight;
        let mut acc = 0;
        for (i, &(_, w)) in self.cfg.arms.iter().enumerate() {
            acc += w;
            if roll < acc {
                return i;
            }
        }
        self.cfg.arms.len() - 1
    }
}
