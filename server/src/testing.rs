//! For test binaries that need Postgres: without `DATABASE_URL`,
//! `#[sqlx::test]` panics deep inside sqlx ("DATABASE_URL must be set") in
//! every test at once. [`require_database_url!`](crate::require_database_url) makes the binary say in one
//! line how to run it, before the harness starts, and exit.

/// What a test binary prints when `DATABASE_URL` is missing.
pub const MISSING_DATABASE_URL: &str =
    "these tests need Postgres: run `make test` (it starts and removes a private cluster), \
or `holdfast-server postgres start --data-dir DIR` and export the DATABASE_URL line it prints";

/// Called before `main` by [`require_database_url!`](crate::require_database_url). Exits with status 2
/// (the harness's own "could not run" code) when `DATABASE_URL` is unset.
pub fn exit_unless_database_url() {
    if std::env::var_os("DATABASE_URL").is_none() {
        eprintln!("{MISSING_DATABASE_URL}");
        std::process::exit(2);
    }
}

/// Put once in a test binary (its support module): checks `DATABASE_URL`
/// before the test harness runs, through an ELF constructor (`.init_array`,
/// what the `ctor` crate does, without the crate).
#[macro_export]
macro_rules! require_database_url {
    () => {
        #[cfg(target_os = "linux")]
        #[used]
        #[link_section = ".init_array"]
        static REQUIRE_DATABASE_URL: extern "C" fn() = {
            extern "C" fn check() {
                $crate::testing::exit_unless_database_url();
            }
            check
        };
    };
}
