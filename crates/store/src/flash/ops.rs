//! The shard's side of the flash tier: moving an item's value to flash (demotion, called by
//! eviction), bringing it back (recache), and dropping a flashed copy. The flash module owns
//! the file; these own the index slot and the shard's entry table.

use crate::flash::{FlashRef, Loc, Meta};
use crate::index::{slot, Pos};
use crate::item::{Header, NewHeader};
use crate::segment::{ttl_bucket, Queue};
use crate::shard::{Env, Found, Part, Reserve, Shard, MAX_ATTEMPTS};
use crate::Time;

impl Shard {
    /// Drops a flashed item's slot and entry: its record is unreachable from now on.
    pub fn remove_flash(&mut self, env: &Env<'_>, pos: Pos, fref: &FlashRef) {
        self.index.remove(pos);
        self.flash.free(fref.entry);
        if let Some(f) = env.flash {
            f.release(&fref.loc);
        }
    }

    /// The slot of `fref` if it is still where a lookup left it (no write, delete, recache or
    /// page recycling since).
    pub fn refind_flash(&mut self, env: &Env<'_>, key: &[u8], fref: &FlashRef, now: Time) -> Option<Pos> {
        match self.find(env, fref.h, key, now) {
            Found::Flash { pos, fref: now_ref } if now_ref == *fref => Some(pos),
            _ => None,
        }
    }

    /// Brings a flashed item read back (`v`) into RAM, keeping its CAS, flags and expiry, and
    /// drops its flash entry. false if its slot changed since the lookup or no memory was had.
    pub fn recache(&mut self, env: &Env<'_>, key: &[u8], fref: &FlashRef, v: &crate::FlashValue, now: Time) -> bool {
        for _ in 0..MAX_ATTEMPTS {
            let Some(pos) = self.refind_flash(env, key, fref, now) else { return false };
            let m = v.meta;
            let nh = NewHeader {
                key_len: key.len() as u8,
                value_len: v.value().len() as u32,
                flags: m.flags,
                exp: m.exp,
                cas: env.geo.use_cas.then_some(m.cas),
            };
            // Read from flash: it has proved itself, as an item promoted out of Small has.
            let (seg, off) = match self.reserve(env, nh.total_len(), ttl_bucket(m.exp, now), Queue::Main, now) {
                Ok(Reserve::At(a, b)) => (a, b),
                Ok(Reserve::Retry) => continue,
                Err(_) => return false,
            };
            self.place(seg, off, &nh, Part::Bytes(key), &[Part::Bytes(v.value())]);
            let s = self.index.get(pos);
            self.index.set(pos, slot::moved(s, seg, off as u32));
            self.flash.free(fref.entry);
            if let Some(f) = env.flash {
                f.release(&fref.loc);
            }
            return true;
        }
        false
    }

    /// Writes the live item at (seg, off) to flash if it qualifies (flash configured, value
    /// large enough, not about to expire, a write buffer free). Returns its new entry; the
    /// caller repoints the slot and drops the RAM copy.
    pub(crate) fn demote(&mut self, env: &Env<'_>, seg: u32, off: usize, hdr: &Header, h: u64, now: Time) -> Option<u32> {
        let f = env.flash?;
        if !f.wants(hdr.key_len as usize, hdr.value_len as usize, hdr.exp, now) {
            return None;
        }
        let cas = self.cas_of(env.geo, seg, off, hdr);
        let d = &self.segs.metas[seg as usize].data[off..];
        let loc: Loc = f.append(&d[hdr.key_range()], &d[hdr.value_range()], Meta { flags: hdr.flags, exp: hdr.exp, cas })?;
        let i = self.flash.alloc(h, loc);
        if i.is_none() {
            f.release(&loc);
        }
        i
    }

}
