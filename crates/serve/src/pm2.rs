//! From pm2: an ecosystem file's apps (already evaluated to JSON — the file is JavaScript,
//! which `node` evaluates, never a parser of ours) turned into the equivalent serve.toml,
//! so that a pm2 user's first run is one command. What has no equivalent is said line by
//! line as TOML comments, never dropped silently.
//!
//! The mapping: `name`; `script` + `args` + `interpreter` (+ `node_args`,
//! `interpreter_args`) → `command`; `instances` (`"max"`: the CPUs here) → `workers`;
//! `env` → `env`, except `PORT`: an app given a `PORT` listened there under pm2, so it
//! becomes a direct app on that port (pm2's cluster mode shares one port between the
//! instances; direct mode hands one socket to every worker) and `PORT` becomes each
//! worker's own; `cwd` (absolute, against the ecosystem file's folder);
//! `max_memory_restart` → `max_memory_mb`; `kill_timeout` → `stop_grace`; `listen_timeout`
//! → `start_timeout`; `max_restarts`, `restart_delay` → `[app.restart]`.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

/// The first `port_base` handed out; each app takes the next free hundred.
const FIRST_PORT_BASE: u64 = 3001;

/// The serve.toml equivalent to the evaluated ecosystem `eco` (`module.exports`: an
/// object with `apps`, or an array of apps) of the file at `file`. `cpus`: what pm2's
/// `instances: "max"` means here.
///
/// # Errors
///
/// One line when `eco` has no apps or an app has no `script`.
pub fn toml_from_pm2(eco: &Value, file: &Path, cpus: usize) -> Result<String, String> {
    let apps = match eco {
        Value::Array(a) => a.as_slice(),
        Value::Object(o) => match o.get("apps") {
            Some(Value::Array(a)) => a.as_slice(),
            Some(one @ Value::Object(_)) => std::slice::from_ref(one),
            _ => return Err("no `apps` in the ecosystem file".into()),
        },
        _ => return Err("the ecosystem file exports neither an object nor an array".into()),
    };
    if apps.is_empty() {
        return Err("the ecosystem file has no apps".into());
    }
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut out = format!(
        "# serve.toml from pm2's {} (scalpel serve --from-pm2). Check it with\n\
         # `scalpel serve --check --config FILE`; docs/serve.md \"Coming from pm2\".\n\n\
         [server]\n\
         # The balancer's address. Apps given a PORT under pm2 are reached directly on it\n\
         # (mode = \"direct\"); the balancer serves the first other app, if any.\n\
         listen = \"127.0.0.1:0\"\n\
         admin = \"127.0.0.1:9090\"\n",
        file.display()
    );
    if let Value::Object(o) = eco {
        for key in o.keys().filter(|k| *k != "apps") {
            let _ = writeln!(
                out,
                "# pm2 `{key}`: no equivalent (serve runs the apps; deploying them is not its job)"
            );
        }
    }
    let mut next_base = FIRST_PORT_BASE;
    let mut names = Vec::new();
    for (i, app) in apps.iter().enumerate() {
        let Value::Object(a) = app else {
            return Err(format!("app {i} is not an object"));
        };
        let mut section = App::new(a, i, &dir, cpus)?;
        section.dedupe_name(&mut names);
        out.push('\n');
        out.push_str(&section.render(next_base));
        next_base = next_hundred(next_base + 2 * section.workers as u64);
    }
    Ok(out)
}

/// The base after `end`: the next hundred plus one (3001, 3101, …), for readable ranges.
fn next_hundred(end: u64) -> u64 {
    (end.div_ceil(100)) * 100 + 1
}

/// One `[[app]]` being written.
struct App {
    name: String,
    command: Vec<String>,
    workers: usize,
    listen_port: Option<u64>,
    env: Vec<(String, String)>,
    cwd: String,
    settings: Vec<String>,
    restart: Vec<String>,
    notes: Vec<String>,
}

impl App {
    fn new(
        a: &serde_json::Map<String, Value>,
        i: usize,
        dir: &Path,
        cpus: usize,
    ) -> Result<Self, String> {
        let script = a
            .get("script")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("app {i}: no `script`"))?;
        let name = a
            .get("name")
            .and_then(Value::as_str)
            .map_or_else(|| stem(script), String::from);
        let mut app = App {
            name: sanitize(&name),
            command: Vec::new(),
            workers: 1,
            listen_port: None,
            env: Vec::new(),
            cwd: match a.get("cwd").and_then(Value::as_str) {
                Some(c) => dir.join(c).display().to_string(),
                None => dir.display().to_string(),
            },
            settings: Vec::new(),
            restart: Vec::new(),
            notes: Vec::new(),
        };
        if app.name != name {
            app.notes.push(format!(
                "pm2 name `{name}` → `{}` (serve's name rules)",
                app.name
            ));
        }
        app.command = command(a, script, &mut app.notes);
        for (key, value) in a {
            app.key(key, value, cpus);
        }
        Ok(app)
    }

    /// One key of the pm2 app.
    fn key(&mut self, key: &str, value: &Value, cpus: usize) {
        let text = || value.to_string();
        match key {
            "name" | "script" | "args" | "interpreter" | "exec_interpreter"
            | "interpreter_args" | "node_args" | "cwd" => {}
            "instances" => self.workers = instances(value, cpus, &mut self.notes),
            "exec_mode" => self.notes.push(format!(
                "pm2 exec_mode {}: serve runs every instance as its own process (no cluster \
                 module); an app with a PORT shares one socket as in cluster mode (direct)",
                text()
            )),
            "env" => self.env(value),
            "max_memory_restart" => match megabytes(value) {
                Some(mb) => self.settings.push(format!(
                    "max_memory_mb = {mb}   # pm2 max_memory_restart {}: successor first, then the old one drains",
                    text()
                )),
                None => self.unknown(key, value),
            },
            "kill_timeout" => self.millis("stop_grace", value, key),
            "listen_timeout" => self.millis("start_timeout", value, key),
            "max_restarts" => match value.as_u64() {
                Some(n) => self.restart.push(format!("max_restarts = {n}")),
                None => self.unknown(key, value),
            },
            "restart_delay" | "exp_backoff_restart_delay" => match value.as_u64() {
                Some(ms) => self.restart.push(format!(
                    "backoff = \"{ms}ms\"   # pm2 {key}; doubles on each restart inside `window`"
                )),
                None => self.unknown(key, value),
            },
            "min_uptime" => self.notes.push(format!(
                "pm2 min_uptime {}: serve counts restarts inside [app.restart] window instead",
                text()
            )),
            "autorestart" if value == &Value::Bool(false) => self.notes.push(
                "pm2 autorestart false: serve always restarts a worker that exits (within \
                 max_restarts); run a one-off job outside serve"
                    .into(),
            ),
            "autorestart" => {}
            "watch" | "ignore_watch" | "watch_delay" | "watch_options" => {
                if value != &Value::Bool(false) {
                    self.notes.push(format!(
                        "pm2 {key} {}: no file watching; send SIGHUP (or POST /reload) for a rolling reload",
                        text()
                    ));
                }
            }
            "out_file" | "error_file" | "log_file" | "log_date_format" | "merge_logs"
            | "combine_logs" | "log_type" | "time" | "output" | "error" | "log" => {
                self.notes.push(format!(
                    "pm2 {key} {}: workers' output goes to serve's stdout/stderr, prefixed [app#index]; redirect serve's",
                    text()
                ));
            }
            "instance_var" => self.notes.push(format!(
                "pm2 instance_var {}: the worker index is in WORKER_INDEX (index_env = \"NAME\" renames it)",
                text()
            )),
            "wait_ready" => self.notes.push(
                "pm2 wait_ready: serve waits for its own proof instead (the preload's heartbeat and listen for Node, an accepted connection otherwise)".into(),
            ),
            k if k.starts_with("env_") => self.notes.push(format!(
                "pm2 {k} (pm2 --env {}): not applied; copy its keys into env to use them",
                &k[4..]
            )),
            _ => self.unknown(key, value),
        }
    }

    fn unknown(&mut self, key: &str, value: &Value) {
        self.notes.push(format!(
            "pm2 {key} = {value}: no equivalent in scalpel serve"
        ));
    }

    fn millis(&mut self, to: &str, value: &Value, key: &str) {
        match value.as_u64() {
            Some(ms) => self
                .settings
                .push(format!("{to} = \"{ms}ms\"   # pm2 {key}")),
            None => self.unknown(key, value),
        }
    }

    /// `env`: `PORT` makes the app direct on that port; the rest is passed on.
    fn env(&mut self, value: &Value) {
        let Value::Object(vars) = value else {
            self.unknown("env", value);
            return;
        };
        for (k, v) in vars {
            let v = match v {
                Value::String(s) => s.clone(),
                Value::Null => continue,
                other => other.to_string(),
            };
            if k == "PORT" {
                match v.parse::<u64>() {
                    Ok(p) if (1..=65535).contains(&p) => self.listen_port = Some(p),
                    _ => self.notes.push(format!("pm2 env PORT {v:?}: not a port")),
                }
            } else {
                self.env.push((k.clone(), v));
            }
        }
    }

    fn dedupe_name(&mut self, names: &mut Vec<String>) {
        let base = self.name.clone();
        let mut n = 2;
        while names.contains(&self.name) {
            self.name = format!("{base}-{n}");
            n += 1;
        }
        names.push(self.name.clone());
    }

    fn render(&self, port_base: u64) -> String {
        let mut s = String::from("[[app]]\n");
        let _ = writeln!(s, "name = {}", quote(&self.name));
        let cmd: Vec<String> = self.command.iter().map(|c| quote(c)).collect();
        let _ = writeln!(s, "command = [{}]", cmd.join(", "));
        let _ = writeln!(s, "workers = {}", self.workers);
        let _ = writeln!(
            s,
            "port_base = {port_base}   # the workers' own ports: {port_base}..={} (PORT)",
            port_base + 2 * self.workers as u64 - 1
        );
        let _ = writeln!(s, "cwd = {}", quote(&self.cwd));
        if let Some(p) = self.listen_port {
            s.push_str("mode = \"direct\"   # one socket for every worker, as pm2's cluster mode shares its port\n");
            let _ = writeln!(
                s,
                "listen = \"0.0.0.0:{p}\"   # pm2's PORT (the app listened on every address); 127.0.0.1 behind a proxy"
            );
        }
        for line in &self.settings {
            s.push_str(line);
            s.push('\n');
        }
        if !self.env.is_empty() {
            let pairs: Vec<String> = self
                .env
                .iter()
                .map(|(k, v)| format!("{} = {}", bare_or_quoted(k), quote(v)))
                .collect();
            let _ = writeln!(s, "env = {{ {} }}", pairs.join(", "));
        }
        for note in &self.notes {
            let _ = writeln!(s, "# {note}");
        }
        if !self.restart.is_empty() {
            s.push_str("[app.restart]\n");
            for line in &self.restart {
                s.push_str(line);
                s.push('\n');
            }
        }
        s
    }
}

/// The command pm2 would run for `script`.
fn command(
    a: &serde_json::Map<String, Value>,
    script: &str,
    notes: &mut Vec<String>,
) -> Vec<String> {
    let words = |key: &str| -> Vec<String> {
        match a.get(key) {
            Some(Value::String(s)) => s.split_whitespace().map(String::from).collect(),
            Some(Value::Array(v)) => v
                .iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), String::from))
                .collect(),
            _ => Vec::new(),
        }
    };
    let interpreter = a
        .get("interpreter")
        .or_else(|| a.get("exec_interpreter"))
        .and_then(Value::as_str);
    let ext = Path::new(script)
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("");
    let mut cmd = match (interpreter, ext) {
        (Some("none"), _) => vec![script.to_string()],
        (Some(i), _) => {
            let mut c = vec![i.to_string()];
            c.extend(words("interpreter_args"));
            c.extend(
                words("node_args")
                    .into_iter()
                    .filter(|_| i.ends_with("node")),
            );
            c.push(script.to_string());
            c
        }
        (None, "js" | "cjs" | "mjs") => {
            let mut c = vec!["node".to_string()];
            c.extend(words("node_args"));
            c.extend(words("interpreter_args"));
            c.push(script.to_string());
            c
        }
        (None, "py") => vec!["python3".into(), script.into()],
        (None, "sh") => vec!["bash".into(), script.into()],
        (None, _) => {
            if script == "npm" || script == "yarn" {
                notes.push(format!(
                    "pm2 runs `{script}`: serve runs it too, but the Node preload (direct mode, \
                     the heartbeat) needs node itself: prefer command = [\"node\", \"<entry>.js\"]"
                ));
            }
            vec![script.to_string()]
        }
    };
    cmd.extend(words("args"));
    cmd
}

/// pm2's `instances`: a count, or `"max"`/0 (every CPU), or -N (all but N).
fn instances(v: &Value, cpus: usize, notes: &mut Vec<String>) -> usize {
    let n = match v {
        Value::String(s) if s == "max" => 0,
        Value::String(s) => s.parse::<i64>().unwrap_or(1),
        other => other.as_i64().unwrap_or(1),
    };
    let workers = match n {
        n if n <= 0 => cpus.saturating_sub(n.unsigned_abs() as usize).max(1),
        n => (n as usize).min(1024),
    };
    if n <= 0 {
        notes.push(format!(
            "pm2 instances {v}: {workers} here ({cpus} CPUs); pm2 decides this at each start, serve at this conversion"
        ));
    }
    workers
}

/// pm2's `max_memory_restart` (`"300M"`, `"1G"`, `"512K"`, bytes) in MiB, rounded up.
fn megabytes(v: &Value) -> Option<u64> {
    let bytes = match v {
        Value::Number(n) => n.as_u64()?,
        Value::String(s) => {
            let s = s.trim();
            let (num, mult) = match s.chars().last()?.to_ascii_uppercase() {
                'K' => (&s[..s.len() - 1], 1u64 << 10),
                'M' => (&s[..s.len() - 1], 1 << 20),
                'G' => (&s[..s.len() - 1], 1 << 30),
                _ => (s, 1),
            };
            num.trim()
                .parse::<f64>()
                .ok()
                .map(|n| (n * mult as f64) as u64)?
        }
        _ => return None,
    };
    Some(bytes.div_ceil(1 << 20).max(1))
}

fn stem(script: &str) -> String {
    Path::new(script)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("app")
        .to_string()
}

/// A name under serve's rules: letters, digits, `-`, `_`, `.`.
fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    if s.is_empty() { "app".into() } else { s }
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn bare_or_quoted(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        key.to_string()
    } else {
        quote(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cluster_app_with_a_port_becomes_direct_and_the_rest_is_said() {
        let eco = json!({
            "apps": [{
                "name": "web api",
                "script": "./server.js",
                "args": "--color --level 2",
                "node_args": "--max-old-space-size=512",
                "instances": "max",
                "exec_mode": "cluster",
                "env": { "PORT": 3000, "NODE_ENV": "production" },
                "env_staging": { "NODE_ENV": "staging" },
                "max_memory_restart": "300M",
                "kill_timeout": 3000,
                "watch": true,
                "cron_restart": "0 * * * *",
                "max_restarts": 5
            }, {
                "script": "worker.py",
                "instances": 2,
                "interpreter": "python3"
            }],
            "deploy": { "production": {} }
        });
        let t = toml_from_pm2(&eco, Path::new("/srv/app/ecosystem.config.js"), 4).unwrap();
        for want in [
            "name = \"web-api\"",
            "command = [\"node\", \"--max-old-space-size=512\", \"./server.js\", \"--color\", \"--level\", \"2\"]",
            "workers = 4",
            "port_base = 3001",
            "mode = \"direct\"",
            "listen = \"0.0.0.0:3000\"",
            "max_memory_mb = 300",
            "stop_grace = \"3000ms\"",
            "env = { NODE_ENV = \"production\" }",
            "# pm2 env_staging (pm2 --env staging): not applied",
            "# pm2 watch true: no file watching",
            "# pm2 cron_restart = \"0 * * * *\": no equivalent in scalpel serve",
            "# pm2 instances \"max\": 4 here (4 CPUs)",
            "# pm2 `deploy`: no equivalent",
            "[app.restart]\nmax_restarts = 5",
            "name = \"worker\"\ncommand = [\"python3\", \"worker.py\"]\nworkers = 2\nport_base = 3101",
        ] {
            assert!(t.contains(want), "{want:?} not in:\n{t}");
        }
        assert!(!t.contains("PORT = "), "PORT is the worker's own now:\n{t}");
    }

    #[test]
    fn memory_sizes_and_refusals() {
        assert_eq!(megabytes(&json!("1G")), Some(1024));
        assert_eq!(megabytes(&json!("512K")), Some(1));
        assert_eq!(megabytes(&json!(10_485_760)), Some(10));
        assert_eq!(megabytes(&json!("lots")), None);
        assert!(toml_from_pm2(&json!({}), Path::new("e.js"), 2).is_err());
        assert!(
            toml_from_pm2(&json!({"apps": [{"name": "x"}]}), Path::new("e.js"), 2)
                .unwrap_err()
                .contains("no `script`")
        );
    }
}
