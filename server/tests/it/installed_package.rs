//! The server's .deb as an operator installs it (issue 17 item 2), tested
//! without a running systemd: its contents and maintainer scripts, its unit
//! under `systemd-analyze verify`, and the installed binary started the way
//! the unit starts it — as the `holdfast` user, with the unit's command line,
//! environment file, config file and state directory, all mapped into a
//! temporary root — until it tells systemd READY=1, answers /readyz, and stops
//! cleanly on SIGTERM within the unit's TimeoutStopSec.
//!
//! `#[ignore]`d: it needs the package. `make test` builds one from the debug
//! build (scripts/server-package.sh --test-build) and runs
//! `cargo test --workspace installed_package -- --ignored` with
//! HOLDFAST_TEST_DEB naming it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::support::process::{postmaster_pid, reachable_tempdir, tail};

const UNIT: &str = "usr/lib/systemd/system/holdfast-server.service";

fn the_deb() -> PathBuf {
    let deb = std::env::var_os("HOLDFAST_TEST_DEB")
        .map(PathBuf::from)
        .expect(
            "HOLDFAST_TEST_DEB names the package to test; build one with \
         `scripts/server-package.sh --test-build DIR` (make test does)",
        );
    assert!(deb.is_file(), "{} does not exist", deb.display());
    deb
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `dpkg-deb -c`: path → (mode, owner).
fn contents(deb: &Path) -> BTreeMap<String, (String, String)> {
    run(Command::new("dpkg-deb").arg("-c").arg(deb))
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let path = fields.get(5)?.trim_start_matches("./").to_owned();
            Some((path, (fields[0].to_owned(), fields[1].to_owned())))
        })
        .collect()
}

/// The unit's `Key=Value` settings (the last one wins, as in systemd).
fn unit_settings(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

fn seconds(value: &str) -> Duration {
    let digits = value.trim_end_matches('s');
    Duration::from_secs(
        digits
            .parse()
            .unwrap_or_else(|_| panic!("seconds: {value}")),
    )
}

#[test]
#[ignore = "needs the .deb: make test builds it (HOLDFAST_TEST_DEB)"]
fn installed_package_contents_scripts_and_unit() {
    let deb = the_deb();
    let files = contents(&deb);
    for (path, mode) in [
        ("usr/bin/holdfast-server", "-rwxr-xr-x"),
        (UNIT, "-rw-r--r--"),
        ("etc/holdfast/server.toml", "-rw-r--r--"),
        // Secrets go here: root only.
        ("etc/default/holdfast-server", "-rw-------"),
        ("usr/share/doc/holdfast-server/copyright", "-rw-r--r--"),
        (
            "usr/share/doc/holdfast-server/grafana/holdfast.json",
            "-rw-r--r--",
        ),
        (
            "usr/share/doc/holdfast-server/prometheus/holdfast-alerts.yml",
            "-rw-r--r--",
        ),
    ] {
        let Some((actual, owner)) = files.get(path) else {
            panic!("{path} missing from the package: {files:#?}")
        };
        assert_eq!(actual, mode, "{path}");
        assert_eq!(owner, "0/0", "{path}: owned by root");
    }

    let control = tempfile::tempdir().expect("tempdir");
    run(Command::new("dpkg-deb")
        .arg("-e")
        .arg(&deb)
        .arg(control.path()));
    let read = |name: &str| {
        std::fs::read_to_string(control.path().join(name))
            .unwrap_or_else(|e| panic!("control file {name}: {e}"))
    };
    let conffiles = read("conffiles");
    for conffile in ["/etc/holdfast/server.toml", "/etc/default/holdfast-server"] {
        assert!(
            conffiles.lines().any(|l| l == conffile),
            "{conffile} is not a conffile: {conffiles}"
        );
    }
    let control_file = read("control");
    assert!(
        control_file.contains("Package: holdfast-server"),
        "{control_file}"
    );
    assert!(
        control_file.contains("passwd"),
        "Depends names passwd (useradd): {control_file}"
    );

    let postinst = read("postinst");
    assert!(
        postinst.contains("useradd --system --gid holdfast"),
        "{postinst}"
    );
    assert!(postinst
        .contains("dpkg-statoverride --update --add root holdfast 0640 /etc/holdfast/server.toml"));
    assert!(postinst.contains("deb-systemd-helper enable holdfast-server.service"));
    // The user exists before the unit is started.
    let user_at = postinst.find("useradd").expect("useradd");
    let start_at = postinst.find("deb-systemd-invoke").expect("start");
    assert!(
        user_at < start_at,
        "the user is created before the service starts"
    );
    for script in ["postinst", "prerm", "postrm"] {
        let text = read(script);
        assert!(
            !text.contains("#DEBHELPER#"),
            "{script}: token left unexpanded"
        );
        assert!(text.starts_with("#!/bin/sh\n"), "{script}");
        let path = control.path().join(script);
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o111, 0o111, "{script} is executable");
        run(Command::new("sh").arg("-n").arg(&path));
    }

    // The unit.
    let root = tempfile::tempdir().expect("tempdir");
    run(Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(root.path()));
    let unit_text = std::fs::read_to_string(root.path().join(UNIT)).expect("unit");
    let unit = unit_settings(&unit_text);
    for (key, value) in [
        ("Type", "notify"),
        ("User", "holdfast"),
        ("Group", "holdfast"),
        ("StateDirectory", "holdfast"),
        ("Restart", "on-failure"),
        ("KillMode", "mixed"),
        (
            "ExecStart",
            "/usr/bin/holdfast-server serve --config /etc/holdfast/server.toml",
        ),
    ] {
        assert_eq!(unit.get(key).map(String::as_str), Some(value), "{key}");
    }
    // The graceful stop's slowest part, a relay delivery, fits with room.
    assert!(seconds(&unit["TimeoutStopSec"]) >= Duration::from_secs(15 + 15));

    verify_unit(root.path());
}

/// `systemd-analyze verify` on the unit inside the extracted package (its
/// ExecStart must exist there), with the host's own units copied in for the
/// targets it names. Any complaint fails the test, warnings included:
/// `verify` exits 0 on an unknown key.
fn verify_unit(root: &Path) {
    let Ok(out) = Command::new("systemd-analyze").arg("--version").output() else {
        panic!("systemd-analyze is missing: apt-get install systemd (it need not run)");
    };
    assert!(out.status.success());
    let units = root.join("usr/lib/systemd/system");
    for host in ["/usr/lib/systemd/system", "/lib/systemd/system"] {
        let Ok(entries) = std::fs::read_dir(host) else {
            continue;
        };
        for entry in entries.flatten() {
            let target = units.join(entry.file_name());
            if !target.exists() {
                let _ = std::fs::copy(entry.path(), target);
            }
        }
    }
    let out = Command::new("systemd-analyze")
        .arg(format!("--root={}", root.display()))
        .args(["verify", &format!("/{UNIT}")])
        .output()
        .expect("systemd-analyze verify");
    let complaints = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && complaints.trim().is_empty(),
        "systemd-analyze verify: {complaints}"
    );
    eprintln!("systemd-analyze verify: the unit is clean");
}

/// Who runs the server: the `holdfast` system user when we are root (made as
/// the postinst makes it), else ourselves.
fn service_user() -> Option<nix::unistd::User> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: running the installed binary as ourselves, not as `holdfast`");
        return None;
    }
    let exists = |db: &str| {
        Command::new("getent")
            .args([db, "holdfast"])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !exists("group") {
        run(Command::new("groupadd").args(["--system", "holdfast"]));
    }
    if !exists("passwd") {
        run(Command::new("useradd").args([
            "--system",
            "--gid",
            "holdfast",
            "--home-dir",
            "/var/lib/holdfast",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            "--comment",
            "Holdfast sync server",
            "holdfast",
        ]));
    }
    nix::unistd::User::from_name("holdfast").expect("getpwnam")
}

/// One datagram from systemd's notify socket within `timeout`. Linux never
/// restarts a receive on a socket with a timeout, neither after a signal
/// handler nor after the process was stopped and continued (man 7 signal),
/// and CI saw it fail so with EINTR: receive again with the time left.
fn recv_notify(socket: &UnixDatagram, buf: &mut [u8], timeout: Duration) -> std::io::Result<usize> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        socket.set_read_timeout(Some(left))?;
        match socket.recv(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            result => return result,
        }
    }
}

/// Stops whatever a failed run leaves behind.
struct Cleanup {
    child: Option<std::process::Child>,
    cluster: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if let Some(pid) = postmaster_pid(&self.cluster) {
            // SIGINT: Postgres' fast shutdown.
            let _ = kill(Pid::from_raw(pid), Signal::SIGINT);
        }
    }
}

#[test]
#[ignore = "needs the .deb: make test builds it (HOLDFAST_TEST_DEB)"]
fn installed_package_starts_as_the_unit_starts_it() {
    let deb = the_deb();
    let tmp = reachable_tempdir();
    let root = tmp.path().join("root");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root));
    // Paths the unit names, mapped into the temporary root.
    let map = |path: &str| -> PathBuf {
        if path.starts_with("/usr/") || path.starts_with("/etc/") || path.starts_with("/var/") {
            root.join(path.trim_start_matches('/'))
        } else {
            PathBuf::from(path)
        }
    };
    let unit = unit_settings(&std::fs::read_to_string(root.join(UNIT)).expect("unit"));

    let user = service_user();
    let (uid, gid) = user
        .as_ref()
        .map(|u| (u.uid.as_raw(), u.gid.as_raw()))
        .unwrap_or((
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        ));
    if let Some(user) = &user {
        assert_eq!(user.name, unit["User"]);
    }

    // StateDirectory=holdfast: /var/lib/holdfast, owned by the user, 0700.
    let state = map(&format!("/var/lib/{}", unit["StateDirectory"]));
    std::fs::create_dir_all(&state).expect("state dir");
    std::os::unix::fs::chown(&state, Some(uid), Some(gid)).expect("chown state dir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).expect("chmod");

    // The config file as the postinst leaves it (root:holdfast 0640), with
    // one setting an operator changed, to see it is the file that is read.
    let config = map("/etc/holdfast/server.toml");
    let text = std::fs::read_to_string(&config).expect("config");
    assert!(
        text.contains("\n#db_pool_size = 32\n"),
        "the example lists db_pool_size"
    );
    std::fs::write(
        &config,
        text.replace("\n#db_pool_size = 32\n", "\ndb_pool_size = 7\n"),
    )
    .expect("edit config");
    if user.is_some() {
        std::os::unix::fs::chown(&config, Some(0), Some(gid)).expect("chown config");
    }
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o640)).expect("chmod");

    // The environment file (EnvironmentFile=-/etc/default/holdfast-server):
    // the operator's override of the port, as the unit would read it.
    let env_file_setting = unit["EnvironmentFile"].trim_start_matches('-').to_owned();
    let env_file = map(&env_file_setting);
    let mut env_text = std::fs::read_to_string(&env_file).expect("env file");
    env_text.push_str("HOLDFAST_LISTEN=127.0.0.1:0\n");
    std::fs::write(&env_file, &env_text).expect("env file");
    let env_vars: Vec<(String, String)> = env_text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();

    // systemd's notify socket.
    let notify_path = tmp.path().join("notify");
    let notify = UnixDatagram::bind(&notify_path).expect("notify socket");
    std::fs::set_permissions(&notify_path, std::fs::Permissions::from_mode(0o777)).expect("chmod");

    // ExecStart, its absolute paths mapped.
    let exec: Vec<String> = unit["ExecStart"]
        .split_whitespace()
        .map(String::from)
        .collect();
    let program = map(&exec[0]);
    let args: Vec<PathBuf> = exec[1..].iter().map(|a| map(a)).collect();
    let log = tmp.path().join("server.log");
    let mut cmd = Command::new(&program);
    cmd.args(&args)
        .env_clear()
        // What systemd gives a service of User=holdfast.
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("HOME", &state)
        .env("LANG", "C.UTF-8")
        .env("STATE_DIRECTORY", &state)
        .env("NOTIFY_SOCKET", &notify_path)
        .envs(env_vars.iter().map(|(k, v)| (k, v)))
        .current_dir(map(&unit["WorkingDirectory"]))
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&log).expect("log")));
    if let Some(user) = &user {
        cmd.env("USER", &user.name).env("LOGNAME", &user.name);
        cmd.uid(uid).gid(gid);
    }
    let started = Instant::now();
    let mut child = cmd.spawn().expect("start the installed binary");
    let stdout = child.stdout.take().expect("stdout");
    let mut guard = Cleanup {
        child: Some(child),
        cluster: state.join("postgres"),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("listening on ") {
                let _ = tx.send(url.to_owned());
            }
        }
    });

    // Readiness as systemd sees it.
    let mut buf = [0u8; 512];
    let n = recv_notify(&notify, &mut buf, Duration::from_secs(180))
        .unwrap_or_else(|e| panic!("no READY=1 ({e}); log:\n{}", tail(&log)));
    let message = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(message.lines().any(|l| l == "READY=1"), "{message}");
    eprintln!("READY=1 after {:?}", started.elapsed());
    let base = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the `listening on` line");
    assert!(
        message.contains(&base),
        "STATUS names the address: {message}"
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let status = rt.block_on(async {
        reqwest::get(format!("{base}/readyz"))
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    });
    assert_eq!(status, 200, "/readyz; log:\n{}", tail(&log));

    // It ran with the file's setting, as the user, on the state directory.
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        log_text.contains("db_pool_size: 7"),
        "the config file was read:\n{}",
        tail(&log)
    );
    let cluster = state.join("postgres");
    assert_eq!(
        std::fs::metadata(cluster.join("PG_VERSION"))
            .expect("cluster")
            .uid(),
        uid,
        "the cluster belongs to the service user"
    );
    let postmaster = postmaster_pid(&cluster).expect("postmaster running");
    let proc_uid = std::fs::metadata(format!("/proc/{postmaster}"))
        .expect("proc")
        .uid();
    assert_eq!(proc_uid, uid, "Postgres runs as the service user");

    // systemctl stop: SIGTERM to the main process (KillMode=mixed), which
    // must be gone, cleanly, within TimeoutStopSec.
    let child = guard.child.as_mut().expect("child");
    let stopping = Instant::now();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).expect("SIGTERM");
    let n = recv_notify(&notify, &mut buf, Duration::from_secs(180)).expect("STOPPING=1");
    assert!(
        String::from_utf8_lossy(&buf[..n])
            .lines()
            .any(|l| l == "STOPPING=1"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    let timeout = seconds(&unit["TimeoutStopSec"]);
    let exit = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            stopping.elapsed() < timeout,
            "not stopped within TimeoutStopSec={timeout:?}; log:\n{}",
            tail(&log)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        exit.success(),
        "graceful stop exits 0, got {exit}; log:\n{}",
        tail(&log)
    );
    eprintln!("stopped {:?} after SIGTERM", stopping.elapsed());
    assert_eq!(
        postmaster_pid(&cluster),
        None,
        "the cluster was stopped too"
    );
    drop(guard);
}
