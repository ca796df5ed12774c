//! Which server owns a key: libmemcached's weighted ketama continuum
//! (`MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED`, pylibmc's `behaviors={"ketama_weighted": True}`),
//! point for point, plus optional hash tags.
//!
//! ```text
//!   server i (in list order) gets  floor(w_i / sum(w) * 160/4 * n) * 4  points, n = server count
//!   for h in 0 .. points/4:  md5("host:port-h")  (or "host-h" when port == 11211)
//!       16-byte digest = four little-endian u32 points  [0..4] [4..8] [8..12] [12..16]
//!   continuum = all points sorted by (value, server index)
//!   key -> md5(key)[0..4] as little-endian u32 -> first point >= it (wrapping to the first)
//! ```
//!
//! The float arithmetic is libmemcached's, in `f32` and in its order, so rounding at the floor
//! lands where libmemcached's does. A key whose owner is ejected goes to the next point on the
//! ring owned by a live server; the other keys stay where they are. (libmemcached instead
//! rebuilds the continuum without the dead server, which for uneven weights can also move a
//! few keys between live servers.)

use md5::{Digest, Md5};

pub mod md5x4;
use std::fmt;

/// libmemcached's `MEMCACHED_POINTS_PER_SERVER_KETAMA`.
pub const POINTS_PER_SERVER: u32 = 160;
/// libmemcached's `MEMCACHED_DEFAULT_PORT`: the port left out of the point names.
pub const DEFAULT_PORT: u16 = 11211;

/// One server: `host:port[:weight]`, as pylibmc and libmemcached spell it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServerSpec {
    pub host: String,
    pub port: u16,
    pub weight: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad server {spec:?}: {why} (want host[:port[:weight]])")]
pub struct SpecError {
    pub spec: String,
    pub why: &'static str,
}

impl ServerSpec {
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        ServerSpec {
            host: host.into(),
            port,
            weight: 1,
        }
    }

    pub fn with_weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// `host`, `host:port`, `host:port:weight`, `[v6]`, `[v6]:port[:weight]`.
    pub fn parse(spec: &str) -> Result<Self, SpecError> {
        let err = |why| SpecError {
            spec: spec.to_owned(),
            why,
        };
        let s = spec.trim();
        let (host, rest) = if let Some(v6) = s.strip_prefix('[') {
            let (h, r) = v6.split_once(']').ok_or_else(|| err("no closing ]"))?;
            match r {
                "" => (h, None),
                r => (
                    h,
                    Some(
                        r.strip_prefix(':')
                            .ok_or_else(|| err("expected : after ]"))?,
                    ),
                ),
            }
        } else {
            match s.split_once(':') {
                Some((h, r)) => (h, Some(r)),
                None => (s, None),
            }
        };
        if host.is_empty() {
            return Err(err("empty host"));
        }
        let (port, weight) = match rest {
            None => (DEFAULT_PORT, 1),
            Some(r) => {
                let (p, w) = match r.split_once(':') {
                    Some((p, w)) => (p, Some(w)),
                    None => (r, None),
                };
                let port: u16 = p.parse().map_err(|_| err("bad port"))?;
                let weight = match w {
                    Some(w) => w.parse().map_err(|_| err("bad weight"))?,
                    None => 1,
                };
                (port, weight)
            }
        };
        if port == 0 {
            return Err(err("port 0"));
        }
        if weight == 0 {
            return Err(err("weight must be at least 1"));
        }
        Ok(ServerSpec {
            host: host.to_owned(),
            port,
            weight,
        })
    }

    /// A comma-separated list, as `--servers` takes it.
    pub fn parse_list(list: &str) -> Result<Vec<Self>, SpecError> {
        list.split(',')
            .filter(|s| !s.trim().is_empty())
            .map(ServerSpec::parse)
            .collect()
    }

    /// The address to connect to.
    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for ServerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.addr())?;
        if self.weight != 1 {
            write!(f, ":{}", self.weight)?;
        }
        Ok(())
    }
}

/// libmemcached's key hash under ketama_weighted: the first four bytes of MD5, little-endian.
pub fn key_hash(key: &[u8]) -> u32 {
    let d = Md5::digest(key);
    u32::from_le_bytes([d[0], d[1], d[2], d[3]])
}

/// The part of a key that is hashed: with hash tags on, the text between the first `{` and the
/// next `}` when it is not empty (Redis Cluster's rule), so `user:{42}:friends` and
/// `user:{42}:profile` land on one server; otherwise the whole key.
pub fn hashed_part(key: &[u8], hash_tags: bool) -> &[u8] {
    if hash_tags {
        if let Some(open) = memchr::memchr(b'{', key) {
            if let Some(len) = memchr::memchr(b'}', &key[open + 1..]) {
                if len > 0 {
                    return &key[open + 1..open + 1 + len];
                }
            }
        }
    }
    key
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Point {
    value: u32,
    server: u32,
}

/// The continuum.
#[derive(Debug, Clone)]
pub struct Ketama {
    points: Vec<Point>,
    servers: usize,
}

/// How many points libmemcached gives a server of `weight` out of `total` among `n` live
/// servers. f32 throughout, in libmemcached's order of operations.
pub fn points_for(weight: u32, total: u64, n: usize) -> u32 {
    if total == 0 {
        return 0;
    }
    let pct = weight as f32 / total as f32;
    let x = pct * POINTS_PER_SERVER as f32 / 4.0 * n as f32 + 0.000_000_000_1_f32;
    (x.floor() as u32) * 4
}

impl Ketama {
    pub fn new(servers: &[ServerSpec]) -> Self {
        let total: u64 = servers.iter().map(|s| u64::from(s.weight)).sum();
        let mut points = Vec::new();
        for (i, s) in servers.iter().enumerate() {
            let n = points_for(s.weight, total, servers.len());
            for h in 0..n / 4 {
                let name = if s.port == DEFAULT_PORT {
                    format!("{}-{}", s.host, h)
                } else {
                    format!("{}:{}-{}", s.host, s.port, h)
                };
                let d = Md5::digest(name.as_bytes());
                for a in 0..4 {
                    let v =
                        u32::from_le_bytes([d[4 * a], d[4 * a + 1], d[4 * a + 2], d[4 * a + 3]]);
                    points.push(Point {
                        value: v,
                        server: i as u32,
                    });
                }
            }
        }
        points.sort_unstable();
        Ketama {
            points,
            servers: servers.len(),
        }
    }

    pub fn server_count(&self) -> usize {
        self.servers
    }

    /// Points per server, in server order.
    pub fn point_counts(&self) -> Vec<usize> {
        let mut c = vec![0; self.servers];
        for p in &self.points {
            c[p.server as usize] += 1;
        }
        c
    }

    fn first_point(&self, hash: u32) -> usize {
        let i = self.points.partition_point(|p| p.value < hash);
        if i == self.points.len() {
            0
        } else {
            i
        }
    }

    /// The server (index into the list given to `new`) for a hash; `None` with no servers.
    pub fn server_for_hash(&self, hash: u32) -> Option<usize> {
        match self.servers {
            0 => None,
            1 => Some(0),
            _ => self
                .points
                .get(self.first_point(hash))
                .map(|p| p.server as usize),
        }
    }

    /// The server for a key (its hashed part, see [`hashed_part`]).
    pub fn route(&self, key: &[u8], hash_tags: bool) -> Option<usize> {
        self.server_for_hash(key_hash(hashed_part(key, hash_tags)))
    }

    /// Whether routing needs key hashes at all (not with one server).
    pub fn hashes_keys(&self) -> bool {
        self.servers > 1 && !self.points.is_empty()
    }

    /// [`Ketama::route_live`] for a key whose hash is known ([`key_hash`] of its hashed part;
    /// see [`md5x4::key_hashes`] for many at once).
    pub fn route_hash_live(&self, hash: u32, live: impl Fn(usize) -> bool) -> Option<usize> {
        if !self.hashes_keys() {
            return (self.servers == 1 && live(0)).then_some(0);
        }
        let start = self.first_point(hash);
        let n = self.points.len();
        (0..n)
            .map(|i| self.points[(start + i) % n].server as usize)
            .find(|&s| live(s))
    }

    /// The first server at or after the key's point that `live` accepts.
    pub fn route_live(
        &self,
        key: &[u8],
        hash_tags: bool,
        live: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let hash = if self.hashes_keys() {
            key_hash(hashed_part(key, hash_tags))
        } else {
            0
        };
        self.route_hash_live(hash, live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        assert_eq!(ServerSpec::parse("h").unwrap(), ServerSpec::new("h", 11211));
        assert_eq!(
            ServerSpec::parse("h:1234").unwrap(),
            ServerSpec::new("h", 1234)
        );
        assert_eq!(
            ServerSpec::parse("h:1234:3").unwrap(),
            ServerSpec::new("h", 1234).with_weight(3)
        );
        assert_eq!(
            ServerSpec::parse("[::1]").unwrap(),
            ServerSpec::new("::1", 11211)
        );
        assert_eq!(
            ServerSpec::parse("[::1]:5:2").unwrap(),
            ServerSpec::new("::1", 5).with_weight(2)
        );
        assert_eq!(ServerSpec::parse("[::1]:5").unwrap().addr(), "[::1]:5");
        for bad in ["", ":1", "h:x", "h:1:x", "h:1:0", "h:0", "[::1", "[::1]x"] {
            assert!(ServerSpec::parse(bad).is_err(), "{bad}");
        }
        let l = ServerSpec::parse_list("a:1,b:2:3").unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[1].to_string(), "b:2:3");
    }

    #[test]
    fn point_counts_follow_libmemcached() {
        // Equal weights: 160 points each, whatever the count.
        for n in 1..6 {
            let s: Vec<_> = (0..n).map(|i| ServerSpec::new("h", 1000 + i)).collect();
            assert!(Ketama::new(&s).point_counts().iter().all(|&c| c == 160));
        }
        // 1:2:3 over 3 servers: floor(1/6*40*3)*4 = 80, floor(2/6*120)*4 = 160, 240.
        assert_eq!(points_for(1, 6, 3), 80);
        assert_eq!(points_for(2, 6, 3), 160);
        assert_eq!(points_for(3, 6, 3), 240);
        // f32 rounding: 1/3 of 40*3 is 40.000004 in f32 (not 39.99), so 160.
        assert_eq!(points_for(1, 3, 3), 160);
    }

    #[test]
    fn hash_is_md5_little_endian() {
        // md5("") = d41d8cd98f00b204e9800998ecf8427e
        assert_eq!(key_hash(b""), 0xd98c1dd4);
    }

    #[test]
    fn hash_tags() {
        assert_eq!(hashed_part(b"user:{42}:friends", true), b"42");
        assert_eq!(
            hashed_part(b"user:{42}:friends", false),
            b"user:{42}:friends"
        );
        assert_eq!(hashed_part(b"a{}b{c}", true), b"a{}b{c}");
        assert_eq!(hashed_part(b"a{bc", true), b"a{bc");
        assert_eq!(hashed_part(b"}a{b}", true), b"b");
        let s: Vec<_> = (0..5)
            .map(|i| ServerSpec::new("10.0.0.1", 2000 + i))
            .collect();
        let k = Ketama::new(&s);
        let owner = k.route(b"{tag}", true);
        for i in 0..50 {
            assert_eq!(k.route(format!("x{i}:{{tag}}:y").as_bytes(), true), owner);
        }
    }

    #[test]
    fn ejected_servers_keys_move_to_the_next_point_only() {
        let s: Vec<_> = (0..4)
            .map(|i| ServerSpec::new("127.0.0.1", 3000 + i).with_weight(i as u32 + 1))
            .collect();
        let k = Ketama::new(&s);
        for i in 0..2000 {
            let key = format!("key{i}");
            let owner = k.route(key.as_bytes(), false).unwrap();
            let live = k.route_live(key.as_bytes(), false, |s| s != 2).unwrap();
            assert_ne!(live, 2);
            if owner != 2 {
                assert_eq!(owner, live);
            }
        }
        assert_eq!(k.route_live(b"x", false, |_| false), None);
    }
}
