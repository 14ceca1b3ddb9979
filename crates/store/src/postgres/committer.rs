//! The PostgreSQL committer: appends from every task of this process,
//! written in batches (group commit) under the event counter's lock, by the
//! cheapest path a batch allows (see the module docs of [`super`]). Apart
//! from the store because this is where the order promise of
//! `events_since` is kept, and it is the one intricate part.

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use crate::StoreError;
use crate::events::group_commit::{
    Waiting, answer_batch, fail_batch, is_taken_key_seq, run_committer, torn_append,
};

/// One non-empty `append_events` call waiting for the committer.
#[derive(Debug)]
pub(super) struct Append {
    pub(super) key_id: String,
    pub(super) expected: i64,
    pub(super) at_ms: Vec<i64>,
    pub(super) kinds: Vec<String>,
    pub(super) bodies: Vec<String>,
    pub(super) hashes: Vec<Option<String>>,
    pub(super) sigs: Vec<Option<String>>,
    pub(super) reply: tokio::sync::oneshot::Sender<Result<i64, StoreError>>,
}

/// Commits appends as they come: the first waiting one plus every other
/// already queued (up to [`crate::events::group_commit::GROUP_COMMIT_MAX`]) in one transaction, each as
/// one statement with its own compare-and-set, answering each caller only
/// after the commit. Ends when the store is dropped.
///
/// It keeps a connection of its own rather than taking one from the pool
/// per batch: the pool pings a connection before handing it out, one more
/// network round trip on every durable write. A connection that failed in
/// any way is dropped, and the next batch connects anew.
pub(super) async fn committer(
    options: PgConnectOptions,
    jobs: tokio::sync::mpsc::UnboundedReceiver<Append>,
) {
    let connect = || PgConnection::connect_with(&options);
    run_committer(jobs, connect, commit_batch).await;
}

/// Commits one batch on `conn`; gives the connection back unless it
/// failed.
async fn commit_batch(conn: PgConnection, batch: Vec<Append>) -> Option<PgConnection> {
    if batch.len() == 1 {
        return commit_lone(conn, batch).await;
    }
    let mut keys = std::collections::HashSet::with_capacity(batch.len());
    if batch.iter().all(|job| keys.insert(job.key_id.as_str())) {
        return commit_spread(conn, batch).await;
    }
    commit_locked(conn, batch).await
}

/// Commits a batch in one transaction that takes the counter's lock first,
/// one guarded statement per append: the path for batches with two appends
/// to one key (the second's guard must see the first's rows) and for a
/// batch whose single statement ([`commit_spread`]) met another replica's
/// commit to one of its keys.
async fn commit_locked(mut conn: PgConnection, batch: Vec<Append>) -> Option<PgConnection> {
    // READ COMMITTED whatever the server's default: each statement below
    // must see what the writer before us committed while we waited for the
    // counter's lock. The lock on the counter is the serialization point
    // (module docs), held until commit; it goes in the same simple query
    // as BEGIN — one round trip, not two.
    let mut tx = match conn
        .begin_with(
            "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT last_seq FROM event_seq FOR UPDATE",
        )
        .await
    {
        Ok(tx) => tx,
        Err(e) => {
            fail_batch(batch, &e);
            return None;
        }
    };
    // One guarded statement per append: it inserts all of the append's
    // events or, on a conflict, none. A statement error (never expected:
    // the counter's lock orders every writer that goes through here)
    // aborts the transaction, and every append of the batch is answered
    // with it — none was committed, so callers may simply try again.
    let mut results = Vec::with_capacity(batch.len());
    for job in &batch {
        match guarded_append(&mut tx, job).await {
            Ok(result) => results.push(result),
            Err(e) => {
                drop(tx);
                fail_batch(batch, &e);
                return None;
            }
        }
    }
    match tx.commit().await {
        Ok(()) => {
            answer_batch(batch, results);
            Some(conn)
        }
        Err(e) => {
            fail_batch(batch, &e);
            None
        }
    }
}

/// Commits a batch of one append as a single guarded statement in
/// autocommit: the statement is its own transaction, and the trigger's
/// `UPDATE event_seq` holds the counter's lock until that commit, so the
/// order promise holds as in [`commit_batch`]. One network round trip per
/// durable write instead of three (`BEGIN` with the lock, the insert,
/// `COMMIT`) — the write most callers make (a planned step, an applied
/// step's claim) is a lone one.
///
/// The guard's snapshot is taken before the lock, so a writer on another
/// replica appending to the same key while this one waits passes it; the
/// trigger, which reads the key's last key_seq after the wait, refuses the
/// row instead (or the `UNIQUE (key_id, key_seq)` constraint does). Either
/// refusal rolls the statement back whole and is answered as a conflict
/// with the key_seq now found, just as the guard's own would be.
async fn commit_lone(mut conn: PgConnection, batch: Vec<Append>) -> Option<PgConnection> {
    let Some(job) = batch.first() else {
        return Some(conn);
    };
    let result = match guarded_append(&mut conn, job).await {
        Ok(result) => result,
        Err(e) if is_taken_key_seq(&e) => match last_key_seq_in(&mut conn, &job.key_id).await {
            Ok(found) if found != job.expected => Err(job.conflict(found)),
            // Refused although nothing moved: not a race after all.
            Ok(_) => {
                fail_batch(batch, &e);
                return Some(conn);
            }
            Err(read) => {
                fail_batch(batch, &read);
                return None;
            }
        },
        Err(e) => {
            fail_batch(batch, &e);
            return None;
        }
    };
    answer_batch(batch, vec![result]);
    Some(conn)
}

/// Commits a batch whose appends are each to a different key as one
/// guarded `INSERT` in autocommit, as [`commit_lone`] does for one append:
/// one network round trip and one WAL flush for the whole batch, where
/// [`commit_locked`] takes two plus one per append while it holds the
/// lock every writer waits for (with 32 keys planning at once, batches of
/// 20–30 appends: the round trips, not the flush, were the time).
///
/// Each append's guard compares its key's last key_seq, in the
/// statement's snapshot, with the expected one, so an append whose caller
/// decided on an old state inserts nothing and is answered as a conflict,
/// the others landing. The snapshot is taken before the counter's lock:
/// a replica that committed to one of the keys meanwhile passes the guard
/// but not the trigger, whose refusal rolls the whole statement back;
/// the batch then goes through [`commit_locked`], whose guards read
/// after the lock.
async fn commit_spread(mut conn: PgConnection, batch: Vec<Append>) -> Option<PgConnection> {
    match spread_append(&mut conn, &batch).await {
        Ok(inserted) => {
            let mut results = Vec::with_capacity(batch.len());
            for job in &batch {
                let count = job.kinds.len() as u64;
                let n = inserted.get(job.key_id.as_str()).copied().unwrap_or(0);
                results.push(if n == count {
                    Ok(job.expected + count as i64)
                } else if n == 0 {
                    // Committed already: what the key holds now is the
                    // conflict's answer.
                    match last_key_seq_in(&mut conn, &job.key_id).await {
                        Ok(found) => Err(job.conflict(found)),
                        Err(e) => Err(StoreError::Database(e)),
                    }
                } else {
                    // One append's rows share one guard; anything else is
                    // not this statement's doing, and is said so.
                    Err(StoreError::Database(torn_append(count, n)))
                });
            }
            answer_batch(batch, results);
            Some(conn)
        }
        Err(e) if is_taken_key_seq(&e) => commit_locked(conn, batch).await,
        Err(e) => {
            fail_batch(batch, &e);
            None
        }
    }
}

/// The statement of [`commit_spread`]: every append's events, in batch
/// order, each row guarded by its append's expected key_seq. Answers how
/// many rows each key got.
async fn spread_append(
    conn: &mut PgConnection,
    batch: &[Append],
) -> Result<std::collections::HashMap<String, u64>, sqlx::Error> {
    let rows: usize = batch.iter().map(|job| job.kinds.len()).sum();
    let mut key_ids = Vec::with_capacity(rows);
    let mut key_seqs = Vec::with_capacity(rows);
    let mut expected = Vec::with_capacity(rows);
    let mut at_ms = Vec::with_capacity(rows);
    let mut kinds = Vec::with_capacity(rows);
    let mut bodies = Vec::with_capacity(rows);
    let mut hashes = Vec::with_capacity(rows);
    let mut sigs = Vec::with_capacity(rows);
    for job in batch {
        for (i, ((at, kind), body)) in job
            .at_ms
            .iter()
            .zip(&job.kinds)
            .zip(&job.bodies)
            .enumerate()
        {
            hashes.push(job.hashes[i].as_deref());
            sigs.push(job.sigs[i].as_deref());
            key_ids.push(job.key_id.as_str());
            key_seqs.push(job.expected + 1 + i as i64);
            expected.push(job.expected);
            at_ms.push(*at);
            kinds.push(kind.as_str());
            bodies.push(body.as_str());
        }
    }
    // The trigger numbers rows in order.
    let landed: Vec<String> = sqlx::query_scalar(
        "INSERT INTO events (key_id, key_seq, at_ms, type, body, hash, sig)
         SELECT e.key_id, e.key_seq, e.at_ms, e.type, e.body::json, e.hash, e.sig
         FROM UNNEST($1::text[], $2::int8[], $3::int8[], $4::int8[], $5::text[], $6::text[],
                     $7::text[], $8::text[])
              WITH ORDINALITY AS e(key_id, key_seq, expected, at_ms, type, body, hash, sig, n)
         WHERE (SELECT COALESCE(MAX(key_seq), 0) FROM events WHERE key_id = e.key_id) = e.expected
         ORDER BY e.n
         RETURNING key_id",
    )
    .bind(&key_ids)
    .bind(&key_seqs)
    .bind(&expected)
    .bind(&at_ms)
    .bind(&kinds)
    .bind(&bodies)
    .bind(&hashes)
    .bind(&sigs)
    .fetch_all(&mut *conn)
    .await?;
    let mut inserted = std::collections::HashMap::with_capacity(batch.len());
    for key in landed {
        *inserted.entry(key).or_insert(0) += 1;
    }
    Ok(inserted)
}

impl Waiting for Append {
    fn at(&self) -> (&str, i64) {
        (&self.key_id, self.expected)
    }
    fn events(&self) -> usize {
        self.kinds.len()
    }
    fn answer(self, result: Result<i64, StoreError>) {
        let _ = self.reply.send(result);
    }
}

/// Appends `jobs` (each to another key) in one transaction of a pool
/// connection, all or nothing ([`crate::EventLog::append_together`]):
/// the counter's lock first, as [`commit_locked`] takes it, so each
/// guard reads after every earlier writer's commit; a part whose log
/// moved — or a statement refused — rolls back every part.
pub(super) async fn append_together(
    pool: &sqlx::PgPool,
    jobs: &[Append],
) -> Result<Vec<i64>, StoreError> {
    let mut conn = pool.acquire().await?;
    let mut tx = conn
        .begin_with(
            "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT last_seq FROM event_seq FOR UPDATE",
        )
        .await?;
    let mut lasts = Vec::with_capacity(jobs.len());
    for job in jobs {
        match guarded_append(&mut tx, job).await {
            Ok(Ok(last)) => lasts.push(last),
            Ok(Err(conflict)) => {
                tx.rollback().await?;
                return Err(conflict);
            }
            Err(e) => {
                drop(tx);
                return Err(e.into());
            }
        }
    }
    tx.commit().await?;
    Ok(lasts)
}

/// One append as one guarded `INSERT`, in the transaction `conn` is in
/// (or in autocommit): all of its events or, on a conflict, none.
async fn guarded_append(
    conn: &mut PgConnection,
    job: &Append,
) -> Result<Result<i64, StoreError>, sqlx::Error> {
    let count = job.kinds.len() as i64;
    let key_seqs: Vec<i64> = (job.expected + 1..=job.expected + count).collect();
    // The trigger numbers rows in order.
    let inserted = sqlx::query(
        "INSERT INTO events (key_id, key_seq, at_ms, type, body, hash, sig)
         SELECT $1, e.key_seq, e.at_ms, e.type, e.body::json, e.hash, e.sig
         FROM UNNEST($2::int8[], $3::int8[], $4::text[], $5::text[], $7::text[], $8::text[])
              WITH ORDINALITY AS e(key_seq, at_ms, type, body, hash, sig, n)
         WHERE (SELECT COALESCE(MAX(key_seq), 0) FROM events WHERE key_id = $1) = $6
         ORDER BY e.n",
    )
    .bind(&job.key_id)
    .bind(&key_seqs)
    .bind(&job.at_ms)
    .bind(&job.kinds)
    .bind(&job.bodies)
    .bind(job.expected)
    .bind(&job.hashes)
    .bind(&job.sigs)
    .execute(&mut *conn)
    .await?;
    match inserted.rows_affected() {
        n if n == count.unsigned_abs() => return Ok(Ok(job.expected + count)),
        0 => {}
        // One statement inserts all or nothing; anything else is a reason
        // to take the careful path.
        n => {
            return Err(torn_append(count, n));
        }
    }
    let found = last_key_seq_in(&mut *conn, &job.key_id).await?;
    Ok(Err(job.conflict(found)))
}

/// The last key_seq of `key_id`, 0 if none, read through any executor (the
/// pool, or the connection of an open transaction).
pub(super) async fn last_key_seq_in<'e, E>(executor: E, key_id: &str) -> Result<i64, sqlx::Error>
where
    E: sqlx::PgExecutor<'e>,
{
    sqlx::query_scalar(super::EVENT_SQL.last_key_seq)
        .bind(key_id)
        .fetch_one(executor)
        .await
}
