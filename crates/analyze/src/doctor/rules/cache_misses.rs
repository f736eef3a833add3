//! cache-misses: a server's own cache (PostgreSQL's shared buffers, InnoDB's buffer pool, Redis under
//! maxmemory, memcached, SQLite's page cache) misses so often that filling it takes a large share of CPU:
//! the time in the functions that run only on a miss (a block read in, a victim evicted), which the
//! software recognised names (see software.rs).

use super::{cpu_share_rule, Text};
use crate::doctor::facts::Facts;
use crate::doctor::software::recognise;
use crate::doctor::thresholds::CACHE_MISS_CPU_PCT;
use crate::doctor::Verdict;

const TEXT: Text = Text {
    id: "cache-misses",
    title: "the server's own cache misses: filling it takes a large share of CPU",
    why:
        "a server that keeps data in a cache of its own pays for every miss: the block read in (a copy from \
          the OS page cache, or a wait for the disk), a victim found and evicted, the cache's table updated; \
          a cache smaller than the data the requests touch misses on most of them, however much memory the \
          host has left",
    fix:
        "size the cache to the working set (the data the requests touch, not all of it), checked by its hit \
          ratio; where memory is short, the OS page cache still keeps what the cache evicts",
    shrinks: "the functions that fill the cache",
};

pub fn check(f: &Facts) -> Verdict {
    let Some(known) = recognise(f).map(|r| r.known).filter(|k| !k.cache_fills.is_empty()) else {
        return Verdict::Clear;
    };
    cpu_share_rule(f, &TEXT, CACHE_MISS_CPU_PCT, &|func| !func.kernel && known.fills_cache(func.name))
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::rules::tests::fired;

    #[test]
    fn fires_on_the_miss_path_of_a_recognised_server_only() {
        let hit = "PostgresMain;exec_simple_query;ReadBuffer;hash_search";
        let read = "PostgresMain;exec_simple_query;ReadBuffer;smgrread;mdread;FileRead;lib:__libc_pread64";
        let evict = "PostgresMain;exec_simple_query;ReadBuffer;StrategyGetBuffer";
        let p = profile(&[(hit, 70, 0), (read, 25, 0), (evict, 5, 0)]);
        assert_eq!(fired(super::check, &p), Some(30.0));
        // Below the threshold (10% of CPU): a warm cache's occasional miss.
        let p = profile(&[(hit, 95, 0), (read, 5, 0)]);
        assert_eq!(fired(super::check, &p), None);
        // The same names in a program that is not PostgreSQL are not its cache.
        let p = profile(&[("main;work", 70, 0), ("main;smgrread", 30, 0)]);
        assert_eq!(fired(super::check, &p), None);
    }
}
