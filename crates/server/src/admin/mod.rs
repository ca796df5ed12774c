//! The admin side: the counters and the commands that read or steer the server rather than
//! items.
//!
//! ```text
//!   stats.rs     per-worker counters and `stats` (general, settings, items, slabs, sizes)
//!   crawler.rs   lru_crawler (metadump, mgdump, crawl), stats cachedump, slabs commands
//!   detail.rs    stats detail: per-prefix counters
//!   conns.rs     connection counts and the descriptor table (`stats conns`)
//!   extstore.rs  `extstore <name> <value>`: flash settings at run time
//! ```

pub(crate) mod conns;
pub(crate) mod crawler;
pub(crate) mod detail;
pub(crate) mod extstore;
pub(crate) mod stats;
