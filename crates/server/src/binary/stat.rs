//! STAT: the same statistics as the text `stats` family, one response per value (the name
//! as key, the value as value), closed by a response with neither.

use mnemo_proto::binary::Status;

use super::Reply;
use crate::{stats, Shared};

pub(super) fn stat(key: &[u8], sh: &Shared, r: &mut Reply<'_>) {
    let mut text = Vec::new();
    // memcached matches "reset" and "settings" as prefixes, the rest exactly.
    if key.is_empty() {
        stats::general(sh, &mut text);
    } else if key.starts_with(b"reset") {
        sh.reset_stats();
    } else if key.starts_with(b"settings") {
        stats::settings(sh, &mut text);
    } else if key == b"items" {
        stats::items(sh, &mut text);
    } else if key == b"slabs" {
        stats::slabs(sh, &mut text);
    } else if key == b"sizes" {
        text.extend_from_slice(b"STAT sizes_status disabled\r\n");
    } else {
        // Includes "detail ...": mnemod keeps no per-prefix detail (the text protocol
        // refuses `stats detail` too).
        r.error(Status::KeyNotFound);
        return;
    }
    for line in text.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(rest) = line.strip_prefix(b"STAT ") else { continue };
        let (name, value) = match rest.iter().position(|&b| b == b' ') {
            Some(sp) => (&rest[..sp], &rest[sp + 1..]),
            None => (rest, &[][..]),
        };
        r.ok(0, &[], name, value);
    }
    r.ok(0, &[], &[], &[]);
}
