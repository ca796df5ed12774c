//! `stats detail on|off|dump`: per-key-prefix counters (the prefix is the key up to the -D
//! delimiter, default ':'), as memcached keeps them. Off by default; when off, the request
//! path pays one relaxed atomic load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use parking_lot::Mutex;

#[derive(Default, Clone, Copy)]
struct Counts {
    get: u64,
    hit: u64,
    set: u64,
    del: u64,
}

/// What happened to a key.
#[derive(Clone, Copy)]
pub enum Event {
    Get { hit: bool },
    Set,
    Delete,
}

#[derive(Default)]
pub struct Detail {
    on: AtomicBool,
    prefixes: Mutex<HashMap<Vec<u8>, Counts>>,
}

/// memcached stops tracking new prefixes past this many; so do we, to stay bounded.
const MAX_PREFIXES: usize = 65_536;

/// The text reply to `stats detail ...` under -X (memcached's --disable-dumping).
pub const DUMPS_OFF: &[u8] = b"CLIENT_ERROR stats detail not allowed";

impl Detail {
    pub fn enabled(&self) -> bool {
        self.on.load(Relaxed)
    }

    pub fn set_enabled(&self, on: bool) {
        self.on.store(on, Relaxed);
    }

    #[inline]
    pub fn record(&self, key: &[u8], delimiter: u8, ev: Event) {
        if !self.enabled() {
            return;
        }
        // Keys without the delimiter have no prefix and are not counted (as in memcached).
        let Some(end) = key.iter().position(|&b| b == delimiter) else {
            return;
        };
        let mut map = self.prefixes.lock();
        if !map.contains_key(&key[..end]) {
            if map.len() >= MAX_PREFIXES {
                return;
            }
            map.insert(key[..end].to_vec(), Counts::default());
        }
        let Some(counts) = map.get_mut(&key[..end]) else {
            return;
        };
        match ev {
            Event::Get { hit } => {
                counts.get += 1;
                counts.hit += u64::from(hit);
            }
            Event::Set => counts.set += 1,
            Event::Delete => counts.del += 1,
        }
    }

    /// `stats detail dump`: "PREFIX p get g hit h set s del d" lines, then END.
    pub fn dump(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        let map = self.prefixes.lock();
        let mut keys: Vec<_> = map.keys().collect();
        keys.sort();
        for k in keys {
            let c = map[k];
            out.extend_from_slice(b"PREFIX ");
            out.extend_from_slice(k);
            let _ = write!(
                out,
                " get {} hit {} set {} del {}\r\n",
                c.get, c.hit, c.set, c.del
            );
        }
        out.extend_from_slice(b"END\r\n");
    }

    pub fn reset(&self) {
        self.prefixes.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_prefix_only_when_on() {
        let d = Detail::default();
        d.record(b"user:1", b':', Event::Set);
        d.set_enabled(true);
        d.record(b"user:1", b':', Event::Set);
        d.record(b"user:2", b':', Event::Get { hit: true });
        d.record(b"user:3", b':', Event::Get { hit: false });
        d.record(b"noprefix", b':', Event::Set);
        d.record(b"sess:9", b':', Event::Delete);
        let mut out = Vec::new();
        d.dump(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "PREFIX sess get 0 hit 0 set 0 del 1\r\nPREFIX user get 2 hit 1 set 1 del 0\r\nEND\r\n"
        );
    }
}
