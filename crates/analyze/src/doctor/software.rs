//! Advice that knows the software: when the target is a known server or runtime (PostgreSQL,
//! MySQL/MariaDB, Redis, nginx, SQLite inside a program, a Go program), a finding's fix names that
//! software's settings and their trade-offs before the general advice. Recognised from the functions in
//! the profile (the binary's own symbols, dynamic symbols of stripped builds, Go's .gopclntab), or for a
//! stripped server without them from the names it gives its own threads (memcached's `mc-worker`), never
//! from the command's name: a renamed binary is recognised, a script called `postgres` is not.

use super::facts::Facts;
use super::Finding;

/// A known software, recognised by functions only it has.
pub struct Known {
    pub name: &'static str,
    /// Functions of its own (exact names, or prefixes ending in `(` for C++ signatures).
    markers: &'static [&'static str],
    /// Names it gives its own threads (pthread_setname_np), for stripped builds with no names of its
    /// functions.
    threads: &'static [&'static str],
    /// Functions that run only when its own cache misses (a block read in, a victim evicted, keys
    /// evicted for room): the cache-misses rule's time (same matching as `markers`).
    pub cache_fills: &'static [&'static str],
    /// (rule id, advice) pairs; `id/case` fits only that case of the rule (see [`Finding::case`]), and the
    /// first pair that fits a finding is its advice.
    advice: &'static [(&'static str, &'static str)],
}

const POSTGRES_CPU: &str = "PostgreSQL: keep the active backends near the CPUs it may use: a pooler \
    (PgBouncer in transaction mode) in front of a lower max_connections, and max_parallel_workers(_per_gather) \
    within the CPUs or quota";

const POSTGRES_LOG: &str = "PostgreSQL: the server log gets a line per statement (log_statement = 'all', \
    log_min_duration_statement = 0, log_duration = on), written by the backend answering it: log_statement = \
    'ddl' (or 'none'), log_min_duration_statement = a threshold such as 250ms, log_duration = off; to keep a \
    sample, log_min_duration_sample with log_statement_sample_rate, or log_transaction_sample_rate; \
    pg_stat_statements counts every statement without a line each";

pub const KNOWN: [Known; 7] = [
    Known {
        name: "PostgreSQL",
        threads: &[],
        markers: &["PostgresMain", "PostmasterMain", "XLogFlush", "exec_simple_query", "standard_ExecutorRun"],
        cache_fills: &["smgrread", "smgrreadv", "mdread", "mdreadv", "StrategyGetBuffer", "BufTableInsert", "BufTableDelete"],
        advice: &[
            (
                "blocking-io",
                "PostgreSQL: each commit waits for its WAL flush (XLogFlush -> fdatasync). Batch statements into \
                 fewer transactions; set synchronous_commit = off where losing the last few hundred ms of commits \
                 on a crash is acceptable (no corruption; per transaction with SET LOCAL); with many concurrent \
                 clients commit_delay (e.g. 1000 us) with commit_siblings (e.g. 5) groups their flushes; check \
                 wal_sync_method with pg_test_fsync. Never fsync = off",
            ),
            ("small-writes/file", POSTGRES_LOG),
            ("hot-logging", POSTGRES_LOG),
            ("cpu-throttling", POSTGRES_CPU),
            ("cpu-oversubscription", POSTGRES_CPU),
            (
                "cache-misses",
                "PostgreSQL: shared_buffers (128MB by default) is below the data the queries touch: raise it \
                 (about 25% of RAM is the usual start; it takes a restart) and set effective_cache_size to what \
                 the OS can cache besides; pg_stat_database's blks_hit against blks_read is the hit ratio, the \
                 pg_buffercache extension shows what is cached",
            ),
            (
                "memory-pressure",
                "PostgreSQL: shared_buffers plus work_mem (per sort or hash, per backend) times the connections \
                 must fit the memory limit: lower work_mem or max_connections, or raise the limit",
            ),
        ],
    },
    Known {
        name: "MySQL/MariaDB",
        threads: &[],
        markers: &["mysql_execute_command(", "dispatch_command(", "do_command(", "handle_connection"],
        cache_fills: &[
            "buf_read_page(",
            "buf_read_page_low(",
            "buf_LRU_get_free_block(",
            "buf_LRU_scan_and_free_block(",
        ],
        advice: &[
            (
                "cache-misses",
                "MySQL/MariaDB: innodb_buffer_pool_size (128MB by default) is below the data the queries touch: \
                 raise it (up to about 70% of RAM on a server of its own; it resizes online); the hit ratio is \
                 Innodb_buffer_pool_reads against Innodb_buffer_pool_read_requests in SHOW GLOBAL STATUS",
            ),
            (
            "blocking-io",
            "MySQL/MariaDB: innodb_flush_log_at_trx_commit = 2 flushes the redo log once a second (up to a second \
             of commits lost if the host crashes, not if only mysqld does); on MariaDB 10.8 and later also \
             innodb_log_file_buffering = ON (the default when started with 2, not when set at run time), else \
             each commit's write to the redo log still waits for the disk (O_DIRECT); sync_binlog = 0 or N \
             likewise for the binary log; binlog_group_commit_sync_delay groups concurrent commits; batch \
             statements into transactions",
            ),
        ],
    },
    Known {
        name: "Redis",
        threads: &[],
        markers: &["aeProcessEvents", "aeMain", "readQueryFromClient", "serverCron"],
        cache_fills: &["performEvictions"],
        advice: &[
            (
                "blocking-io",
                "Redis: appendfsync always fsyncs the AOF on every write; appendfsync everysec (the default) loses \
                 at most about a second of writes on a crash, appendfsync no leaves flushing to the OS; \
                 no-appendfsync-on-rewrite yes avoids stalls while the AOF is rewritten",
            ),
            (
                "small-writes",
                "Redis: replies go out one write per command: clients that pipeline (or use MULTI/EXEC, MGET/MSET) \
                 get them batched; io-threads spreads many connections' reads and writes",
            ),
            (
                "too-few-workers",
                "Redis: one main thread runs every command: io-threads N (CPUs - 1 at most) moves the clients' \
                 socket writes, with io-threads-do-reads yes their reads, to N - 1 more threads; past that, one \
                 instance per CPU (Redis Cluster or sharding in the clients)",
            ),
            (
                "cache-misses",
                "Redis: maxmemory is below the data set, so writes evict keys (performEvictions) and reads of the \
                 evicted ones miss: raise maxmemory, or keep fewer or smaller keys (expiry, hashes of small \
                 fields); INFO stats counts evicted_keys and keyspace_misses",
            ),
            (
                "memory-pressure",
                "Redis: set maxmemory below the memory limit with a maxmemory-policy that evicts, and keep the \
                 server out of swap (its latency depends on RAM)",
            ),
        ],
    },
    Known {
        name: "nginx",
        threads: &[],
        markers: &["ngx_worker_process_cycle", "ngx_process_events_and_timers", "ngx_http_process_request"],
        cache_fills: &[],
        advice: &[
            (
                "small-writes/file",
                "nginx: buffer the access log, `access_log /var/log/nginx/access.log combined buffer=64k \
                 flush=1s;` (one write per 64 KB or per second; lines reach the file up to a second late), or \
                 `access_log off;` where it is not needed; the same holds for each server and location with \
                 its own access_log",
            ),
            ("small-writes", "nginx: sendfile on with tcp_nopush on for files"),
            (
                "blocking-io",
                "nginx: `access_log /var/log/nginx/access.log combined buffer=64k flush=1s;`; aio threads for \
                 large files on slow disks",
            ),
            (
                "repeated-lookups",
                "nginx: open_file_cache (with open_file_cache_valid) keeps descriptors and stat results; a \
                 resolver with valid= caches upstream names",
            ),
            (
                "cpu-throttling",
                "nginx: worker_processes auto counts the host's CPUs, not the quota: set worker_processes to the \
                 quota in CPUs",
            ),
            ("cpu-oversubscription", "nginx: worker_processes no higher than the CPUs it may use"),
            (
                "too-few-workers",
                "nginx: `worker_processes auto;` (one worker process per CPU; under a CPU quota, the quota in \
                 CPUs instead, as auto counts the host's) and `listen ... reuseport;` so the kernel spreads the \
                 connections over the workers (else one busy worker may take them all)",
            ),
        ],
    },
    Known {
        name: "memcached",
        threads: &["mc-worker", "mc-lrumaint", "mc-itemcrawler"],
        markers: &[],
        cache_fills: &["lru_pull_tail"],
        advice: &[
            (
                "cache-misses",
                "memcached: -m (64 MB by default) is below the items the clients use, so new items evict old \
                 ones and their gets miss: raise -m; `stats` counts evictions and get_misses",
            ),
            (
            "too-few-workers",
            "memcached: -t N, N the CPUs it may use (its worker threads, 4 by default, each serving its \
             connections from one event loop; more than the CPUs only queue for them)",
            ),
        ],
    },
    Known {
        name: "SQLite",
        threads: &[],
        markers: &["sqlite3_step", "sqlite3VdbeExec", "sqlite3_exec", "sqlite3PagerCommitPhaseOne"],
        cache_fills: &["readDbPage", "pcache1FetchStage2"],
        advice: &[
            (
                "cache-misses",
                "SQLite: its page cache (PRAGMA cache_size, 2 MB per connection by default) is below the pages \
                 the queries touch: raise cache_size (negative: in KiB), keep connections open (each has its \
                 own cache), or PRAGMA mmap_size to read the file through the OS cache without copies",
            ),
            (
            "blocking-io",
            "SQLite: wrap many statements in one transaction (BEGIN ... COMMIT: one sync per transaction); \
             PRAGMA journal_mode=WAL with PRAGMA synchronous=NORMAL syncs at checkpoints instead of every commit \
             (a power loss may drop the last commits, never corrupts)",
            ),
        ],
    },
    Known {
        name: "Go",
        threads: &[],
        markers: &["runtime.goexit", "runtime.mstart", "runtime.main"],
        cache_fills: &[],
        advice: &[
            (
                "gc-pressure",
                "Go: GOGC=200..400 trades heap for fewer collections; GOMEMLIMIT (e.g. 90% of the container's \
                 memory limit) lets GOGC be raised, even to off, without running out of memory; reuse buffers \
                 (sync.Pool) on the hot path",
            ),
            (
                "cpu-oversubscription",
                "Go: GOMAXPROCS no higher than the CPUs the program may use (Go 1.25 and later honour a cgroup \
                 quota themselves)",
            ),
            (
                "memory-pressure",
                "Go: GOMEMLIMIT below the memory limit makes the GC collect harder before the kernel starts \
                 evicting pages",
            ),
        ],
    },
];

/// What the profile says the target is: the software, its marker functions (or, recognised by them,
/// its threads' names) seen, up to 3, and the module they are in.
pub struct Recognised {
    pub known: &'static Known,
    pub functions: Vec<String>,
    pub module: String,
    /// `functions` or `threads`: what `functions` holds.
    pub by: &'static str,
}

impl Known {
    /// Whether `name` is one of the functions that fill its cache on a miss.
    pub fn fills_cache(&self, name: &str) -> bool {
        is_marker(name, self.cache_fills)
    }
}

fn is_marker(name: &str, markers: &[&str]) -> bool {
    markers.iter().any(|m| if m.ends_with('(') { name.starts_with(m) } else { name == *m })
}

/// The known software the profile is of, if any: the first in [`KNOWN`] (servers before the runtimes and
/// libraries they may embed) with one of its functions among the profile's frames or one of its thread
/// names among its threads.
pub fn recognise(f: &Facts) -> Option<Recognised> {
    let p = f.p;
    for known in &KNOWN {
        let mut functions: Vec<String> = Vec::new();
        let mut module = String::new();
        for i in 0..p.frames.len() as u32 {
            let name = p.frame_name(i);
            if is_marker(name, known.markers) && !functions.iter().any(|x| x == name) {
                if module.is_empty() {
                    module = p.frame_module(i).to_string();
                }
                functions.push(name.split('(').next().unwrap_or(name).to_string());
            }
        }
        let mut by = "functions";
        if functions.is_empty() {
            by = "threads";
            functions = known
                .threads
                .iter()
                .filter(|n| p.threads.iter().any(|t| t.name == **n))
                .map(|n| n.to_string())
                .collect();
        }
        if !functions.is_empty() {
            functions.sort();
            functions.truncate(3);
            return Some(Recognised { known, functions, module, by });
        }
    }
    None
}

/// Puts the software's own advice before the general fix of each finding it has advice for, with one
/// evidence line saying how it was recognised.
pub fn advise(f: &Facts, findings: &mut [Finding]) {
    let Some(r) = recognise(f) else { return };
    for x in findings.iter_mut() {
        let fits = |id: &str| match id.split_once('/') {
            Some((rule, case)) => rule == x.id && case == x.case,
            None => id == x.id,
        };
        let Some((_, advice)) = r.known.advice.iter().find(|(id, _)| fits(id)) else { continue };
        x.fix = format!("{advice}. In general: {}", x.fix);
        let module = std::path::Path::new(&r.module)
            .file_name()
            .map_or(String::new(), |m| format!(" in {}", m.to_string_lossy()));
        x.evidence.push(format!(
            "recognised as {} by its {} {}{module}",
            r.known.name,
            r.by,
            r.functions.join(", ")
        ));
    }
}

#[cfg(test)]
mod tests {
    use crate::doctor::facts::test_profile::profile;
    use crate::doctor::{diagnose, Facts};

    /// A PostgreSQL backend committing one statement at a time: blocking-io gets its settings first.
    #[test]
    fn postgres_commits_get_its_settings() {
        let p = profile(&[
            (
                "PostmasterMain;PostgresMain;exec_simple_query;CommitTransaction;XLogFlush;lib:fdatasync;\
                 k:__x64_sys_fdatasync;k:file_write_and_wait_range",
                0,
                700_000_000,
            ),
            ("PostmasterMain;PostgresMain;exec_simple_query;standard_ExecutorRun", 300_000_000, 0),
        ]);
        assert_eq!(super::recognise(&Facts::new(&p)).unwrap().known.name, "PostgreSQL");
        let d = diagnose(&p, "x.data");
        let io = d.findings.iter().find(|x| x.id == "blocking-io").unwrap();
        assert!(io.fix.starts_with("PostgreSQL: each commit waits") && io.fix.contains("synchronous_commit"));
        assert!(io.fix.contains("commit_delay") && io.fix.contains(". In general: batch durable writes"));
        assert_eq!(
            io.evidence.last().unwrap(),
            "recognised as PostgreSQL by its functions PostgresMain, PostmasterMain, XLogFlush in app"
        );
    }

    /// A PostgreSQL backend logging each statement and its duration to the server log: the small writes
    /// to the file, two per reply, get the log settings first.
    #[test]
    fn postgres_statement_logging_gets_its_settings() {
        let mut p = profile(&[
            (
                "PostmasterMain;PostgresMain;errfinish;EmitErrorReport;lib:__GI___libc_write;k:ksys_write;\
                 k:vfs_write;k:ext4_buffered_write_iter",
                10,
                0,
            ),
            ("PostmasterMain;PostgresMain;exec_simple_query;lib:__libc_send;k:__x64_sys_sendto;k:tcp_sendmsg", 20, 0),
            ("PostmasterMain;PostgresMain;exec_simple_query;standard_ExecutorRun", 70, 0),
        ]);
        let stat = |name: &str, calls: u64, bytes: u64| whyslow_model::SyscallStat {
            tid: 1,
            name: name.into(),
            calls,
            bytes: calls * bytes,
            total_ns: calls * 1000,
            ..Default::default()
        };
        p.syscalls.extend([
            stat("write", 20_000, 90),
            stat("sendto", 10_000, 60),
            stat("recvfrom", 10_000, 80),
        ]);
        let d = diagnose(&p, "x.data");
        let first = &d.findings[0];
        assert_eq!((first.id, first.case), ("small-writes", "file"), "{:?}", d.findings);
        assert!(
            first.fix.starts_with("PostgreSQL: the server log gets a line per statement"),
            "{}",
            first.fix
        );
        assert!(
            first.fix.contains("log_statement = 'ddl'") && first.fix.contains("log_min_duration_statement")
        );
    }

    #[test]
    fn redis_nginx_mysql_go_and_nothing() {
        let name = |stacks: &[(&str, i64, i64)]| {
            super::recognise(&Facts::new(&profile(stacks))).map(|r| r.known.name)
        };
        assert_eq!(name(&[("main;aeMain;aeProcessEvents;readQueryFromClient", 1, 0)]), Some("Redis"));
        assert_eq!(
            name(&[("main;ngx_worker_process_cycle;ngx_process_events_and_timers", 1, 0)]),
            Some("nginx")
        );
        assert_eq!(
            name(&[("handle_connection;do_command(THD*);dispatch_command(THD*, COM_DATA const*)", 1, 0)]),
            Some("MySQL/MariaDB")
        );
        assert_eq!(name(&[("runtime.goexit;main.work", 1, 0)]), Some("Go"));
        // A program named after a server but without its functions is not it.
        assert_eq!(name(&[("main;redis_like_loop;postgres_helper", 1, 0)]), None);
    }

    /// memcached, stripped (its frames are addresses), is recognised by the names of its threads; its one
    /// worker always busy on 2 CPUs gets `-t N` first.
    #[test]
    fn memcached_is_known_by_its_threads() {
        let ms = 1_000_000;
        let mut p = crate::doctor::facts::test_profile::on_threads(&[
            (1, "main;lib:event_base_loop;lib:epoll_wait;k:do_epoll_wait", 0, 10_000 * ms),
            (2, "start_thread;lib:event_base_loop;memcached+0x187ad", 6_000 * ms, 0),
            (2, "start_thread;lib:event_base_loop;memcached+0x187ad;k:[waiting for a CPU]", 0, 3_900 * ms),
            (2, "start_thread;lib:event_base_loop;lib:epoll_wait;k:do_epoll_wait", 10 * ms, 90 * ms),
        ]);
        for (t, name) in p.threads.iter_mut().zip(["memcached", "mc-worker"]) {
            t.name = name.into();
        }
        p.meta.target_env =
            Some(whyslow_model::TargetEnv { window_ns: 10_000_000_000, host_cpus: 2, ..Default::default() });
        let r = super::recognise(&Facts::new(&p)).unwrap();
        assert_eq!((r.known.name, r.by, r.functions.join(",")), ("memcached", "threads", "mc-worker".into()));
        let d = diagnose(&p, "x.data");
        let first = &d.findings[0];
        assert_eq!(first.id, "too-few-workers", "{:?}", d.findings);
        assert!(first.fix.starts_with("memcached: -t N, N the CPUs it may use"), "{}", first.fix);
        assert_eq!(first.evidence.last().unwrap(), "recognised as memcached by its threads mc-worker");
        assert_eq!(first.evidence[1], "2.0 CPUs the target may use (the host's): 1 busy worker on them");
    }

    /// Go under gc-pressure: GOGC and GOMEMLIMIT, with their trade-offs, before the general advice.
    #[test]
    fn go_gc_pressure_names_gogc_and_gomemlimit() {
        let p = profile(&[
            ("runtime.goexit;main.main;main.build;runtime.mallocgc", 40, 0),
            ("runtime.goexit;runtime.gcBgMarkWorker;runtime.gcDrain", 30, 0),
            ("runtime.goexit;main.main;main.work", 30, 0),
        ]);
        let d = diagnose(&p, "x.data");
        let gc = d.findings.iter().find(|x| x.id == "gc-pressure").expect("gc-pressure");
        assert!(gc.fix.starts_with("Go: GOGC=") && gc.fix.contains("GOMEMLIMIT"), "{}", gc.fix);
    }
}
