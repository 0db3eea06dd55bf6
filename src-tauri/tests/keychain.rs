//! The desktop app's token store by default, for real: with no
//! HOLDFAST_TOKEN_FILE, `token_store()` is the OS keychain (the Secret Service
//! on Linux), and the engine the app opens keeps its token there.
//!
//! `make test` runs it under scripts/with-keyring.sh (gnome-keyring, unlocked,
//! on a private session bus), which sets HOLDFAST_TEST_SECRET_SERVICE; a
//! keyring that does not work fails it then. A plain `cargo test` skips it.

use holdfast_desktop::{open_engine, token_store, TOKEN_FILE_ENV};

#[test]
fn keychain_is_the_desktop_default_token_store() {
    if std::env::var_os("HOLDFAST_TEST_SECRET_SERVICE").is_none() {
        eprintln!(
            "keychain_is_the_desktop_default_token_store skipped: needs a Secret Service; \
             scripts/with-keyring.sh cargo test -p holdfast-desktop keychain"
        );
        return;
    }
    assert!(
        std::env::var_os(TOKEN_FILE_ENV).is_none(),
        "{TOKEN_FILE_ENV} is set: this test is about the default, the keychain"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let engine = open_engine(dir.path()).expect("open the desktop's engine");
    let status = engine.status().expect("status");
    assert_eq!(
        status.token_store, "OS keychain",
        "what the status bar says"
    );

    // Two stores, as two launches of the app would have: what one saves the
    // other reads back from the keyring.
    let account = format!("desktop-test-{}", std::process::id());
    let (first, second) = (token_store(), token_store());
    assert_eq!(first.describe(), "OS keychain");
    assert_eq!(second.load(&account).expect("load"), None);
    first.save(&account, "device-token-1").expect("save");
    assert_eq!(
        second.load(&account).expect("load").as_deref(),
        Some("device-token-1")
    );
    second.delete(&account).expect("delete");
    assert_eq!(first.load(&account).expect("load"), None);
    // Nothing but the store went to the data dir: no token file.
    for entry in std::fs::read_dir(dir.path()).expect("read dir") {
        let name = entry.expect("entry").file_name();
        let name = name.to_string_lossy();
        assert!(
            name.starts_with(holdfast_desktop::STORE_FILE),
            "unexpected file in the data dir: {name}"
        );
    }
    eprintln!("keychain-ran: holdfast-desktop token_store() default is the Secret Service");
}
