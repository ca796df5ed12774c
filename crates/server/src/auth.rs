//! Credentials for text-protocol auth (-Y) and SASL PLAIN (-S): a file of `user:password`
//! lines (memcached's -Y format; blank lines and lines starting with '#' are ignored), or for
//! -S without one, the users of Cyrus SASL's sasldb that memcached -S would use (`sasldb`);
//! loaded at start-up and again on SIGHUP (signals.rs).

pub mod sasldb;

use std::collections::HashMap;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot read auth file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("auth file {path}, line {line}: expected user:password")]
    Format { path: String, line: usize },
    #[error(
        "-S: cannot read the SASL user database {path}: {why}; put its users in a user:password \
         file (sasldblistusers2 -f {path} lists them) and pass it with -Y FILE or MEMCACHED_SASL_PWDB=FILE"
    )]
    Sasldb { path: String, why: String },
}

/// Authentication attempts (text -Y and SASL) and the failed ones (`stats` auth_cmds,
/// auth_errors).
#[derive(Default, Debug)]
pub struct Attempts {
    pub cmds: std::sync::atomic::AtomicU64,
    pub errors: std::sync::atomic::AtomicU64,
}

#[derive(Default, Debug)]
pub struct Credentials {
    users: HashMap<Vec<u8>, Vec<u8>>,
}

impl Credentials {
    /// The users the configuration names: its password file, else its sasldb, else none.
    pub fn from_config(config: &crate::Config) -> Result<Credentials, AuthError> {
        match (&config.auth_file, &config.sasldb) {
            (Some(path), _) => Credentials::load(path),
            (None, Some(path)) => Credentials::load_sasldb(path),
            (None, None) => Ok(Credentials::default()),
        }
    }

    /// The users (of this host's realm) and passwords of a Cyrus sasldb.
    pub fn load_sasldb(path: &Path) -> Result<Credentials, AuthError> {
        let err = |why| AuthError::Sasldb {
            path: path.display().to_string(),
            why,
        };
        let all = sasldb::read_users(path).map_err(err)?;
        Ok(Credentials {
            users: sasldb::users_for_this_host(all).into_iter().collect(),
        })
    }

    pub fn load(path: &Path) -> Result<Credentials, AuthError> {
        let shown = path.display().to_string();
        let text = std::fs::read(path).map_err(|source| AuthError::Read {
            path: shown.clone(),
            source,
        })?;
        let mut users = HashMap::new();
        for (i, raw) in text.split(|&b| b == b'\n').enumerate() {
            let line = raw.strip_suffix(b"\r").unwrap_or(raw);
            if line.is_empty() || line[0] == b'#' {
                continue;
            }
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                return Err(AuthError::Format {
                    path: shown,
                    line: i + 1,
                });
            };
            users.insert(line[..colon].to_vec(), line[colon + 1..].to_vec());
        }
        Ok(Credentials { users })
    }

    /// Compare in time independent of where the password differs.
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        match self.users.get(user) {
            Some(want) => {
                want.len() == password.len()
                    && want
                        .iter()
                        .zip(password)
                        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                        == 0
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_checks() {
        let dir = std::env::temp_dir().join(format!("mnemo-auth-{}", std::process::id()));
        std::fs::write(&dir, "# users\nalice:s3cret\n\nbob:pa:ss\r\n").unwrap();
        let c = Credentials::load(&dir).unwrap();
        assert!(c.check(b"alice", b"s3cret"));
        assert!(c.check(b"bob", b"pa:ss"));
        assert!(!c.check(b"alice", b"s3cre"));
        assert!(!c.check(b"carol", b""));
        std::fs::write(&dir, "nocolon\n").unwrap();
        assert!(matches!(
            Credentials::load(&dir),
            Err(AuthError::Format { line: 1, .. })
        ));
        let _ = std::fs::remove_file(&dir);
    }
}
