//! memcached's `extstore <name> <value> [noreply]` command (1.6.18 proto_text.c): the flash
//! tier's settings changed on a running server. Replies are memcached's: `OK`, or a plain
//! `ERROR` for an unknown name, a missing value or a value its `safe_strtoul` /
//! `safe_strtod` refuses; `noreply` silences both.
//!
//! ```text
//!   name            value           acts on                  in mnemo
//!   item_size       u32 (bytes)     which items go to flash  the store (flash/tune.rs)
//!   item_age        u32 (seconds)   early demotion           the store
//!   low_ttl         u32 (seconds)   short-lived items stay   the store
//!   recache_rate    u32             1 flash hit in N to RAM  the store
//!   compact_under   u32 (pages)     when compaction starts   the store
//!   max_frag        double          which page is compacted  the store (per mille)
//!   drop_unread     u32 (0 = off)   compaction drops unread  the store
//!   drop_under      u32 (pages)       records below this     the store
//!   max_sleep       u32 (µs)        its threads' pacing      kept for `stats settings`:
//!                                                            mnemo has no such thread
//!   free_memchunks  class limit     deprecated in memcached  checked only (class < 64)
//! ```
//!
//! Without a flash tier the values are still checked and kept (memcached, built with
//! extstore, does the same), so `stats settings` shows them.
//!
//! One difference on purpose: memcached's `safe_strtoul` zeroes its target before it
//! parses, so a refused value (`extstore item_size abc`) leaves the setting at 0 behind its
//! ERROR; here a refused value changes nothing.

use mnemo_proto::num::{is_c_space, parse_u32_flags};
use mnemo_proto::text::Keys;
use mnemo_store::FlashSetting;

use crate::Shared;

/// memcached's MAX_NUMBER_OF_SLAB_CLASSES: `free_memchunks` takes a class below it.
const SLAB_CLASSES: u32 = 64;

/// Runs the command (`args`: the words after `extstore`) and writes its reply.
pub fn command(args: Keys<'_>, noreply: bool, sh: &Shared, out: &mut Vec<u8>) {
    let ok = apply(args, sh).is_some();
    if !noreply {
        out.extend_from_slice(if ok { b"OK\r\n" } else { b"ERROR\r\n" });
    }
}

/// None: memcached's ERROR.
fn apply(args: Keys<'_>, sh: &Shared) -> Option<()> {
    let mut w = args.iter();
    let (name, value, third) = (w.next()?, w.next()?, w.next());
    let num = || parse_u32_flags(value);
    let mut live = sh.extstore.lock();
    let store = |s: FlashSetting| {
        sh.store.tune_flash(s);
    };
    match name {
        b"item_size" => {
            let v = num()?;
            live.item_size = v;
            store(FlashSetting::ItemSize(v as usize));
        }
        b"item_age" => {
            let v = num()?;
            live.item_age = v;
            store(FlashSetting::ItemAge(v));
        }
        b"low_ttl" => {
            let v = num()?;
            live.low_ttl = v;
            store(FlashSetting::LowTtl(v));
        }
        b"recache_rate" => {
            let v = num()?;
            live.recache_rate = v;
            store(FlashSetting::RecacheRate(v));
        }
        b"compact_under" => {
            let v = num()?;
            live.compact_under = Some(v);
            store(FlashSetting::CompactUnder(Some(v as usize)));
        }
        b"max_frag" => {
            live.max_frag = parse_f64(value)?;
            store(FlashSetting::MaxFragPermille(live.max_frag_permille()));
        }
        b"drop_under" => {
            let v = num()?;
            live.drop_under = Some(v);
            store(FlashSetting::DropUnder(Some(v as usize)));
        }
        b"max_sleep" => live.max_sleep = num()?,
        b"drop_unread" => {
            let v = num()? != 0;
            live.drop_unread = v;
            store(FlashSetting::DropUnread(v));
        }
        // memcached wants both numbers here (more than four tokens) and a class below 64.
        b"free_memchunks" => {
            let (class, limit) = (num()?, third.and_then(parse_u32_flags));
            limit.filter(|_| class < SLAB_CLASSES)?;
        }
        _ => return None,
    }
    Some(())
}

/// memcached's `safe_strtod`: leading white space, then what C's `strtod` reads (decimal,
/// exponent, inf, nan), followed by the token's end or white space; out of range (ERANGE)
/// refused. C's hexadecimal floats are not read (they are refused).
fn parse_f64(s: &[u8]) -> Option<f64> {
    let start = s.iter().position(|&b| !is_c_space(b))?;
    let end = s[start..]
        .iter()
        .position(|&b| is_c_space(b))
        .map_or(s.len(), |e| start + e);
    let text = std::str::from_utf8(&s[start..end]).ok()?;
    let d: f64 = text.parse().ok()?;
    // Rust reads an overflowing decimal as infinity where strtod sets ERANGE.
    if d.is_infinite() && !text.to_ascii_lowercase().contains("inf") {
        return None;
    }
    Some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_as_safe_strtod_reads_them() {
        assert_eq!(parse_f64(b"0.5"), Some(0.5));
        assert_eq!(parse_f64(b"1e3"), Some(1000.0));
        assert_eq!(parse_f64(b"-1"), Some(-1.0));
        assert_eq!(parse_f64(b"0"), Some(0.0));
        assert_eq!(parse_f64(b"abc"), None);
        assert_eq!(parse_f64(b"0.5x"), None);
        assert_eq!(parse_f64(b""), None);
        assert_eq!(parse_f64(b"1e400"), None);
    }

    fn run(sh: &Shared, line: &str, noreply: bool) -> String {
        let mut out = Vec::new();
        command(Keys::new(line.as_bytes()), noreply, sh, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn replies_and_kept_values_match_memcached() {
        let sh = Shared::new(crate::Config::default());
        for (line, reply) in [
            ("recache_rate 5", "OK\r\n"),
            ("recache_rate 5 6", "OK\r\n"),
            ("recache_rate", "ERROR\r\n"),
            ("recache_rate abc", "ERROR\r\n"),
            ("recache_rate -1", "ERROR\r\n"),
            ("recache_rate +7", "OK\r\n"),
            ("item_age 0x10", "ERROR\r\n"),
            ("max_frag 1e3", "OK\r\n"),
            ("max_frag abc", "ERROR\r\n"),
            ("free_memchunks 1 2", "OK\r\n"),
            ("free_memchunks 1", "ERROR\r\n"),
            ("free_memchunks 64 2", "ERROR\r\n"),
            ("ratio 0.5", "ERROR\r\n"),
            ("", "ERROR\r\n"),
            ("drop_unread 2", "OK\r\n"),
            ("max_sleep 4294967296", "OK\r\n"),
            ("compact_under 4", "OK\r\n"),
        ] {
            assert_eq!(run(&sh, line, false), reply, "extstore {line}");
        }
        assert_eq!(run(&sh, "recache_rate abc", true), "");
        let live = sh.extstore.lock();
        assert_eq!(
            (live.recache_rate, live.max_frag, live.drop_unread),
            (7, 1000.0, true)
        );
        // 4294967296 as memcached's 32-bit setting keeps it: truncated.
        assert_eq!((live.max_sleep, live.compact_under), (0, Some(4)));
    }
}
