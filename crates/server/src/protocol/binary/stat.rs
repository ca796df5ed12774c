//! STAT: the same statistics as the text `stats` family, one response per value (the name
//! as key, the value as value), closed by a response with neither. Which key selects which
//! group follows memcached 1.6.18's binary protocol, quirks included, because clients that
//! work against it send exactly these keys:
//!
//! ```text
//!   ""                         general stats
//!   "reset..." "settings..."   matched as prefixes ("resetxyz" resets)
//!   "detail" + " on..." / " off..." / " dump..."   prefixes again; anything else: Not found
//!   "items" "slabs" "sizes"    exact
//!   anything else ("conns", "cachedump ...", "extstore")   Not found
//! ```

use mnemo_proto::binary::Status;

use super::Reply;
use crate::{stats, Shared};

pub(super) fn stat(key: &[u8], sh: &Shared, r: &mut Reply<'_>) {
    let mut text = Vec::new();
    if key.is_empty() {
        stats::general(sh, &mut text);
    } else if key.starts_with(b"reset") {
        sh.reset_stats();
        text.extend_from_slice(b"END\r\n");
    } else if key.starts_with(b"settings") {
        stats::settings(sh, &mut text);
    } else if let Some(sub) = key.strip_prefix(b"detail") {
        if !sh.config.dump_enabled {
            // -X: memcached answers the binary detail group as an unknown one.
            r.error(Status::KeyNotFound);
            return;
        }
        if sub.starts_with(b" dump") {
            // The whole text dump (PREFIX lines and END) is the value of one statistic.
            let mut dump = Vec::new();
            sh.detail.dump(&mut dump);
            r.ok(0, &[], b"detailed", &dump);
        } else if sub.starts_with(b" on") {
            sh.detail.set_enabled(true);
        } else if sub.starts_with(b" off") {
            sh.detail.set_enabled(false);
        } else {
            r.error(Status::KeyNotFound);
            return;
        }
        text.extend_from_slice(b"END\r\n");
    } else {
        match key {
            b"items" => stats::items(sh, &mut text),
            b"slabs" => stats::slabs(sh, &mut text),
            b"sizes" => stats::sizes(sh, &mut text),
            // sizes_enable|sizes_disable: gone in memcached 1.6.25, unknown groups now.
            _ => {
                r.error(Status::KeyNotFound);
                return;
            }
        }
    }
    for line in text.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(rest) = line.strip_prefix(b"STAT ") else {
            continue;
        };
        let (name, value) = match rest.iter().position(|&b| b == b' ') {
            Some(sp) => (&rest[..sp], &rest[sp + 1..]),
            None => (rest, &[][..]),
        };
        r.ok(0, &[], name, value);
    }
    // The text group's END is the closing response.
    r.ok(0, &[], &[], &[]);
}
