//! The ceiling for items 1 and 2 (issue 16): Postgres's own client,
//! `pgbench -M prepared`, running the raw baseline's one-commit allocation
//! (alloc.rs: claim the key, the conditional update, ledger, outbox, feed
//! row, store the response, one commit) statement for statement, on the same
//! cluster, with the same clients and window, interleaved with the others.
//!
//! Each client's targets go into a table first (`bench_pgbench_targets`,
//! by pgbench's `client_id` and a position), and the statements reach them
//! through a subquery on its primary key: no extra round trip. Completion
//! times come from pgbench's per-transaction log (`-l`), so, as in
//! `load::run`, only transactions that end inside the measured window
//! count, after the same warm-up.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;
use uuid::Uuid;

use crate::alloc::BASELINE_ENABLE_SEQSCAN;
use crate::load::{Latencies, Measured, Window};
use crate::setup::Target;
use holdfast_server::db::tenancy::TENANT_ROLE;

/// Which transaction pgbench runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Script {
    /// The seed's three commits instead of our one (item 3).
    pub three: bool,
    /// Bound to the tenant under row-level security (the RLS rows).
    pub bound: bool,
}

/// pgbench, and where and as whom it allocates.
#[derive(Debug, Clone)]
pub struct Pgbench {
    bin: PathBuf,
    url: String,
    tenant: Uuid,
    user: Uuid,
}

impl Pgbench {
    /// The `pgbench` beside the cluster's `postgres` (Debian's postgresql
    /// package ships it).
    pub fn find(url: &str, tenant: Uuid, user: Uuid) -> anyhow::Result<Pgbench> {
        let beside_postgres = holdfast_server::pg::find_binaries()
            .ok()
            .map(|dir| dir.join("pgbench"));
        let on_path: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join("pgbench"))
                    .collect()
            })
            .unwrap_or_default();
        let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let version = e.file_name().to_str()?.parse::<u32>().ok()?;
                Some((version, e.path().join("bin/pgbench")))
            })
            .collect();
        debian.sort();
        let bin = beside_postgres
            .into_iter()
            .chain(on_path)
            .chain(debian.into_iter().rev().map(|(_, p)| p))
            .find(|p| p.is_file())
            .context(
                "pgbench is missing: the ceiling for items 1 and 2 is pgbench, from Debian's \
                 postgresql package (make bench installs it)",
            )?;
        Ok(Pgbench {
            bin,
            url: url.to_owned(),
            tenant,
            user,
        })
    }

    pub fn bin(&self) -> &Path {
        &self.bin
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Writes each client's targets (truncated to the shortest list, so
    /// every client draws from as many) and returns that length.
    pub async fn load_targets(
        &self,
        pool: &PgPool,
        per_client: &[Vec<Target>],
    ) -> anyhow::Result<usize> {
        let len = per_client.iter().map(Vec::len).min().unwrap_or(0);
        anyhow::ensure!(len > 0, "no targets for pgbench");
        sqlx::query(
            "create table if not exists bench_pgbench_targets (
                 client int, n int, order_id uuid, line_id uuid, sku_id uuid,
                 primary key (client, n))",
        )
        .execute(pool)
        .await?;
        sqlx::query("truncate bench_pgbench_targets")
            .execute(pool)
            .await?;
        let (mut clients, mut ns, mut orders, mut lines, mut skus) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (client, targets) in per_client.iter().enumerate() {
            for (n, t) in targets.iter().take(len).enumerate() {
                clients.push(i32::try_from(client)?);
                ns.push(i32::try_from(n)?);
                orders.push(t.order);
                lines.push(t.line);
                skus.push(t.sku);
            }
        }
        sqlx::query(
            "insert into bench_pgbench_targets
             select * from unnest($1::int[], $2::int[], $3::uuid[], $4::uuid[], $5::uuid[])",
        )
        .bind(&clients)
        .bind(&ns)
        .bind(&orders)
        .bind(&lines)
        .bind(&skus)
        .execute(pool)
        .await?;
        // The RLS variant reads it as the tenant role.
        sqlx::query(&format!(
            "grant select on bench_pgbench_targets to {TENANT_ROLE}"
        ))
        .execute(pool)
        .await?;
        sqlx::query("analyze bench_pgbench_targets")
            .execute(pool)
            .await?;
        Ok(len)
    }

    /// The transaction, as pgbench's script language writes it: the one
    /// commit, or (`shape.three`) the seed's shape — claim the key and
    /// commit, do the work and commit, store the response and commit; bound
    /// to the tenant under row-level security (`shape.bound`) as
    /// `db::begin_for_tenant` binds it, one statement after `BEGIN`.
    fn script(&self, len: usize, shape: Script) -> String {
        let (tenant, user) = (self.tenant, self.user);
        let target = |column: &str| {
            format!(
                "(select {column} from bench_pgbench_targets where client = :client_id and n = :n)"
            )
        };
        let (order, line, sku) = (target("order_id"), target("line_id"), target("sku_id"));
        let key = "'pgb-' || :client_id::text || '-' || :r::text";
        let bind = format!(
            "select set_config('role', '{TENANT_ROLE}', true), set_config('app.tenant_id', '{tenant}', true);\n"
        );
        let begin = if shape.bound {
            format!("BEGIN;\n{bind}")
        } else {
            "BEGIN;\n".to_owned()
        };
        let split = if shape.three {
            format!("COMMIT;\n{begin}")
        } else {
            String::new()
        };
        format!(
            "\\set n random(0, {last})
\\set r random(1, 1000000000000000)
{begin}insert into idempotency_keys (tenant_id, key, fingerprint, status_code, response_body) values ('{tenant}', {key}, 'pgbench', 0, ''::bytea) on conflict (tenant_id, key) do nothing;
{split}update sku_positions set allocated = allocated + 1, version = version + 1, event_seq = event_seq + 1, updated_at = now() where tenant_id = '{tenant}' and sku_id = {sku} and on_hand + on_order - allocated >= 1 returning on_hand + on_order - allocated as ats, version, event_seq as seq \\gset
insert into allocation_ledger (tenant_id, sku_id, order_id, line_id, delta, reason, idempotency_key, created_by) values ('{tenant}', {sku}, {order}, {line}, 1, 'allocate', {key}, '{user}');
insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload) values ('{tenant}', 'sku.ats_changed', 'sku', {sku}, :seq::bigint, jsonb_build_object('type', 'sku.ats_changed', 'timestamp', now(), 'data', jsonb_build_object('tenant_id', '{tenant}'::uuid, 'sku_id', {sku}, 'sequence', :seq::bigint, 'version', :version::bigint, 'ats', :ats::bigint)));
insert into changes (tenant_id, kind, doc_id, version) values ('{tenant}', 'sku', {sku}, :version::bigint);
{split}update idempotency_keys set status_code = 200, response_body = convert_to(json_build_object('sku_id', {sku}, 'line_id', {line}, 'ats_after', :ats::bigint)::text, 'UTF8') where tenant_id = '{tenant}' and key = {key};
COMMIT;
",
            last = len - 1,
        )
    }

    /// One run at `clients` connections over the window.
    pub async fn run(
        &self,
        clients: usize,
        len: usize,
        shape: Script,
        window: Window,
    ) -> anyhow::Result<Measured> {
        let dir = std::env::temp_dir().join(format!("holdfast-pgbench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let script = dir.join("allocate.sql");
        std::fs::write(&script, self.script(len, shape))?;
        // Whole seconds, and one more: the window is cut from the log.
        let seconds = (window.warmup + window.measure).as_secs_f64().ceil() as u64 + 1;
        let out = tokio::process::Command::new(&self.bin)
            // Planned as the raw client's transactions are (alloc.rs).
            .env(
                "PGOPTIONS",
                format!("-c enable_seqscan={BASELINE_ENABLE_SEQSCAN}"),
            )
            .args(["-n", "-M", "prepared", "-l"])
            .arg(format!("--log-prefix={}", dir.join("log").display()))
            .arg(format!("--client={clients}"))
            .arg(format!("--jobs={}", clients.min(2)))
            .arg(format!("--time={seconds}"))
            .arg("--file")
            .arg(&script)
            .arg(&self.url)
            .output()
            .await
            .with_context(|| format!("running {}", self.bin.display()))?;
        anyhow::ensure!(
            out.status.success(),
            "pgbench failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let done = read_logs(&dir)?;
        let _ = std::fs::remove_dir_all(&dir);
        Ok(measured(&done, window))
    }
}

/// One finished transaction from pgbench's log: when it ended (µs since
/// the epoch) and how long it took.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Done {
    end_us: u64,
    latency: Duration,
}

/// `client_id transaction_no time_us script_no epoch_s epoch_us`, one line
/// per transaction, in one file per pgbench thread.
fn parse_log(text: &str) -> Vec<Done> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<u64> = line
                .split_whitespace()
                .take(6)
                .map(|x| x.parse().ok())
                .collect::<Option<_>>()?;
            (f.len() == 6).then(|| Done {
                end_us: f[4] * 1_000_000 + f[5],
                latency: Duration::from_micros(f[2]),
            })
        })
        .collect()
}

fn read_logs(dir: &Path) -> anyhow::Result<Vec<Done>> {
    let mut done = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("log"))
        {
            done.extend(parse_log(&std::fs::read_to_string(&path)?));
        }
    }
    anyhow::ensure!(!done.is_empty(), "pgbench logged no transaction");
    Ok(done)
}

/// The transactions that ended inside the measured window, which opens one
/// warm-up after the first transaction started.
fn measured(done: &[Done], window: Window) -> Measured {
    let first_start = done
        .iter()
        .map(|d| d.end_us.saturating_sub(d.latency.as_micros() as u64))
        .min()
        .unwrap_or(0);
    let from = first_start + window.warmup.as_micros() as u64;
    let to = from + window.measure.as_micros() as u64;
    let inside: Vec<Duration> = done
        .iter()
        .filter(|d| (from..to).contains(&d.end_us))
        .map(|d| d.latency)
        .collect();
    Measured {
        ops: inside.len() as u64,
        elapsed: window.measure,
        latencies: Latencies::new(inside),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_gives_each_transactions_end_and_latency() {
        let done = parse_log("0 0 1234 0 1700000000 500000\n1 7 99 0 1700000001 5\ngarbage\n");
        assert_eq!(
            done,
            vec![
                Done {
                    end_us: 1_700_000_000_500_000,
                    latency: Duration::from_micros(1234)
                },
                Done {
                    end_us: 1_700_000_001_000_005,
                    latency: Duration::from_micros(99)
                },
            ]
        );
    }

    #[test]
    fn only_transactions_ending_inside_the_window_count() {
        // The first starts at t = 0 s; warm-up 1 s, measure 2 s: [1 s, 3 s).
        let at = |s: f64| Done {
            end_us: (s * 1e6) as u64 + 1_000,
            latency: Duration::from_micros(1_000),
        };
        let done = [
            at(0.0),
            at(0.5),
            at(1.0),
            at(2.0),
            at(2.9),
            at(3.0),
            at(4.0),
        ];
        let window = Window {
            warmup: Duration::from_secs(1),
            measure: Duration::from_secs(2),
        };
        let m = measured(&done, window);
        assert_eq!(m.ops, 3);
        assert_eq!(m.elapsed, Duration::from_secs(2));
        assert!((m.rate() - 1.5).abs() < 1e-9);
    }
}
