//! Handing freed memory back to the system once a burst of work is over.
//!
//! glibc's allocator keeps what a program frees: in per-thread arenas, and
//! in the middle of its heap wherever a live allocation sits above the
//! free space. A gateway that folded thousands of keys' plans (most of
//! them then evicted from its bounded state cache) or served thousands of
//! short HTTP sessions stays resident at that high-water mark for as long
//! as it runs, although its live heap is a fraction of it (measured:
//! about half of the resident growth with 10,000 open plans was freed
//! memory the allocator kept). `malloc_trim(0)` walks every arena and
//! returns its free pages (`madvise`). The binary allocates through
//! jemalloc (crates/cli/src/alloc.rs), which keeps freed pages "dirty" for
//! reuse and gives them back over about ten seconds, but only while
//! something allocates: an idle gateway would keep them. Both are asked
//! at once: jemalloc purges every arena, glibc trims what C code (SQLite)
//! freed.
//!
//! The walk locks each arena in turn, stalling any thread allocating in it
//! meanwhile, so it runs when the gateway has gone quiet: [`QUIET`] after
//! the last call, on a blocking thread — never during a burst, and at
//! most once per [`AT_LEAST_EVERY`] under load that never pauses. An idle
//! gateway does not wake for it. Elsewhere than on glibc (musl, macOS)
//! there is no `malloc_trim`; jemalloc's purge runs wherever jemalloc
//! builds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long without a call counts as quiet.
pub const QUIET: Duration = Duration::from_secs(1);

/// Under calls that never pause for [`QUIET`], trim anyway this often.
pub const AT_LEAST_EVERY: Duration = Duration::from_secs(60);

/// Tracks calls and wakes the trimming task (see the module docs).
#[derive(Debug)]
pub struct Trimmer {
    base: Instant,
    /// Milliseconds since `base` of the last call.
    last_ms: AtomicU64,
    /// Calls noted so far.
    calls: AtomicU64,
    /// How many trims have run.
    trims: AtomicU64,
    wake: Notify,
}

impl Default for Trimmer {
    fn default() -> Self {
        Trimmer {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            trims: AtomicU64::new(0),
            wake: Notify::new(),
        }
    }
}

impl Trimmer {
    /// Notes a call: the gateway is busy, and will be quiet [`QUIET`]
    /// after the last one. A few atomic operations; no lock, no allocation.
    pub fn touch(&self) {
        self.last_ms.store(self.elapsed_ms(), Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// How many trims have run.
    pub fn trims(&self) -> u64 {
        self.trims.load(Ordering::Relaxed)
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// How long until the gateway has been quiet for [`QUIET`] (zero if it
    /// has been).
    fn until_quiet(&self) -> Duration {
        let quiet_at = self
            .last_ms
            .load(Ordering::Relaxed)
            .saturating_add(u64::try_from(QUIET.as_millis()).unwrap_or(u64::MAX));
        Duration::from_millis(quiet_at.saturating_sub(self.elapsed_ms()))
    }

    /// Waits for a burst of calls to start and go quiet, then trims, over
    /// and over, until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut trimmed_after = 0;
        loop {
            // A call since the last trim left a permit and wakes this at
            // once; otherwise it sleeps until the next call. A permit left
            // by a call the last trim came after is no reason to trim.
            tokio::select! {
                () = self.wake.notified() => {}
                () = shutdown.cancelled() => return,
            }
            if self.calls.load(Ordering::Relaxed) == trimmed_after {
                continue;
            }
            let started = Instant::now();
            loop {
                let wait = self.until_quiet();
                if wait.is_zero() || started.elapsed() >= AT_LEAST_EVERY {
                    break;
                }
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = shutdown.cancelled() => return,
                }
            }
            trimmed_after = self.calls.load(Ordering::Relaxed);
            let released = tokio::task::spawn_blocking(release).await;
            self.trims.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(?released, "returned freed memory to the system");
        }
    }
}

/// Hands back what the allocators keep: jemalloc's dirty pages (Rust's
/// allocations, where the binary links it) and glibc's free pages (C
/// code's: SQLite); whether either gave anything back.
pub fn release() -> bool {
    let jemalloc = purge_jemalloc();
    let glibc = trim_glibc();
    jemalloc || glibc
}

/// Asks jemalloc to purge every arena's unused dirty pages now
/// (`arena.<MALLCTL_ARENAS_ALL>.purge`); whether it took the request. A
/// process that does not allocate through jemalloc only starts it.
#[cfg(not(target_env = "msvc"))]
#[expect(
    unsafe_code,
    reason = "mallctl is a C call; one of the two unsafe blocks in the library"
)]
fn purge_jemalloc() -> bool {
    // MALLCTL_ARENAS_ALL (4096): every arena.
    let name = c"arena.4096.purge";
    // SAFETY: the name is a NUL-terminated string that outlives the call;
    // a purge reads and writes nothing, so every other pointer is null and
    // the length zero, which is what jemalloc checks it was given.
    let status = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    status == 0
}

#[cfg(target_env = "msvc")]
fn purge_jemalloc() -> bool {
    false
}

/// Asks glibc to return the free pages of every arena; whether it did.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(
    unsafe_code,
    reason = "malloc_trim is a C call; one of the two unsafe blocks in the library"
)]
fn trim_glibc() -> bool {
    // SAFETY: malloc_trim takes no pointer and has no precondition; glibc
    // serializes it with every other allocator call.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Elsewhere than glibc there is no such call (and musl's and macOS's
/// allocators return memory themselves).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_glibc() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing runs while idle or during a burst; one trim follows the
    /// burst once it has been quiet for [`QUIET`].
    #[tokio::test(start_paused = true)]
    async fn it_trims_once_a_burst_goes_quiet() {
        let trimmer = Arc::new(Trimmer::default());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(trimmer.clone().run(shutdown.clone()));
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(trimmer.trims(), 0, "idle: no call, no trim");

        for _ in 0..10 {
            trimmer.touch();
            tokio::time::sleep(QUIET / 3).await;
        }
        assert_eq!(trimmer.trims(), 0, "not while calls keep coming");
        trimmer.touch();
        tokio::time::sleep(QUIET * 2).await;
        assert_eq!(trimmer.trims(), 1, "once quiet");
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert_eq!(trimmer.trims(), 1, "and not again until a call");

        shutdown.cancel();
        task.await.expect("ended without a panic");
    }

    /// Calls that never pause still get a trim now and then.
    #[tokio::test(start_paused = true)]
    async fn unpausing_calls_get_a_trim_at_least_every_minute() {
        let trimmer = Arc::new(Trimmer::default());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(trimmer.clone().run(shutdown.clone()));
        let calls = (AT_LEAST_EVERY.as_millis() * 2 / 200) as usize + 10;
        for _ in 0..calls {
            trimmer.touch();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(trimmer.trims() >= 2, "{} trims", trimmer.trims());
        shutdown.cancel();
        task.await.expect("ended without a panic");
    }

    #[test]
    fn release_can_be_called_any_time() {
        let _ = release();
        let v: Vec<u8> = vec![1; 1 << 20];
        drop(v);
        let _ = release();
    }
}
