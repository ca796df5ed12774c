//! `load`: stores every user's value (`u:<id>` -> the user's records), fast, then proves it.
//!
//! The sets go out with `noreply` in large writes on one connection, so loading costs the
//! server's parsing and the link, not a round trip per key. A second thread drains the socket
//! meanwhile: a server that answers anything (an error despite noreply) must not be able to fill
//! our receive buffer and stall both sides. The stream ends with `version`, whose reply says the
//! server has read every set before it.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use crate::conn::Conn;
use crate::gen::{self, FriendPicker, Rng};
use crate::query;
use crate::Error;

/// Bytes gathered before each write.
const BATCH: usize = 256 * 1024;
/// Keys read back after the load to check the server kept what was sent.
const SAMPLE: usize = 1000;

pub struct LoadArgs {
    pub server: SocketAddr,
    pub users: u64,
    pub records: usize,
    pub seed: u64,
}

pub fn load(a: &LoadArgs) -> Result<(), Error> {
    let start = Instant::now();
    let mut conn = Conn::connect(a.server)?;
    let drain = conn.try_clone_stream()?;
    let reader = std::thread::spawn(move || drain_until_version(drain));

    let value_len = a.records * mnemo_filter_sdk::records::RECORD_LEN;
    let mut batch = Vec::with_capacity(BATCH + value_len + 64);
    for id in 0..a.users {
        batch.extend_from_slice(b"set ");
        gen::push_key(&mut batch, id);
        batch.extend_from_slice(b" 0 0 ");
        gen::push_decimal(&mut batch, value_len as u64);
        batch.extend_from_slice(b" noreply\r\n");
        gen::push_value(a.seed, id, a.records, &mut batch);
        batch.extend_from_slice(b"\r\n");
        if batch.len() >= BATCH {
            conn.send(&batch)?;
            batch.clear();
        }
    }
    batch.extend_from_slice(b"version\r\n");
    conn.send(&batch)?;
    let unexpected = reader.join().map_err(|_| "drain thread panicked")??;
    if !unexpected.is_empty() {
        return Err(format!("the server answered the noreply sets: {unexpected:?}").into());
    }
    let secs = start.elapsed().as_secs_f64();

    // Every key must still be there: a server whose -m is too small evicts silently.
    conn.send(b"stats\r\n")?;
    let stats = conn.recv_until_line("END")?;
    let items = stats
        .lines()
        .find_map(|l| l.strip_prefix("STAT curr_items "))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .ok_or("stats has no curr_items")?;
    if items < a.users {
        return Err(format!(
            "server holds {items} items of {} loaded: raise its -m",
            a.users
        )
        .into());
    }
    let checked = verify_sample(&mut conn, a)?;
    println!(
        "loaded users={} value_bytes={value_len} bytes_sent={} secs={secs:.2} mb_per_sec={:.1} curr_items={items} verified={checked}",
        a.users,
        conn.sent,
        conn.sent as f64 / secs / 1e6
    );
    Ok(())
}

/// Reads until the `version` reply; returns whatever came before it (nothing, normally).
fn drain_until_version(mut s: TcpStream) -> Result<String, Error> {
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(format!(
                "server closed the connection during the load: {:?}",
                String::from_utf8_lossy(&got)
            )
            .into());
        }
        got.extend_from_slice(&chunk[..n]);
        if got.ends_with(b"\r\n") {
            let body = &got[..got.len() - 2];
            let start = body.iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1);
            if body[start..].starts_with(b"VERSION ") {
                return Ok(String::from_utf8_lossy(&got[..start]).into_owned());
            }
        }
        // Keep what an unexpected reply says, but do not hoard a flood of them.
        if got.len() > 64 * 1024 {
            got.drain(..32 * 1024);
        }
    }
}

/// Reads back up to SAMPLE random keys, 100 per get, and compares each value with the one
/// the seed gives. Returns how many were compared.
fn verify_sample(conn: &mut Conn, a: &LoadArgs) -> Result<usize, Error> {
    let mut rng = Rng::stream(a.seed, u64::MAX);
    let mut picker = FriendPicker::new(a.users);
    let total = SAMPLE.min(a.users as usize);
    let (mut ids, mut req, mut want) = (Vec::new(), Vec::new(), Vec::new());
    let mut done = 0;
    while done < total {
        picker.pick(&mut rng, (total - done).min(100), &mut ids);
        query::build_get(&mut req, &ids);
        conn.send(&req)?;
        conn.recv_reply()?;
        if conn.values().len() != ids.len() {
            return Err(format!(
                "{} of {} sampled keys missing after the load",
                ids.len() - conn.values().len(),
                ids.len()
            )
            .into());
        }
        for (span, &id) in conn.values().iter().zip(&ids) {
            want.clear();
            gen::push_value(a.seed, id, a.records, &mut want);
            if conn.bytes()[span.data.clone()] != want[..] {
                return Err(format!("value of u:{id} differs from what was loaded").into());
            }
        }
        done += ids.len();
    }
    Ok(done)
}
