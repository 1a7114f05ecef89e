//! Supervisor and balancer: workers on per-worker ports, health checks, restarts, routes, selection algorithms, A/B splits.
