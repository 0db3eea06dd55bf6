//! Where the device token lives: the OS keychain (Secret Service on Linux,
//! Keychain on macOS, Credential Manager on Windows), never SQLite.
//!
//! A machine with no keychain (a headless server, a container) gets a clear
//! error naming the one alternative: an explicit, opt-in plain file
//! ([`FileTokens`], the CLI's `--token-file` / `HOLDFAST_TOKEN_FILE`), which
//! says what it is every time it is used. Tests use [`MemoryTokens`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The keychain service name under which tokens are filed.
pub const SERVICE: &str = "holdfast";

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(
        "no OS keychain is available to keep the device token ({detail}). On a desktop, \
         unlock your keyring (GNOME Keyring, KWallet, macOS Keychain, Windows Credential \
         Manager). On a machine without one you may opt in to a plain file instead: \
         --token-file PATH (or HOLDFAST_TOKEN_FILE=PATH); anyone who can read that file can \
         act as you until you log out"
    )]
    NoKeychain { detail: String },
    #[error("keychain: {0}")]
    Keychain(String),
    #[error("token file {path}: {detail}")]
    File { path: String, detail: String },
}

/// Keeps one token per account (the store's id).
pub trait TokenStore: Send + Sync {
    fn load(&self, account: &str) -> Result<Option<String>, TokenError>;
    fn save(&self, account: &str, token: &str) -> Result<(), TokenError>;
    fn delete(&self, account: &str) -> Result<(), TokenError>;
    /// Where tokens go, for `status`.
    fn describe(&self) -> String;
}

/// The OS keychain through the `keyring` crate.
#[derive(Debug, Default, Clone, Copy)]
pub struct KeyringTokens;

impl KeyringTokens {
    fn entry(account: &str) -> Result<keyring::Entry, TokenError> {
        keyring::Entry::new(SERVICE, account).map_err(map_keyring)
    }
}

fn map_keyring(e: keyring::Error) -> TokenError {
    match e {
        keyring::Error::NoStorageAccess(err) | keyring::Error::PlatformFailure(err) => {
            TokenError::NoKeychain {
                detail: err.to_string(),
            }
        }
        other => TokenError::Keychain(other.to_string()),
    }
}

impl TokenStore for KeyringTokens {
    fn load(&self, account: &str) -> Result<Option<String>, TokenError> {
        match Self::entry(account)?.get_password() {
            Ok(token) => Ok(Some(token)),
            Err(keyring::Error::NoEntry) => Ok(None),
            Err(e) => Err(map_keyring(e)),
        }
    }

    fn save(&self, account: &str, token: &str) -> Result<(), TokenError> {
        Self::entry(account)?
            .set_password(token)
            .map_err(map_keyring)
    }

    fn delete(&self, account: &str) -> Result<(), TokenError> {
        match Self::entry(account)?.delete_credential() {
            Ok(()) | Err(keyring::Error::NoEntry) => Ok(()),
            Err(e) => Err(map_keyring(e)),
        }
    }

    fn describe(&self) -> String {
        "OS keychain".to_owned()
    }
}

/// The opt-in fallback: tokens in a plain JSON file, readable only by its
/// owner (mode 0600 on Unix). Weaker than a keychain — anyone who can read
/// the file (a backup, root, a stolen disk) can use the token — so it is
/// used only when asked for by name, and says so.
#[derive(Debug)]
pub struct FileTokens {
    path: PathBuf,
}

impl FileTokens {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FileTokens { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, detail: impl std::fmt::Display) -> TokenError {
        TokenError::File {
            path: self.path.display().to_string(),
            detail: detail.to_string(),
        }
    }

    fn read(&self) -> Result<BTreeMap<String, String>, TokenError> {
        match std::fs::read(&self.path) {
            Ok(bytes) if bytes.is_empty() => Ok(BTreeMap::new()),
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| self.err(e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(self.err(e)),
        }
    }

    /// Writes a sibling temp file and renames it over, so a crash never
    /// leaves half a file.
    fn write(&self, tokens: &BTreeMap<String, String>) -> Result<(), TokenError> {
        use std::io::Write;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| self.err(e))?;
        }
        let mut tmp = self.path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options.open(&tmp).map_err(|e| self.err(e))?;
        let bytes = serde_json::to_vec_pretty(tokens).map_err(|e| self.err(e))?;
        file.write_all(&bytes).map_err(|e| self.err(e))?;
        file.sync_all().map_err(|e| self.err(e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| self.err(e))
    }
}

impl TokenStore for FileTokens {
    fn load(&self, account: &str) -> Result<Option<String>, TokenError> {
        Ok(self.read()?.remove(account))
    }

    fn save(&self, account: &str, token: &str) -> Result<(), TokenError> {
        let mut tokens = self.read()?;
        tokens.insert(account.to_owned(), token.to_owned());
        self.write(&tokens)
    }

    fn delete(&self, account: &str) -> Result<(), TokenError> {
        let mut tokens = self.read()?;
        if tokens.remove(account).is_some() {
            self.write(&tokens)?;
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!(
            "PLAIN FILE {} (opt-in fallback: no keychain; readable by anyone with access to the file)",
            self.path.display()
        )
    }
}

/// Tokens in memory, for tests.
#[derive(Debug, Default)]
pub struct MemoryTokens {
    tokens: Mutex<BTreeMap<String, String>>,
}

impl MemoryTokens {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl TokenStore for MemoryTokens {
    fn load(&self, account: &str) -> Result<Option<String>, TokenError> {
        Ok(self.map().get(account).cloned())
    }

    fn save(&self, account: &str, token: &str) -> Result<(), TokenError> {
        self.map().insert(account.to_owned(), token.to_owned());
        Ok(())
    }

    fn delete(&self, account: &str) -> Result<(), TokenError> {
        self.map().remove(account);
        Ok(())
    }

    fn describe(&self) -> String {
        "memory (tests)".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_tokens_round_trip_with_owner_only_permissions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tokens = FileTokens::new(dir.path().join("sub/tokens.json"));
        assert_eq!(tokens.load("a").expect("load"), None);
        tokens.save("a", "secret-a").expect("save");
        tokens.save("b", "secret-b").expect("save");
        assert_eq!(tokens.load("a").expect("load").as_deref(), Some("secret-a"));
        tokens.delete("a").expect("delete");
        assert_eq!(tokens.load("a").expect("load"), None);
        assert_eq!(tokens.load("b").expect("load").as_deref(), Some("secret-b"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(tokens.path())
                .expect("meta")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(tokens.describe().contains("PLAIN FILE"));
    }

    /// The desktop default for real, through a Secret Service. `make test`
    /// runs it under scripts/with-keyring.sh (gnome-keyring, unlocked, on a
    /// private session bus), which sets HOLDFAST_TEST_SECRET_SERVICE; then a
    /// keyring that does not work fails it. A plain `cargo test` (no bus)
    /// skips it and says so.
    #[test]
    fn keychain_round_trip() {
        if std::env::var_os("HOLDFAST_TEST_SECRET_SERVICE").is_none() {
            eprintln!(
                "keychain_round_trip skipped: needs a Secret Service; \
                 scripts/with-keyring.sh cargo test -p holdfast-client keychain"
            );
            return;
        }
        let account = format!("test-{}", std::process::id());
        let k = KeyringTokens;
        assert_eq!(k.describe(), "OS keychain");
        assert_eq!(k.load(&account).expect("load"), None);
        k.save(&account, "tok-1").expect("save");
        // Every call opens a new entry: what it reads came from the keyring,
        // not from the object that wrote it.
        assert_eq!(k.load(&account).expect("load").as_deref(), Some("tok-1"));
        k.save(&account, "tok-2").expect("overwrite");
        assert_eq!(k.load(&account).expect("load").as_deref(), Some("tok-2"));
        k.delete(&account).expect("delete");
        assert_eq!(k.load(&account).expect("load"), None);
        k.delete(&account).expect("deleting nothing is fine");
        eprintln!("keychain-ran: holdfast-client KeyringTokens save/load/overwrite/delete");
    }

    /// With no Secret Service (no D-Bus session here), the keychain answers
    /// with the message that names the opt-in fallback, not a mock that
    /// silently keeps nothing.
    #[test]
    fn no_keychain_says_what_to_do() {
        if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some() {
            return; // A session bus exists: this machine may have a keychain.
        }
        match KeyringTokens.save("holdfast-test", "x") {
            Err(e @ TokenError::NoKeychain { .. }) => {
                assert!(e.to_string().contains("--token-file"), "{e}");
            }
            other => panic!("expected NoKeychain, got {other:?}"),
        }
    }
}
