use super::*;
use std::net::IpAddr;

const MINIMAL: &str = r#"[server]
listen = "127.0.0.1:8080"
admin = "127.0.0.1:9090"

[[app]]
name = "web"
command = ["node", "app.js"]
workers = 2
port_base = 3001

[app.health]
path = "/healthz"
"#;

fn reject(text: &str) -> ConfigError {
    match Config::parse(text, Path::new("/etc/scalpel/serve.toml")) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => e,
    }
}

/// Asserts the error's line and that its reason contains `needle`, showing both.
#[track_caller]
fn assert_rejected(text: &str, line: Option<usize>, needle: &str) {
    let e = reject(text);
    assert!(
        e.line() == line && e.reason().contains(needle),
        "\nexpected line {line:?}, reason containing {needle:?}\n     got line {:?}, reason {:?}",
        e.line(),
        e.reason()
    );
    assert!(e.to_string().starts_with("/etc/scalpel/serve.toml"), "{e}");
}

#[test]
fn the_minimal_config_of_the_issue_works_with_defaults() {
    let c = Config::parse(MINIMAL, Path::new("/srv/serve.toml")).unwrap();
    assert_eq!(c.listen(), "127.0.0.1:8080".parse().unwrap());
    assert_eq!(c.admin(), Some("127.0.0.1:9090".parse().unwrap()));
    let app = &c.apps[0];
    assert_eq!(&*app.name, "web");
    assert_eq!(app.workers, 2);
    assert_eq!(app.ports(0), [3001, 3003]);
    assert_eq!(app.ports(1), [3002, 3004]);
    assert_eq!(app.balance, Balance::LeastConn);
    assert_eq!(app.port_env, "PORT");
    assert_eq!(app.index_env, "WORKER_INDEX");
    assert_eq!(app.health, HealthKind::Http("/healthz".into()));
    assert!(app.preload, "a node command gets the preload");
    // Blocked worker detected within 3 s: 3 failures × (500 ms interval + 500 ms time-out) at worst.
    assert_eq!(app.health_interval, Duration::from_millis(500));
    assert_eq!(app.health_timeout, Duration::from_millis(500));
    assert_eq!(app.health_failures, 3);
    assert!(c.routes.is_empty());
    assert_eq!(c.server.max_body_bytes, 8 << 20);
}

#[test]
fn cwd_is_relative_to_the_config_file() {
    let text = MINIMAL.replace("workers = 2", "workers = 2\ncwd = \"app\"");
    let c = Config::parse(&text, Path::new("/srv/conf/serve.toml")).unwrap();
    assert_eq!(c.apps[0].cwd.as_deref(), Some(Path::new("/srv/conf/app")));
}

#[test]
fn toml_syntax_error_names_its_line() {
    let text = MINIMAL.replace("workers = 2", "workers = = 2");
    assert_rejected(&text, Some(8), "");
}

#[test]
fn unknown_keys_are_rejected_with_their_line() {
    let text = MINIMAL.replace("workers = 2", "workers = 2\nworkrs = 3");
    assert_rejected(&text, Some(9), "unknown field `workrs`");
    let text = MINIMAL.replace("admin = ", "listn = \"x\"\nadmin = ");
    assert_rejected(&text, Some(3), "unknown field `listn`");
    let text = MINIMAL.replace("path = \"/healthz\"", "path = \"/healthz\"\nintervall = 5");
    assert_rejected(&text, Some(13), "unknown field `intervall`");
}

#[test]
fn duplicate_app_names_are_rejected() {
    let text = format!("{MINIMAL}\n[[app]]\nname = \"web\"\ncommand = [\"x\"]\nport_base = 4000\n");
    assert_rejected(&text, Some(15), "duplicate app name `web`");
}

#[test]
fn overlapping_ports_are_rejected() {
    // web uses 3001..=3004 (two ports per worker).
    let text = format!("{MINIMAL}\n[[app]]\nname = \"api\"\ncommand = [\"x\"]\nport_base = 3004\n");
    assert_rejected(&text, Some(17), "overlap app `web`");
    let text = MINIMAL.replace("listen = \"127.0.0.1:8080\"", "listen = \"127.0.0.1:3002\"");
    assert_rejected(&text, Some(9), "include the listen port 3002");
    let text = MINIMAL.replace("port_base = 3001", "port_base = 65534");
    assert_rejected(&text, Some(9), "must lie in 1..=65535");
}

#[test]
fn workers_must_be_positive() {
    let text = MINIMAL.replace("workers = 2", "workers = 0");
    assert_rejected(&text, Some(8), "workers must be between 1 and 1024, not 0");
}

#[test]
fn routes_must_name_known_apps() {
    let text = format!("{MINIMAL}\n[[route]]\nprefix = \"/api\"\napp = \"api\"\n");
    assert_rejected(&text, Some(16), "unknown app `api`");
    let text = format!(
        "{MINIMAL}\n[[route]]\nsplit = [{{ app = \"web\", weight = 1 }}, {{ app = \"nope\", weight = 1 }}]\n"
    );
    assert_rejected(&text, Some(15), "unknown app `nope`");
}

#[test]
fn split_weights_must_be_positive() {
    let text = format!(
        "{MINIMAL}\n[[app]]\nname = \"b\"\ncommand = [\"x\"]\nport_base = 5000\n\n[[route]]\nsplit = [\n  {{ app = \"web\", weight = 5 }},\n  {{ app = \"b\", weight = 0 }},\n]\n"
    );
    assert_rejected(&text, Some(22), "split weight must be positive, not 0");
    let text = text.replace("weight = 0", "weight = -2");
    assert_rejected(&text, Some(22), "not -2");
}

#[test]
fn a_route_needs_exactly_one_target() {
    let text = format!("{MINIMAL}\n[[route]]\nprefix = \"/x\"\n");
    assert_rejected(
        &text,
        Some(14),
        "exactly one of `app` or a non-empty `split`",
    );
    let text = format!("{MINIMAL}\n[[route]]\nprefix = \"x\"\napp = \"web\"\n");
    assert_rejected(&text, Some(15), "must start with `/`");
}

#[test]
fn sticky_keys_and_mirrors_are_checked() {
    let text = format!("{MINIMAL}\n[[route]]\napp = \"web\"\nsticky = \"query:id\"\n");
    assert_rejected(&text, Some(16), "bad sticky key `query:id`");
    let text = format!("{MINIMAL}\n[[route]]\napp = \"web\"\nmirror = \"web\"\n");
    assert_rejected(&text, Some(16), "also an arm");
    let text = format!("{MINIMAL}\n[[route]]\napp = \"web\"\nmirror_store = \"x.db\"\n");
    assert_rejected(&text, Some(16), "mirror_store without mirror");
}

#[test]
fn addresses_are_checked() {
    let text = MINIMAL.replace("127.0.0.1:8080", "localhost:http");
    assert_rejected(
        &text,
        Some(2),
        "listen: `localhost:http` is not an IP address and port",
    );
    // A host name is refused saying why, not with the parser's "invalid socket address".
    let text = MINIMAL.replace("127.0.0.1:9090", "localhost:9090");
    assert_rejected(
        &text,
        Some(3),
        "admin: `localhost:9090` is not an IP address and port, e.g. 127.0.0.1:8080 (host names are not resolved)",
    );
    let text = MINIMAL.replace("listen = \"127.0.0.1:8080\"\n", "");
    assert_rejected(&text, Some(1), "missing field `listen`");
    // A public admin address needs a token (from the file or SCALPEL_ADMIN_TOKEN).
    if std::env::var(ADMIN_TOKEN_ENV).is_err() {
        let text = MINIMAL.replace("127.0.0.1:9090", "0.0.0.0:9090");
        assert_rejected(&text, Some(3), "is not loopback");
        let text = text.replace(
            "[server]\n",
            "[server]\nadmin_token = \"0123456789abcdef\"\n",
        );
        assert!(Config::parse(&text, Path::new("x.toml")).is_ok());
    }
}

#[test]
fn no_app_is_an_error_and_a_bad_balance_names_its_line() {
    assert_rejected(
        "[server]\nlisten = \"127.0.0.1:1\"\n",
        None,
        "at least one app",
    );
    let text = MINIMAL.replace("workers = 2", "workers = 2\nbalance = \"random\"");
    assert_rejected(&text, Some(9), "unknown variant `random`");
}

#[test]
fn data_plane_threads_default_to_the_cores_and_are_bounded() {
    let c = Config::parse(MINIMAL, Path::new("x.toml")).unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(c.server.threads, cores);
    let text = MINIMAL.replace("[server]\n", "[server]\nthreads = 1\n");
    assert_eq!(
        Config::parse(&text, Path::new("x.toml"))
            .unwrap()
            .server
            .threads,
        1
    );
    let text = MINIMAL.replace("[server]\n", "[server]\nthreads = 0\n");
    assert_rejected(&text, Some(2), "threads must be between 1 and 256");
}

/// `--check` must refuse what would fail at start (issue 18, item 18).
#[test]
fn configs_that_cannot_start_are_refused() {
    // listen equal to admin, also through the unspecified address.
    let text = MINIMAL.replace("127.0.0.1:9090", "127.0.0.1:8080");
    assert_rejected(&text, Some(3), "is the listen address");
    let text = MINIMAL
        .replace("127.0.0.1:9090", "0.0.0.0:8080")
        .replace("[server]\n", "[server]\nadmin_token = \"t\"\n");
    assert_rejected(&text, Some(4), "is the listen address");
    // An empty or impossible port_env / index_env.
    let text = MINIMAL.replace("workers = 2", "workers = 2\nport_env = \"\"");
    assert_rejected(
        &text,
        Some(9),
        "port_env must be an environment variable name",
    );
    let text = MINIMAL.replace("workers = 2", "workers = 2\nindex_env = \"A=B\"");
    assert_rejected(
        &text,
        Some(9),
        "index_env must be an environment variable name",
    );
    // mirror_percent over 100, or without a mirror.
    let two = format!("{MINIMAL}\n[[app]]\nname = \"m\"\ncommand = [\"x\"]\nport_base = 5000\n");
    let text = format!("{two}\n[[route]]\napp = \"web\"\nmirror = \"m\"\nmirror_percent = 150\n");
    assert_rejected(
        &text,
        Some(22),
        "mirror_percent must be in (0, 100], not 150",
    );
    let text = format!("{two}\n[[route]]\napp = \"web\"\nmirror_percent = 150\n");
    assert_rejected(
        &text,
        Some(21),
        "mirror_percent must be in (0, 100], not 150",
    );
    let text = format!("{two}\n[[route]]\napp = \"web\"\nmirror_percent = 50\n");
    assert_rejected(&text, Some(21), "mirror_percent without mirror");
    let text = format!("{two}\n[[route]]\napp = \"web\"\nmirror_unsafe = true\n");
    assert_rejected(&text, Some(19), "mirror_unsafe without mirror");
    // Split weights whose sum does not fit: once it wrapped, and every request went to
    // the first arm.
    let big = i64::MAX;
    let text = format!(
        "{two}\n[[route]]\nsplit = [{{ app = \"web\", weight = {big} }}, {{ app = \"m\", weight = {big} }}, {{ app = \"m\", weight = {big} }}]\n"
    );
    assert_rejected(&text, Some(20), "split weights add up to more than 2^64");
}

#[test]
fn a_duplicated_key_is_named() {
    let text = MINIMAL.replace("workers = 2", "workers = 2\nworkers = 3");
    assert_rejected(&text, Some(9), "duplicate key `workers`");
}

/// Durations and sizes in the units grammar, next to the older `_ms` keys.
#[test]
fn durations_and_sizes_take_units_and_the_old_keys_still_work() {
    let text = MINIMAL.replace(
        "[server]\n",
        "[server]\nupstream_timeout = \"1.5s\"\nbody_read_timeout = \"250ms\"\nmax_body_bytes = \"1MiB\"\nmax_header_bytes = \"32KiB\"\ndrain_timeout_ms = 7000\n",
    );
    let c = Config::parse(&text, Path::new("x.toml")).unwrap();
    assert_eq!(c.server.upstream_timeout, Duration::from_millis(1500));
    assert_eq!(c.server.body_read_timeout, Duration::from_millis(250));
    assert_eq!(c.server.drain_timeout, Duration::from_secs(7));
    assert_eq!(c.server.max_body_bytes, 1 << 20);
    assert_eq!(c.server.max_header_bytes, 32 << 10);
    let text = MINIMAL.replace(
        "path = \"/healthz\"",
        "path = \"/healthz\"\ninterval = \"2s\"\ntimeout_ms = 700",
    );
    let c = Config::parse(&text, Path::new("x.toml")).unwrap();
    assert_eq!(c.apps[0].health_interval, Duration::from_secs(2));
    assert_eq!(c.apps[0].health_timeout, Duration::from_millis(700));
    let text = MINIMAL.replace(
        "[server]\n",
        "[server]\nupstream_timeout = \"1s\"\nupstream_timeout_ms = 5\n",
    );
    assert_rejected(
        &text,
        Some(2),
        "set either `upstream_timeout` or `upstream_timeout_ms`, not both",
    );
    let text = MINIMAL.replace("[server]\n", "[server]\nupstream_timeout = \"30\"\n");
    assert_rejected(&text, Some(2), "bad duration `30`");
    let text = MINIMAL.replace("[server]\n", "[server]\nmax_body_bytes = \"lots\"\n");
    assert_rejected(&text, Some(2), "bad size `lots`");
}

#[test]
fn trusted_proxies_are_address_ranges() {
    let text = MINIMAL.replace(
        "[server]\n",
        "[server]\ntrusted_proxies = [\"127.0.0.1/32\", \"10.0.0.0/8\", \"::1\"]\n",
    );
    let c = Config::parse(&text, Path::new("x.toml")).unwrap();
    let t = &c.server.trusted_proxies;
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert!(t.iter().any(|n| n.contains(ip("127.0.0.1"))));
    assert!(t.iter().any(|n| n.contains(ip("10.200.3.4"))));
    assert!(
        t.iter().any(|n| n.contains(ip("::ffff:10.0.0.1"))),
        "v4-mapped peer"
    );
    assert!(t.iter().any(|n| n.contains(ip("::1"))));
    assert!(!t.iter().any(|n| n.contains(ip("127.0.0.2"))));
    assert!(!t.iter().any(|n| n.contains(ip("11.0.0.1"))));
    assert!(IpNet::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
    for bad in ["10.0.0.0/33", "example.com", "10.0.0.0/", "1.2.3.4/x"] {
        let text = MINIMAL.replace(
            "[server]\n",
            &format!("[server]\ntrusted_proxies = [\"{bad}\"]\n"),
        );
        assert_rejected(&text, Some(2), "is not an address or range");
    }
    // None by default: every client's forwarding headers are replaced.
    assert!(
        Config::parse(MINIMAL, Path::new("x.toml"))
            .unwrap()
            .server
            .trusted_proxies
            .is_empty()
    );
}

/// What only the file system can tell: the cwd and the program (found on PATH or
/// relative to the cwd), with the line to fix.
#[test]
fn check_programs_names_a_missing_cwd_or_program() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    let good = MINIMAL.replace("[\"node\", \"app.js\"]", "[\"sh\", \"app.js\"]");
    Config::parse(&good, &path)
        .unwrap()
        .check_programs()
        .unwrap();
    let text = good.replace("workers = 2", "workers = 2\ncwd = \"nowhere\"");
    let e = Config::parse(&text, &path)
        .unwrap()
        .check_programs()
        .unwrap_err();
    assert_eq!(e.line(), Some(9));
    assert!(
        e.reason().contains("cwd")
            && e.reason().contains("nowhere")
            && e.reason().contains("not a directory"),
        "{e}"
    );
    let text = good.replace("[\"sh\", \"app.js\"]", "[\"no-such-program-scalpel\"]");
    let e = Config::parse(&text, &path)
        .unwrap()
        .check_programs()
        .unwrap_err();
    assert_eq!(e.line(), Some(7));
    assert!(
        e.reason()
            .contains("`no-such-program-scalpel` not found on PATH"),
        "{e}"
    );
    // A relative path counts from the cwd.
    std::fs::create_dir(dir.path().join("bin")).unwrap();
    let text = good
        .replace("[\"sh\", \"app.js\"]", "[\"./run.sh\"]")
        .replace("workers = 2", "workers = 2\ncwd = \"bin\"");
    let e = Config::parse(&text, &path)
        .unwrap()
        .check_programs()
        .unwrap_err();
    assert!(
        e.reason().contains("`./run.sh` is not an executable file"),
        "{e}"
    );
    let script = dir.path().join("bin/run.sh");
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    Config::parse(&text, &path)
        .unwrap()
        .check_programs()
        .unwrap();
}

/// Issue 14 — what a live reload applies and what it refuses, named.
#[test]
fn a_live_reload_refuses_what_cannot_change_while_running() {
    let parse = |t: &str| Config::parse(t, Path::new("/srv/serve.toml")).unwrap();
    let old = parse(MINIMAL);
    // Workers, command, environment, health, limits and routes change live.
    let live = MINIMAL
        .replace(
            "workers = 2",
            "workers = 4\nmax_memory_mb = 512\nenv = { A = \"1\" }",
        )
        .replace("app.js", "app2.js")
        + "\n[[route]]\nprefix = \"/\"\napp = \"web\"\n";
    assert_eq!(old.not_live(&parse(&live)), None);
    // An app added beside it (its own ports) and the old one's removal are live too.
    let other = MINIMAL
        .replace("name = \"web\"", "name = \"api\"")
        .replace("3001", "4001");
    assert_eq!(old.not_live(&parse(&other)), None);

    let refused = |text: String, needle: &str| {
        let why = old.not_live(&parse(&text)).expect("refused");
        assert!(why.contains(needle), "expected {needle:?} in {why:?}");
    };
    refused(MINIMAL.replace(":8080", ":8081"), "[server] listen changed");
    // The request and connection limits and time-outs are live; what is fixed at start
    // (threads, pools, the drain time-out) is not.
    let limits = "max_body_bytes = 1024\nmax_header_bytes = 8192\nmax_connections = 5\n\
                  header_read_timeout = \"1s\"\nbody_read_timeout = \"1s\"\n\
                  upstream_timeout = \"1s\"\nwait_for_worker = \"1s\"\n\
                  retry_idempotent = false\ntunnel_idle_timeout = \"1s\"\n\
                  trusted_proxies = [\"10.0.0.0/8\"]\n\n[[app]]";
    assert_eq!(
        old.not_live(&parse(&MINIMAL.replace("[[app]]", limits))),
        None
    );
    refused(
        MINIMAL.replace("[[app]]", "threads = 1\n\n[[app]]"),
        "[server] threads changed",
    );
    refused(
        MINIMAL.replace("[[app]]", "drain_timeout = \"1s\"\n\n[[app]]"),
        "[server] drain_timeout changed",
    );
    // An app's selection algorithm is swapped live.
    assert_eq!(
        old.not_live(&parse(&MINIMAL.replace(
            "port_base = 3001",
            "port_base = 3001\nbalance = \"round_robin\"",
        ))),
        None
    );
    refused(
        MINIMAL.replace(
            "port_base = 3001",
            "port_base = 3001\nmode = \"direct\"\nlisten = \"127.0.0.1:7000\"",
        ),
        "mode changed (proxy → direct)",
    );
    // A new app on the ports the running one still holds.
    refused(
        MINIMAL.replace("name = \"web\"", "name = \"api\""),
        "overlap the ports 3001..=3004 of the running app `web`",
    );
    let mirrored = |pct: u32| {
        format!(
            "{MINIMAL}\n[[app]]\nname = \"next\"\ncommand = [\"node\", \"app.js\"]\nport_base = 5001\n\n[[route]]\nprefix = \"/\"\napp = \"web\"\nmirror = \"next\"\nmirror_percent = {pct}\n"
        )
    };
    let with_mirror = parse(&mirrored(5));
    assert_eq!(with_mirror.not_live(&parse(&mirrored(5))), None);
    let why = with_mirror
        .not_live(&parse(&mirrored(50)))
        .expect("refused");
    assert!(why.contains("mirrored routes changed"), "{why}");
}

#[test]
fn the_worker_slot_queue_is_checked() {
    let with =
        |keys: &str| MINIMAL.replace("port_base = 3001\n", &format!("port_base = 3001\n{keys}\n"));
    let c = Config::parse(&with("max_in_flight_per_worker = 1"), Path::new("/s.toml")).unwrap();
    let app = &c.apps[0];
    assert_eq!(app.max_in_flight_per_worker, 1);
    assert_eq!(app.max_queued, 1000);
    assert_eq!(app.queue_timeout, Duration::from_secs(5));
    let c = Config::parse(
        &with("max_in_flight_per_worker = 2\nmax_queued = 0\nqueue_timeout = \"250ms\""),
        Path::new("/s.toml"),
    )
    .unwrap();
    let app = &c.apps[0];
    assert_eq!(
        (
            app.max_in_flight_per_worker,
            app.max_queued,
            app.queue_timeout
        ),
        (2, 0, Duration::from_millis(250))
    );
    assert_eq!(
        Config::parse(MINIMAL, Path::new("/s.toml")).unwrap().apps[0].max_in_flight_per_worker,
        0
    );
    assert_rejected(
        &with("max_in_flight_per_worker = 0"),
        Some(10),
        "must be 1 to 1000000",
    );
    assert_rejected(
        &with("max_queued = 10"),
        Some(10),
        "max_queued is the queue of max_in_flight_per_worker",
    );
    assert_rejected(
        &with("queue_timeout = \"1s\""),
        Some(10),
        "queue_timeout is the queue of",
    );
    assert_rejected(
        &with("max_in_flight_per_worker = 1\nqueue_timeout = \"0s\""),
        Some(11),
        "queue_timeout must be positive",
    );
    assert_rejected(
        &with("max_in_flight_per_worker = 1\nsticky_worker = \"ip\""),
        Some(10),
        "sticky_worker forbids",
    );
    assert_rejected(
        &with("max_in_flight_per_worker = 1\nmode = \"direct\"\nlisten = \"127.0.0.1:8081\""),
        Some(10),
        "max_in_flight_per_worker is a per-request setting",
    );
}

/// Issue 25 — no default health path (a 404 from an app with no such route restarted it
/// for ever): the Node preload's heartbeat for Node commands, a TCP accept check for the
/// rest, the HTTP probe only where a path is written; `preload` follows the command
/// unless set.
#[test]
fn health_defaults_to_the_heartbeat_for_node_and_the_accept_check_for_others() {
    let cfg = |app: &str| {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:8080\"\n[[app]]\nname = \"a\"\nport_base = 3001\n{app}"
        );
        let c = Config::parse(&text, Path::new("s.toml")).unwrap();
        let a = c.apps[0].clone();
        (a.health.clone(), a.preload)
    };
    use HealthKind::*;
    assert_eq!(cfg("command = [\"node\", \"app.js\"]"), (Heartbeat, true));
    assert_eq!(
        cfg("command = [\"/usr/bin/nodejs\", \"app.js\"]"),
        (Heartbeat, true)
    );
    assert_eq!(cfg("command = [\"./server.mjs\"]"), (Heartbeat, true));
    assert_eq!(
        cfg("command = [\"uvicorn\", \"--fd\", \"3\", \"m:app\"]"),
        (Accept, false)
    );
    assert_eq!(cfg("command = [\"./payments\"]"), (Accept, false));
    assert_eq!(
        cfg("command = [\"node\", \"app.js\"]\npreload = false"),
        (Accept, false)
    );
    assert_eq!(
        cfg("command = [\"sh\", \"-c\", \"exec node app.js\"]\npreload = true"),
        (Heartbeat, true)
    );
    assert_eq!(
        cfg("command = [\"./payments\"]\n[app.health]\npath = \"/ready\""),
        (Http("/ready".into()), false)
    );
    assert_eq!(
        cfg("command = [\"node\", \"a.js\"]\n[app.health]\ninterval = \"1s\""),
        (Heartbeat, true),
        "a health table without a path keeps the default probe"
    );
}

/// Issue 31: a NUL byte in an `env` value or a `command` argument passed `--check`, then
/// every worker failed to spawn (std refuses it) — or, in direct mode, the environment
/// built before fork did. Now the file's line says so before anything starts.
#[test]
fn a_nul_byte_in_env_or_command_is_refused_with_its_line() {
    let text = MINIMAL.replace(
        "port_base = 3001\n",
        "port_base = 3001\nenv = { GREETING = \"hi\", TOKEN = \"a\\u0000b\" }\n",
    );
    assert_rejected(&text, Some(10), "env `TOKEN` holds a NUL byte");
    let text = MINIMAL.replace(
        "command = [\"node\", \"app.js\"]",
        "command = [\"node\", \"app.js\\u0000--inspect\"]",
    );
    assert_rejected(&text, Some(7), "command argument 1 holds a NUL byte");
}

/// Issue 31: `admin_token = "   "` was a token no client can send (headers are trimmed),
/// and `admin_token = "t"` one a network can guess; both started. Now refused, from the
/// file or the environment.
#[test]
fn a_blank_or_short_admin_token_is_refused() {
    let with =
        |t: &str| MINIMAL.replace("[server]\n", &format!("[server]\nadmin_token = \"{t}\"\n"));
    assert_rejected(&with("   "), Some(2), "admin_token is only white space");
    assert_rejected(
        &with("s3cret"),
        Some(2),
        "admin_token is 6 bytes: use at least 16",
    );
    assert_rejected(&with(" 0123456789abcdef"), Some(2), "white space");
    assert!(Config::parse(&with("0123456789abcdef"), Path::new("x.toml")).is_ok());
}

#[test]
fn admin_hosts_are_host_names_with_an_optional_port() {
    let with = |h: &str| MINIMAL.replace("[server]\n", &format!("[server]\nadmin_hosts = [{h}]\n"));
    let c = Config::parse(
        &with("\"Admin.Example\", \"ops.example:9443\""),
        Path::new("x.toml"),
    )
    .unwrap();
    assert_eq!(c.server.admin_hosts, ["admin.example", "ops.example:9443"]);
    assert_rejected(
        &with("\"a b\""),
        Some(2),
        "admin_hosts: `a b` is not a host name",
    );
    assert_rejected(
        &with("\"[::1\""),
        Some(2),
        "admin_hosts: `[::1` is not a host name",
    );
}

/// Issue 31: serve running as root from a config (or a program) that another user can
/// write runs that user's code as root at the next start or reload. Real files, real
/// modes: each writable file or directory is named once; a sticky directory (`/tmp`)
/// and a private one are not.
#[test]
fn files_others_can_write_are_named() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let program = open.join("app.sh");
    std::fs::write(&program, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o775)).unwrap();
    let config = dir.path().join("serve.toml");
    let text = MINIMAL.replace(
        "command = [\"node\", \"app.js\"]",
        &format!("command = [\"{}\"]", program.display()),
    );
    std::fs::write(&config, &text).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let c = Config::from_file(&config).unwrap();
    let found = c.writable_files();
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].contains(&format!(
            "program {} writable by its group",
            program.display()
        )),
        "{found:#?}"
    );
    assert!(
        found[1].contains(&format!(
            "directory {} writable by everyone",
            open.display()
        )),
        "{found:#?}"
    );
    // Made private, nothing is said; a sticky directory is not a finding either.
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    assert_eq!(c.writable_files(), Vec::<String>::new());
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o666)).unwrap();
    let found = c.writable_files();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].contains("config file") && found[0].contains("writable by everyone"),
        "{found:#?}"
    );
}
