//! Cyrus SASL's set-up, as memcached -S finds it, so `mnemod -S` starts in the same
//! environment: the configuration file `memcached.conf` (in `$SASL_CONF_PATH`, else
//! /etc/sasl/ or /etc/sasl2/) names the user database (`sasldb_path`, default /etc/sasldb2),
//! and the users and their passwords are read from that database.
//!
//! The sasldb is a Berkeley DB hash file (what Debian's libsasl2-modules-db writes; other
//! builds use gdbm or LMDB, which are refused with an error that says how to move the users
//! to a `-Y` file). Its records are `user NUL realm NUL property` -> value; the password is
//! the `userPassword` property, stored in clear by Cyrus.
//!
//! ```text
//!   page 0: hash metadata     magic 0x061561 at byte 12 (byte order tells the file's), page size at 20
//!   page n: 26-byte header    entries (u16) at 20, type at 25: 13 (P_HASH) or 2 (old P_HASH)
//!           entries x u16     offsets of key/data items, in pairs; an item runs to the previous
//!                             item's offset (the page's end for the first)
//!   item:   type byte         1 = H_KEYDATA, then the bytes; 3 = H_OFFPAGE (overflow pages)
//! ```

use std::path::{Path, PathBuf};

/// Where memcached looks when `SASL_CONF_PATH` is not set (its sasl_defs.c).
const CONF_LOCATIONS: &[&str] = &["/etc/sasl/memcached.conf", "/etc/sasl2/memcached.conf"];
/// Cyrus's default user database.
const DEFAULT_SASLDB: &str = "/etc/sasldb2";
/// The property holding a user's password.
const PASSWORD_PROPERTY: &[u8] = b"userPassword";

const HASH_MAGIC: u32 = 0x0006_1561;
const P_HASH_UNSORTED: u8 = 2;
const P_HASH: u8 = 13;
const H_KEYDATA: u8 = 1;
const PAGE_HEADER: usize = 26;

/// One `userPassword` record: user, realm, password.
pub type Record = (Vec<u8>, Vec<u8>, Vec<u8>);

/// The user database memcached -S would use here, from its SASL configuration. None: there
/// is no configuration file to follow.
pub fn configured_db() -> Result<Option<PathBuf>, String> {
    let conf = match std::env::var_os("SASL_CONF_PATH") {
        // A directory (memcached hands it to Cyrus as the config path).
        Some(dir) => PathBuf::from(dir).join("memcached.conf"),
        None => match CONF_LOCATIONS.iter().map(Path::new).find(|p| p.exists()) {
            Some(p) => p.to_path_buf(),
            None => return Ok(None),
        },
    };
    let text = match std::fs::read_to_string(&conf) {
        Ok(t) => t,
        // memcached starts without a config file too: Cyrus then uses its defaults.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Some(DEFAULT_SASLDB.into()))
        }
        Err(e) => return Err(format!("cannot read {}: {e}", conf.display())),
    };
    let mut db = PathBuf::from(DEFAULT_SASLDB);
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "sasldb_path" => db = value.into(),
            // Only sasldb's own checking (auxprop, the default) can be followed.
            "pwcheck_method" if !value.split_whitespace().all(|m| m == "auxprop") => {
                return Err(format!(
                    "{}: pwcheck_method {value} is not supported (only the sasldb, auxprop)",
                    conf.display()
                ));
            }
            "auxprop_plugin" if !value.split_whitespace().all(|m| m == "sasldb") => {
                return Err(format!(
                    "{}: auxprop_plugin {value} is not supported (only sasldb)",
                    conf.display()
                ));
            }
            _ => {}
        }
    }
    Ok(Some(db))
}

/// Every (user, realm, password) the database holds.
pub fn read_users(path: &Path) -> Result<Vec<Record>, String> {
    let data = std::fs::read(path).map_err(|e| e.to_string())?;
    parse(&data)
}

fn parse(data: &[u8]) -> Result<Vec<Record>, String> {
    let not_bdb =
        || "not a Berkeley DB hash file (a gdbm or LMDB sasldb cannot be read)".to_string();
    let word = |at: usize, swap: bool| -> Option<u32> {
        let b: [u8; 4] = data.get(at..at + 4)?.try_into().ok()?;
        Some(if swap {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    };
    let swap = match (word(12, false), word(12, true)) {
        (Some(HASH_MAGIC), _) => false,
        (_, Some(HASH_MAGIC)) => true,
        _ => return Err(not_bdb()),
    };
    let page_size = word(20, swap).ok_or_else(not_bdb)? as usize;
    if !(512..=65_536).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(not_bdb());
    }
    // An encrypted or checksummed file keeps extra bytes in its page headers.
    if data.get(24).is_some_and(|&flags| flags != 0) {
        return Err("encrypted or checksummed Berkeley DB files are not supported".into());
    }
    let mut users = Vec::new();
    for page in data.chunks_exact(page_size).skip(1) {
        if page[25] != P_HASH && page[25] != P_HASH_UNSORTED {
            continue;
        }
        let entries = half_in(page, 20, swap);
        let offsets: Vec<usize> = (0..entries)
            .filter_map(|i| half_in_opt(page, PAGE_HEADER + 2 * i, swap))
            .collect();
        if offsets.len() != entries || !entries.is_multiple_of(2) {
            return Err("a damaged hash page".into());
        }
        let item = |i: usize| -> Result<&[u8], String> {
            let end = if i == 0 { page_size } else { offsets[i - 1] };
            let start = offsets[i];
            let bytes = page
                .get(start..end)
                .filter(|b| !b.is_empty())
                .ok_or("a damaged hash page")?;
            match bytes[0] {
                H_KEYDATA => Ok(&bytes[1..]),
                _ => Err("records stored on overflow or duplicate pages are not supported".into()),
            }
        };
        for pair in 0..entries / 2 {
            let (key, value) = (item(2 * pair)?, item(2 * pair + 1)?);
            let mut parts = key.split(|&b| b == 0);
            if let (Some(user), Some(realm), Some(prop), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            {
                if prop == PASSWORD_PROPERTY {
                    users.push((user.to_vec(), realm.to_vec(), value.to_vec()));
                }
            }
        }
    }
    Ok(users)
}

fn half_in_opt(page: &[u8], at: usize, swap: bool) -> Option<usize> {
    let b: [u8; 2] = page.get(at..at + 2)?.try_into().ok()?;
    Some(usize::from(if swap {
        u16::from_be_bytes(b)
    } else {
        u16::from_le_bytes(b)
    }))
}

fn half_in(page: &[u8], at: usize, swap: bool) -> usize {
    half_in_opt(page, at, swap).unwrap_or(0)
}

/// The users memcached would authenticate: Cyrus's PLAIN looks a user up in the server's
/// realm, which is the host name unless the database has a single realm.
pub fn users_for_this_host(all: Vec<Record>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let host = host_name();
    let mut realms: Vec<&[u8]> = all.iter().map(|(_, r, _)| r.as_slice()).collect();
    realms.sort();
    realms.dedup();
    let only = if realms.len() == 1 {
        Some(realms[0].to_vec())
    } else {
        None
    };
    all.iter()
        .filter(|(_, realm, _)| {
            Some(realm) == only.as_ref() || host.as_deref() == Some(realm.as_slice())
        })
        .map(|(u, _, p)| (u.clone(), p.clone()))
        .collect()
}

fn host_name() -> Option<Vec<u8>> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(buf[..end].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A two-page hash file as Berkeley DB 5.3 lays one out (little-endian, 512-byte pages).
    fn file(records: &[(&[u8], &[u8])]) -> Vec<u8> {
        let ps = 512;
        let mut f = vec![0u8; ps * 2];
        f[12..16].copy_from_slice(&HASH_MAGIC.to_le_bytes());
        f[20..24].copy_from_slice(&(ps as u32).to_le_bytes());
        let page = &mut f[ps..];
        page[25] = P_HASH;
        page[20..22].copy_from_slice(&((records.len() * 2) as u16).to_le_bytes());
        let mut end = ps;
        let mut slot = PAGE_HEADER;
        for (k, v) in records {
            for item in [*k, *v] {
                let start = end - item.len() - 1;
                page[start] = H_KEYDATA;
                page[start + 1..end].copy_from_slice(item);
                page[slot..slot + 2].copy_from_slice(&(start as u16).to_le_bytes());
                slot += 2;
                end = start;
            }
        }
        f
    }

    #[test]
    fn reads_user_passwords() {
        let f = file(&[
            (b"alice\0vm\0userPassword", b"secret"),
            (b"bob\0vm\0cmusaslsecretPLAIN", b"x"),
        ]);
        assert_eq!(
            parse(&f).unwrap(),
            vec![(b"alice".to_vec(), b"vm".to_vec(), b"secret".to_vec())]
        );
        assert!(parse(b"GDBM nonsense that is long enough to have a header").is_err());
    }

    #[test]
    fn one_realm_or_the_host_s() {
        let u = |n: &str, r: &str| (n.as_bytes().to_vec(), r.as_bytes().to_vec(), b"p".to_vec());
        assert_eq!(users_for_this_host(vec![u("a", "elsewhere")]).len(), 1);
        assert_eq!(
            users_for_this_host(vec![u("a", "one"), u("b", "two")]).len(),
            0
        );
    }
}
