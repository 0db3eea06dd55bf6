//! The bounded chaos suite `make test` runs: three seeds, each with at least
//! three server SIGKILLs, over 2,000 mutations in all, every invariant
//! checked after each kill and at the end.
//!
//! Against a build with `--features holdfast-server/broken-allocation` this
//! test must FAIL (see docs/GUARANTEES.md): that is the proof it can see an
//! oversell.

use holdfast_chaos::{run, Config, Keep};

// Without DATABASE_URL the binary says how to run it, once, and exits.
holdfast_server::require_database_url!();

const SEEDS: [u64; 3] = [1, 2, 3];
const MUTATIONS_PER_SEED: u64 = 600;
const KILLS_PER_SEED: u32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_seeds_of_chaos_keep_every_promise() {
    // Checked before main by require_database_url! below.
    let database_url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let mut total = 0;
    let mut failed = Vec::new();
    for seed in SEEDS {
        let report = run(Config {
            seed,
            desks: 4,
            orders: 8,
            mutations: Some(MUTATIONS_PER_SEED),
            minutes: None,
            kills: KILLS_PER_SEED,
            database_url: database_url.clone(),
            server_bin: env!("CARGO_BIN_EXE_holdfast-chaos-server").into(),
            keep: Keep::from_env(),
        })
        .await
        .unwrap_or_else(|e| panic!("seed {seed}: {e:#}"));
        // Printed whether it passed or not (`--nocapture` shows it).
        print!("{report}");
        if !report.ok() {
            failed.push(seed);
            continue;
        }
        assert!(
            report.server_kills >= KILLS_PER_SEED,
            "seed {seed}: only {} server kills",
            report.server_kills
        );
        total += report.attempted;
    }
    assert!(
        failed.is_empty(),
        "broken promises with seed(s) {failed:?} (reports above)"
    );
    println!("== {total} mutations over seeds {SEEDS:?}");
    assert!(total >= 2000, "only {total} mutations in all");
}
