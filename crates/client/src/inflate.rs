//! A batch's values decompressed on two threads when it is large: the client side of a
//! compressed get_many is mostly inflating (seed 000's cost on get), and the caller waits for
//! all of it anyway.
//!
//! ```text
//!   items  [ v0 v1 v2 ... | ... v98 v99 ]     split where the compressed bytes reach half
//!           caller thread   scoped thread     each inflates its part, in order
//!   result [ front ........ | back ....... ]  the first error in request order wins
//! ```
//!
//! Below [`PARALLEL_INFLATE_MIN`] compressed bytes, or with one CPU to run on, it is the plain
//! loop: a thread costs ~55 us to start and join on the VM this was measured on.

use crate::client::Client;
use crate::error::Result;
use crate::ops::Item;

/// Compressed bytes in one batch from which [`Client::decompress_many`] inflates on two
/// threads. Inflating costs by the bytes it makes (~0.85 us a KB here), and a stored value is
/// at least 1.25x its compressed size: past this, ~0.07 ms of work at the very least and
/// typically 3-8x that; below it, the thread's ~55 us would be too large a share.
pub const PARALLEL_INFLATE_MIN: usize = 64 * 1024;

/// Whether this process may run on more than one CPU (its affinity mask; `taskset -c 0`
/// says no). Read once.
fn second_cpu() -> bool {
    static MANY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *MANY.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
}

impl Client {
    /// [`Self::decompress`] for a batch (a get_many's items, in order). Past
    /// [`PARALLEL_INFLATE_MIN`] compressed bytes, and with a second CPU to run on, the later
    /// half (by compressed bytes) is inflated on a scoped thread meanwhile: inflating is most
    /// of a compressed batch's client time (100 x 10 KB zlib values: ~0.85 ms of ~1.3), the
    /// caller waits either way, and a thread costs ~55 us to start and join.
    pub fn decompress_many(
        &self,
        items: Vec<Option<Item>>,
    ) -> Result<Vec<Option<(bytes::Bytes, u32)>>> {
        let total: usize = items.iter().map(|it| self.compressed_len(it)).sum();
        if total >= PARALLEL_INFLATE_MIN && second_cpu() {
            self.decompress_halves(items, total)
        } else {
            self.decompress_in_order(items)
        }
    }

    /// An item's bytes if they are compressed, else 0.
    fn compressed_len(&self, it: &Option<Item>) -> usize {
        match it {
            Some(i) if i.flags & self.inner.values.compression_bits() != 0 => i.data.len(),
            _ => 0,
        }
    }

    /// Each item in turn, on this thread.
    fn decompress_in_order(
        &self,
        items: Vec<Option<Item>>,
    ) -> Result<Vec<Option<(bytes::Bytes, u32)>>> {
        items
            .into_iter()
            .map(|it| it.map(|i| self.decompress(i)).transpose())
            .collect()
    }

    /// The front half (by `total`, the batch's compressed bytes) on this thread, the back half
    /// on a scoped one.
    fn decompress_halves(
        &self,
        items: Vec<Option<Item>>,
        total: usize,
    ) -> Result<Vec<Option<(bytes::Bytes, u32)>>> {
        // Split where the running compressed bytes reach half.
        let mut acc = 0;
        let at = items
            .iter()
            .position(|it| {
                acc += self.compressed_len(it);
                acc * 2 >= total
            })
            .map_or(items.len(), |i| i + 1);
        let mut front = items;
        // Handed over through a slot: if no thread can be started, this thread takes it back.
        let back = std::sync::Mutex::new(Some(front.split_off(at)));
        let take = || {
            back.lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .unwrap_or_default()
        };
        let (front, back) = std::thread::scope(|s| {
            let helper =
                std::thread::Builder::new().spawn_scoped(s, || self.decompress_in_order(take()));
            let f = self.decompress_in_order(front);
            let b = match helper {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                // No thread to be had (a process limit): all of it here.
                Err(_) => self.decompress_in_order(take()),
            };
            (f, b)
        });
        let mut out = front?;
        out.extend(back?);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compress;
    use crate::serde::FLAG_ZLIB;
    use crate::Config;

    fn client() -> Client {
        // Never connected: decompressing needs only the client's codec.
        Client::from_list("127.0.0.1:1", Config::default()).unwrap()
    }

    fn item(data: Vec<u8>, flags: u32) -> Option<Item> {
        Some(Item {
            data: data.into(),
            flags,
            cas: None,
        })
    }

    fn text(i: usize) -> Vec<u8> {
        format!("value {i} ").repeat(1000 + i * 37).into_bytes()
    }

    /// Decompressed values as owned bytes and flags, to compare.
    type Owned = Vec<Option<(Vec<u8>, u32)>>;

    /// Misses, plain values and zlib ones, mixed (a get_many's shape).
    fn batch(n: usize) -> (Vec<Option<Item>>, Owned) {
        let (mut items, mut want) = (Vec::new(), Vec::new());
        for i in 0..n {
            match i % 5 {
                0 => {
                    items.push(None);
                    want.push(None);
                }
                1 => {
                    items.push(item(text(i), 16));
                    want.push(Some((text(i), 16)));
                }
                _ => {
                    items.push(item(compress::zlib_compress(&text(i), 6), 16 | FLAG_ZLIB));
                    want.push(Some((text(i), 16)));
                }
            }
        }
        (items, want)
    }

    fn halves(c: &Client, items: Vec<Option<Item>>) -> Result<Vec<Option<(bytes::Bytes, u32)>>> {
        let total = items.iter().map(|it| c.compressed_len(it)).sum();
        c.decompress_halves(items, total)
    }

    fn owned(got: Vec<Option<(bytes::Bytes, u32)>>) -> Owned {
        got.into_iter()
            .map(|v| v.map(|(b, f)| (b.to_vec(), f)))
            .collect()
    }

    #[test]
    fn two_threads_give_what_one_gives_in_order() {
        let c = client();
        for n in [0, 1, 2, 7, 100] {
            let (items, want) = batch(n);
            let one = owned(c.decompress_in_order(items.clone()).unwrap());
            let two = owned(halves(&c, items.clone()).unwrap());
            assert_eq!(one, want, "{n} values, one thread");
            assert_eq!(two, want, "{n} values, two threads");
            assert_eq!(owned(c.decompress_many(items).unwrap()), want);
        }
    }

    #[test]
    fn the_first_bad_value_in_request_order_is_the_error() {
        let c = client();
        let (mut items, _) = batch(40);
        let good = compress::zlib_compress(&text(1), 6);
        // Late in the batch (the helper thread's half): truncated.
        items[37] = item(good[..good.len() / 2].to_vec(), FLAG_ZLIB);
        let late = halves(&c, items.clone()).unwrap_err().to_string();
        assert!(late.contains("ends early"), "{late}");
        assert_eq!(
            late,
            c.decompress_in_order(items.clone())
                .unwrap_err()
                .to_string()
        );
        // Early as well (the caller's half): not zlib at all. The earlier one is reported.
        items[2] = item(b"not zlib".to_vec(), FLAG_ZLIB);
        let early = halves(&c, items.clone()).unwrap_err().to_string();
        assert!(!early.contains("ends early"), "{early}");
        assert_eq!(early, c.decompress_in_order(items).unwrap_err().to_string());
    }
}
