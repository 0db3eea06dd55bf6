//! Helpers for the end-to-end tests: a minimal W3C WebDriver client (only
//! what the tests use), and the processes under test (server, tauri-driver,
//! the `holdfast` CLI). Every wait has a deadline and polls; none sleeps a
//! fixed time hoping something happened.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

pub type Result<T> = std::result::Result<T, String>;

/// The interval between polls of a condition (not a wait for an event).
const POLL: Duration = Duration::from_millis(100);

/// Polls `f` until it yields `Some`, or fails after `timeout` with `what`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if Instant::now() > deadline {
            return Err(format!("timed out after {timeout:?} waiting for {what}"));
        }
        std::thread::sleep(POLL);
    }
}

/// A free loopback port (bound, then released for the child to take).
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// A fresh dir under /tmp named for `tag` and this process, that the
/// server's Postgres user can enter (the cluster runs as `postgres` when the
/// tests run as root).
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("holdfast-e2e-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    dir
}

/// The workspace's target dir (`CARGO_TARGET_DIR` or ../target).
pub fn target_dir() -> PathBuf {
    std::env::var_os("HOLDFAST_TARGET_DIR")
        .or_else(|| std::env::var_os("CARGO_TARGET_DIR"))
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// A child stopped on drop with SIGTERM, so that tauri-driver can stop the
/// WebKitWebDriver it started (SIGKILL would orphan it, holding its port).
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// `holdfast-server serve --demo` on a fixed port and data dir.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub data_dir: PathBuf,
}

impl Server {
    pub fn start(port: u16, data_dir: &Path) -> Result<Server> {
        Server::start_with(port, data_dir, &[])
    }

    /// As [`Server::start`], with more `serve` flags (`--relay-max-attempts 1`).
    pub fn start_with(port: u16, data_dir: &Path, flags: &[&str]) -> Result<Server> {
        let bin = target_dir().join("debug/holdfast-server");
        let mut cmd = Command::new(&bin);
        // Partners here are receivers on loopback, which the egress guard
        // refuses unless told otherwise.
        cmd.args(["serve", "--demo", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--relay-allow-private-targets")
            .arg("--data-dir")
            .arg(data_dir)
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("{}: {e}", bin.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        // The server says `listening on http://ADDR` when it accepts requests.
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        for pipe in [
            Box::new(stdout) as Box<dyn std::io::Read + Send>,
            Box::new(stderr),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(|l| l.ok()) {
                    eprintln!("[server] {line}");
                    let _ = tx.send(line);
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains("listening on") => break,
                Ok(_) => {}
                Err(_) => {
                    let _ = child.kill();
                    return Err("the server did not start listening".into());
                }
            }
        }
        Ok(Server {
            child: Some(child),
            port,
            data_dir: data_dir.to_owned(),
        })
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// SIGTERM and wait: the server shuts down cleanly, its data stays.
    pub fn stop(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            let status = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .map_err(|e| e.to_string())?;
            if !status.success() {
                return Err("kill -TERM failed".into());
            }
            child.wait().map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The `holdfast` CLI as a second desk, with its own store and token file.
pub struct Cli {
    pub dir: PathBuf,
}

impl Cli {
    pub fn run(&self, args: &[&str]) -> Result<String> {
        let bin = target_dir().join("debug/holdfast");
        let out = Command::new(&bin)
            .arg("--store")
            .arg(self.dir.join("cli.db"))
            .arg("--token-file")
            .arg(self.dir.join("cli.token"))
            .args(args)
            .env("HOLDFAST_PASSWORD", "holdfast-demo")
            .output()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        if !out.status.success() {
            return Err(format!(
                "holdfast {args:?} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }
}

/// One WebDriver session.
pub struct Driver {
    base: String,
}

/// Keys in the W3C WebDriver private-use range.
pub mod keys {
    pub const NULL: &str = "\u{E000}";
    pub const TAB: &str = "\u{E004}";
    pub const ENTER: &str = "\u{E007}";
    pub const ESCAPE: &str = "\u{E00C}";
    pub const ALT: &str = "\u{E00A}";
    pub const CONTROL: &str = "\u{E009}";
    pub const BACKSPACE: &str = "\u{E003}";
    pub const SHIFT: &str = "\u{E008}";
}

fn call(method: &str, url: &str, body: Option<Value>) -> Result<Value> {
    let req = ureq::request(method, url).timeout(Duration::from_secs(60));
    let resp = match body {
        Some(b) => req.send_json(b),
        None => req.call(),
    };
    let v: Value = match resp {
        Ok(r) => r.into_json().map_err(|e| e.to_string())?,
        Err(ureq::Error::Status(code, r)) => {
            let text = r.into_string().unwrap_or_default();
            return Err(format!("{method} {url}: {code} {text}"));
        }
        Err(e) => return Err(format!("{method} {url}: {e}")),
    };
    Ok(v.get("value").cloned().unwrap_or(Value::Null))
}

impl Driver {
    /// A session of the desktop app through tauri-driver.
    pub fn new(driver_url: &str, application: &Path) -> Result<Driver> {
        Driver::session(
            driver_url,
            json!({
                "browserName": "wry",
                "tauri:options": {"application": application},
            }),
        )
    }

    /// A session of headless Chromium (Debian's `chromium`) through
    /// chromedriver: the operator's browser, for the /admin page.
    pub fn chromium(driver_url: &str) -> Result<Driver> {
        let binary = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        Driver::session(
            driver_url,
            json!({
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": binary,
                    // No sandbox: CI runs as root, where Chromium's sandbox
                    // refuses to start. The pages are our own, on loopback.
                    "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                             "--disable-dev-shm-usage", "--window-size=1280,1400"],
                },
            }),
        )
    }

    fn session(driver_url: &str, always_match: Value) -> Result<Driver> {
        let caps = json!({"capabilities": {"alwaysMatch": always_match}});
        let v = call("POST", &format!("{driver_url}/session"), Some(caps))?;
        let id = v["sessionId"].as_str().ok_or(format!("no session: {v}"))?;
        Ok(Driver {
            base: format!("{driver_url}/session/{id}"),
        })
    }

    pub fn quit(&self) {
        let _ = call("DELETE", &self.base, None);
    }

    /// Navigates to `url` and waits for the page to load.
    pub fn goto(&self, url: &str) -> Result<()> {
        call(
            "POST",
            &format!("{}/url", self.base),
            Some(json!({ "url": url })),
        )
        .map(drop)
    }

    /// The current page's URL.
    pub fn current_url(&self) -> Result<String> {
        call("GET", &format!("{}/url", self.base), None)?
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| "no url".to_owned())
    }

    /// Clears the field matching `css` and types `text` into it.
    pub fn fill(&self, css: &str, text: &str) -> Result<()> {
        let el = self.find(css)?;
        call(
            "POST",
            &format!("{}/element/{el}/clear", self.base),
            Some(json!({})),
        )?;
        call(
            "POST",
            &format!("{}/element/{el}/value", self.base),
            Some(json!({ "text": text })),
        )
        .map(drop)
    }

    fn find_all(&self, css: &str) -> Result<Vec<String>> {
        let v = call(
            "POST",
            &format!("{}/elements", self.base),
            Some(json!({"using": "css selector", "value": css})),
        )?;
        Ok(v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e.as_object()?.values().next()?.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Waits for an element matching `css`.
    pub fn find(&self, css: &str) -> Result<String> {
        wait_for(css, Duration::from_secs(20), || {
            self.find_all(css).ok()?.into_iter().next()
        })
    }

    pub fn click(&self, css: &str) -> Result<()> {
        let el = self.find(css)?;
        call(
            "POST",
            &format!("{}/element/{el}/click", self.base),
            Some(json!({})),
        )
        .map(drop)
    }

    /// Types into the element that has the focus (what a user does).
    pub fn keys(&self, text: &str) -> Result<()> {
        let el = call("GET", &format!("{}/element/active", self.base), None)?;
        let id = el
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .ok_or("no focused element")?
            .to_owned();
        call(
            "POST",
            &format!("{}/element/{id}/value", self.base),
            Some(json!({ "text": text })),
        )
        .map(drop)
    }

    /// Alt+`key` (and other chords): modifiers stay down until NULL.
    pub fn chord(&self, modifier: &str, key: &str) -> Result<()> {
        self.keys(&format!("{modifier}{key}{}", keys::NULL))
    }

    /// Runs `js` as an async script: it ends by calling its last argument
    /// (`arguments[arguments.length - 1]`) with the result.
    pub fn script_async(&self, js: &str, args: Value) -> Result<Value> {
        call(
            "POST",
            &format!("{}/execute/async", self.base),
            Some(json!({"script": js, "args": args})),
        )
    }

    pub fn script(&self, js: &str, args: Value) -> Result<Value> {
        call(
            "POST",
            &format!("{}/execute/sync", self.base),
            Some(json!({"script": js, "args": args})),
        )
    }

    /// The trimmed text of the first element matching `css`, if any.
    pub fn text(&self, css: &str) -> Option<String> {
        self.script(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent.trim() : null;",
            json!([css]),
        )
        .ok()?
        .as_str()
        .map(str::to_owned)
    }

    /// Waits until `f(text of css)` holds; returns the text.
    pub fn wait_text(&self, css: &str, what: &str, f: impl Fn(&str) -> bool) -> Result<String> {
        wait_for(what, Duration::from_secs(30), || {
            self.text(css).filter(|t| f(t))
        })
        .map_err(|e| format!("{e} (last: {:?})", self.text(css)))
    }

    pub fn focus(&self, css: &str) -> Result<()> {
        self.find(css)?;
        self.script(
            "document.querySelector(arguments[0]).focus();",
            json!([css]),
        )
        .map(drop)
    }

    /// Saves a screenshot into the artifacts, then fails if the screen
    /// shows an internal id: a UUID, or a run of 8+ hex digits mixing
    /// digits and letters (a short id like `01a23366`). Only rendered text
    /// counts (`innerText`): a key behind a closed Details is not shown.
    pub fn screenshot(&self, name: &str) -> Result<()> {
        self.save_screenshot(name)?;
        let ids = self.script(VISIBLE_IDS, json!([]))?;
        match ids.as_array() {
            Some(found) if !found.is_empty() => Err(format!(
                "screenshot {name} shows internal ids: {}",
                Value::Array(found.clone())
            )),
            _ => Ok(()),
        }
    }
}

impl Driver {
    /// Saves a screenshot into the artifacts as `name.png`, and nothing
    /// more: the operator's pages show event ids on purpose.
    pub fn save_screenshot(&self, name: &str) -> Result<()> {
        let v = call("GET", &format!("{}/screenshot", self.base), None)?;
        let b64 = v.as_str().ok_or("no screenshot")?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| e.to_string())?;
        let dir = target_dir().join("e2e-artifacts");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        std::fs::write(dir.join(format!("{name}.png")), png).map_err(|e| e.to_string())
    }
}

/// The page's rendered text, searched for internal ids (see `screenshot`).
const VISIBLE_IDS: &str = r"
    const text = document.body.innerText;
    const uuid = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi;
    const short = /\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b/gi;
    return [...(text.match(uuid) || []), ...(text.replace(uuid, ' ').match(short) || [])];
";

/// A partner's endpoint on loopback: answers every request the same way
/// (204 unless told otherwise) and keeps the `webhook-id` of each, in
/// arrival order.
pub struct Receiver {
    pub url: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Receiver {
    pub fn start() -> Result<Receiver> {
        Receiver::answering(204, "")
    }

    /// A receiver that answers `status` with `body` (text/plain).
    pub fn answering(status: u16, body: &'static str) -> Result<Receiver> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(|s| s.ok()) {
                let record = record.clone();
                std::thread::spawn(move || {
                    if let Some(id) = answer_webhook(stream, status, body) {
                        if let Ok(mut v) = record.lock() {
                            v.push(id);
                        }
                    }
                });
            }
        });
        Ok(Receiver {
            url: format!("http://{addr}/hooks"),
            seen,
        })
    }

    /// The webhook-ids received so far.
    pub fn webhook_ids(&self) -> Vec<String> {
        self.seen.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// Reads one request (headers, then Content-Length bytes) and answers
/// `status` with `body`.
fn answer_webhook(stream: std::net::TcpStream, status: u16, body: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let (mut id, mut length) = (None, 0usize);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "webhook-id" => id = Some(v.trim().to_owned()),
                "content-length" => length = v.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    let mut request = vec![0; length];
    reader.read_exact(&mut request).ok()?;
    let mut out = stream;
    write!(
        out,
        "HTTP/1.1 {status} Answer\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    id
}

/// Starts chromedriver (Debian's `chromium-driver`) on a free port, and
/// waits for it.
pub fn start_chromedriver() -> Result<(Proc, String)> {
    let port = free_port()?;
    let bin = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into());
    let child = Command::new(&bin)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("{bin}: {e} (Debian's chromium-driver; make test installs it)"))?;
    let url = format!("http://127.0.0.1:{port}");
    wait_for("chromedriver to listen", Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    })?;
    Ok((Proc(child), url))
}

/// Starts tauri-driver on a free port with the app's env, and waits for it.
pub fn start_tauri_driver(envs: &[(&str, &Path)]) -> Result<(Proc, String)> {
    let port = free_port()?;
    // Never the default 4445: a busy machine may have another run on it.
    let native_port = free_port()?;
    let bin = std::env::var("TAURI_DRIVER").unwrap_or_else(|_| "tauri-driver".into());
    let native =
        std::env::var("WEBKIT_WEBDRIVER").unwrap_or_else(|_| "/usr/bin/WebKitWebDriver".into());
    let mut cmd = Command::new(&bin);
    cmd.args([
        "--port",
        &port.to_string(),
        "--native-port",
        &native_port.to_string(),
    ])
    .arg("--native-driver")
    .arg(&native);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let child = cmd.spawn().map_err(|e| format!("{bin}: {e}"))?;
    let url = format!("http://127.0.0.1:{port}");
    wait_for("tauri-driver to listen", Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    })?;
    Ok((Proc(child), url))
}

/// One process as /proc shows it.
struct ProcInfo {
    ppid: u32,
    zombie: bool,
}

fn proc_info(pid: u32) -> Option<ProcInfo> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some(ProcInfo {
        ppid,
        zombie: state == "Z" || state == "X",
    })
}

/// Whether `pid` is this test process or one of its descendants.
fn ours(mut pid: u32) -> bool {
    let me = std::process::id();
    for _ in 0..64 {
        if pid == me {
            return true;
        }
        match proc_info(pid) {
            Some(p) if p.ppid > 1 => pid = p.ppid,
            _ => return false,
        }
    }
    false
}

/// The live processes of the binary `app` that were started with
/// `HOLDFAST_DESKTOP_DATA_DIR=data_dir` and descend from this test process
/// (tauri-driver → WebKitWebDriver → app): ours, never another run's.
pub fn app_pids(app: &Path, data_dir: &Path) -> Vec<u32> {
    let want_env = format!("HOLDFAST_DESKTOP_DATA_DIR={}", data_dir.display());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == app)
                && std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == want_env.as_bytes()))
                && proc_info(*pid).is_some_and(|p| !p.zombie)
                && ours(*pid)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// SIGKILL `pid` (no destructor, no flush, no goodbye) and wait until it is
/// gone (or a zombie its parent has not reaped yet).
pub fn kill_9(pid: u32) -> Result<()> {
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .map_err(|e| format!("kill -KILL {pid}: {e}"))?;
    if !status.success() {
        return Err(format!("kill -KILL {pid}: {status}"));
    }
    wait_for(
        &format!("process {pid} to die"),
        Duration::from_secs(20),
        || proc_info(pid).is_none_or(|p| p.zombie).then_some(()),
    )
}

/// The secrets the Secret Service holds for `attribute=value`, through
/// `secret-tool search --all` (libsecret-tools); `None` if secret-tool is
/// not installed.
pub fn keyring_secrets(attribute: &str, value: &str) -> Result<Option<Vec<String>>> {
    let out = match Command::new("secret-tool")
        .args(["search", "--all", "--unlock", attribute, value])
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("secret-tool: {e}")),
    };
    // It prints each item's secret on stdout (its attributes on stderr); an
    // empty search succeeds with no output.
    if !out.status.success() {
        return Err(format!(
            "secret-tool search: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("secret = "))
            .map(str::to_owned)
            .collect(),
    ))
}

/// The server's HTTP API as an operator would call it (API.md), for the
/// tests' own set-up and checks: not through any desk.
pub struct Api {
    pub url: String,
    token: String,
}

fn api_call(
    method: &str,
    url: &str,
    token: Option<&str>,
    key: Option<&str>,
    body: Option<Value>,
) -> Result<Value> {
    let mut req = ureq::request(method, url).timeout(Duration::from_secs(30));
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    if let Some(k) = key {
        req = req.set("Idempotency-Key", k);
    }
    let resp = match body {
        Some(b) => req.send_json(b),
        None => req.call(),
    };
    match resp {
        Ok(r) => r.into_json().map_err(|e| e.to_string()),
        Err(ureq::Error::Status(code, r)) => Err(format!(
            "{method} {url}: {code} {}",
            r.into_string().unwrap_or_default()
        )),
        Err(e) => Err(format!("{method} {url}: {e}")),
    }
}

/// A fresh idempotency key (unique per process and call).
fn fresh_key() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "e2e-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

impl Api {
    /// Signs in (`POST /v1/sessions`).
    pub fn sign_in(url: &str, tenant: &str, email: &str, password: &str) -> Result<Api> {
        let v = api_call(
            "POST",
            &format!("{url}/v1/sessions"),
            None,
            None,
            Some(
                json!({"tenant": tenant, "email": email, "password": password,
                        "device_name": "e2e operator"}),
            ),
        )?;
        let token = v["token"].as_str().ok_or(format!("no token: {v}"))?;
        Ok(Api {
            url: url.to_owned(),
            token: token.to_owned(),
        })
    }

    /// An API session with a token from elsewhere (a desk's).
    pub fn with_token(url: &str, token: &str) -> Api {
        Api {
            url: url.to_owned(),
            token: token.to_owned(),
        }
    }

    pub fn get(&self, path: &str) -> Result<Value> {
        api_call(
            "GET",
            &format!("{}{path}", self.url),
            Some(&self.token),
            None,
            None,
        )
    }

    /// A write with a fresh `Idempotency-Key`.
    pub fn write(&self, method: &str, path: &str, body: Value) -> Result<Value> {
        api_call(
            method,
            &format!("{}{path}", self.url),
            Some(&self.token),
            Some(&fresh_key()),
            Some(body),
        )
    }

    /// `POST /v1/admin/users`: the new user's id and one-time password.
    pub fn create_user(&self, email: &str, name: &str, role: &str) -> Result<(String, String)> {
        let v = self.write(
            "POST",
            "/v1/admin/users",
            json!({"email": email, "display_name": name, "role": role}),
        )?;
        let id = v["user"]["id"].as_str().ok_or(format!("no id: {v}"))?;
        let password = v["password"].as_str().ok_or("no password")?;
        Ok((id.to_owned(), password.to_owned()))
    }
}

/// Minor units as the desk shows them: 123456 → "$1,234.56".
pub fn money(cents: i64) -> String {
    let sign = if cents < 0 { "−" } else { "" };
    let abs = cents.unsigned_abs();
    let dollars = (abs / 100).to_string();
    let mut grouped = String::new();
    for (i, c) in dollars.chars().enumerate() {
        if i > 0 && (dollars.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!("{sign}${grouped}.{:02}", abs % 100)
}

#[cfg(test)]
mod tests {
    #[test]
    fn money_reads_like_the_desk() {
        assert_eq!(super::money(0), "$0.00");
        assert_eq!(super::money(4_200), "$42.00");
        assert_eq!(super::money(123_456_789), "$1,234,567.89");
    }
}
