//! Warm restart's cost at issue 16's scale: 10 million items of 8-byte keys and 8-byte values
//! written to a snapshot file and restored into a fresh store, each timed.
//!
//!   cargo run --release -p mnemo-store --example snapshot_time [-- ITEMS [PATH]]

use std::time::Instant;

use mnemo_store::*;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map_or(10_000_000, |a| a.parse().expect("ITEMS"));
    let path = std::path::PathBuf::from(
        args.next()
            .unwrap_or_else(|| "/tmp/mnemo-snapshot-time.snap".into()),
    );
    let cfg = StoreConfig {
        mem_limit: 4 << 30,
        ..Default::default()
    };
    let s = Store::new(cfg.clone());
    let t = Instant::now();
    for i in 0..n {
        let k = i.to_le_bytes();
        s.store(Mode::Set, &k, 0, 0, &(i ^ 0x5555).to_le_bytes(), 1)
            .unwrap();
    }
    println!("load      {n} items in {:.2} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let st = s.write_snapshot_file(&path, 1, 1_700_000_000).unwrap();
    println!(
        "write     {} items, {:.1} MiB in {:.2} s",
        st.items,
        st.bytes as f64 / (1 << 20) as f64,
        t.elapsed().as_secs_f64()
    );
    drop(s);
    let r = Store::new(cfg);
    let t = Instant::now();
    let f = std::fs::File::open(&path).unwrap();
    let len = f.metadata().unwrap().len();
    let rep = r
        .restore_snapshot(
            std::io::BufReader::with_capacity(1 << 20, f),
            len,
            1,
            1_700_000_000,
        )
        .unwrap();
    println!(
        "restore   {} items in {:.2} s ({rep:?})",
        rep.items,
        t.elapsed().as_secs_f64()
    );
    for i in (0..n).step_by(9973) {
        let v = r
            .get(&i.to_le_bytes(), 1, |it| it.value.to_vec())
            .hit()
            .expect("restored");
        assert_eq!(v, (i ^ 0x5555).to_le_bytes());
    }
    std::fs::remove_file(&path).unwrap();
}
