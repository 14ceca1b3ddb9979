//! The process's allocator: jemalloc, linked in, with the options below.
//!
//! Under many concurrent clients glibc's malloc was the largest single cost
//! in plangate's profile (15 % of its CPU in `malloc` and `free`, with
//! futex wake-ups on arena locks taken by frees from the other worker
//! thread): a request's buffers are allocated on one runtime thread and
//! freed on another. jemalloc's thread caches and arenas take those frees
//! without a lock; docs/benchmarks.md has the A/B numbers.
//!
//! The symbols are prefixed (`_rjem_…`), so only Rust's allocations go
//! here; SQLite and other C code keep glibc's `malloc`, which
//! `malloc_trim` still trims. Memory jemalloc keeps after a burst is
//! handed back when calls go quiet (`plangate_gateway::memory::release`).

/// Rust's allocations go to jemalloc.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once when it starts (the `MALLOC_CONF`
/// variable would be read too, but only unprefixed builds look at it; set
/// `_RJEM_MALLOC_CONF` to override these for an experiment):
///
/// * `muzzy_decay_ms:0` — pages given back are given back at once with
///   `MADV_DONTNEED`, not left "muzzy" (`MADV_FREE`), which the kernel
///   reclaims only under pressure and which still counts in RSS.
/// * dirty pages decay over jemalloc's default 10 s while calls keep
///   coming (so a steady load reuses them instead of faulting them in
///   again), and are purged at once when calls go quiet.
#[expect(
    unsafe_code,
    reason = "jemalloc reads its options from a C symbol of this name"
)]
// SAFETY: jemalloc reads `_rjem_malloc_conf` as a `const char *` to a
// NUL-terminated string once, at its first allocation; a reference to a
// byte array is that pointer, and the bytes are static and end in NUL.
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: &[u8; 17] = b"muzzy_decay_ms:0\0";
