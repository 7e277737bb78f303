//! Which of a client's connections a call goes over: a task keeps to one, and everything done
//! under one token keeps to one (so a clean-up never overtakes the command it undoes).

use std::sync::atomic::Ordering;

use super::Connections;
use crate::connection::Conn;
use crate::lock::new_token;

impl Connections {
    /// One connection of the set (each is multiplexed and cheap to clone). A task always gets
    /// the same one, chosen by its task id, so tasks spread evenly over the set. Keeping a task
    /// on one connection is cheaper than spreading its calls: the replies one read brings wake
    /// tasks whose next commands go back out on that same connection, in one write, instead of
    /// one write on each connection. Outside a task, round-robin.
    pub(crate) fn conn(&self) -> Conn {
        self.0.conns[self.home()].clone()
    }

    /// The index of the current task's connection ([`conn`](Self::conn)).
    fn home(&self) -> usize {
        let n = self.0.conns.len();
        if n == 1 {
            return 0;
        }
        let i = match tokio::task::try_id() {
            Some(id) => task_number(id),
            None => self.0.next.fetch_add(1, Ordering::Relaxed),
        };
        i % n
    }

    /// The connection for everything done under one token: the acquire, the clean-up of an
    /// acquire whose reply was lost (or that was dropped), the release, the extends. Always the
    /// same one, so they reach the server in the order they were sent: over another connection
    /// a compare-and-delete could overtake the `SET` it undoes (held up on the network), find
    /// nothing, and let the `SET` land afterwards for its whole TTL. Tokens are random, so
    /// locks still spread over every connection.
    pub(crate) fn conn_for(&self, token: &str) -> &Conn {
        let conns = &self.0.conns;
        if conns.len() == 1 {
            return &conns[0];
        }
        &conns[token_slot(token, conns.len())]
    }

    /// A fresh token for a lock the current task takes, drawn so that the lock's connection
    /// ([`conn_for`](Self::conn_for)) is the task's own ([`conn`](Self::conn)): a task's lock
    /// commands then go out with the other commands its connection's replies woke, in one write.
    /// It is a random UUID v4 like any other, drawn among those that land there (with `n`
    /// connections, `n` draws on average, log2(n) bits less to guess).
    pub(crate) fn task_token(&self) -> String {
        self.token_on(self.home())
    }

    /// A fresh token whose connection is `slot` (see [`task_token`](Self::task_token)).
    fn token_on(&self, slot: usize) -> String {
        let n = self.0.conns.len();
        if n == 1 {
            return new_token();
        }
        // Drawn into a buffer on the stack: only the token kept is allocated. n draws on
        // average; the bound is never reached in practice (p = (1 - 1/n)^(64 n)).
        let mut buf = [0u8; uuid::fmt::Simple::LENGTH];
        for _ in 0..64 * n {
            let token: &str = uuid::Uuid::new_v4().simple().encode_lower(&mut buf);
            if token_slot(token, n) == slot {
                return token.to_owned();
            }
        }
        new_token()
    }
}

/// Which of `n` connections the commands of `token` go over.
fn token_slot(token: &str, n: usize) -> usize {
    // The last eight bytes (random in every token lockkit draws), mixed by one multiplication:
    // a constant cost, where a hash of the whole token cost as much as the rest of choosing the
    // connection, twice per lock.
    let bytes = token.as_bytes();
    let tail = bytes[bytes.len().saturating_sub(8)..]
        .iter()
        .fold(0u64, |x, &b| x << 8 | u64::from(b));
    let mixed = tail.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    (mixed % n as u64) as usize
}

/// A task id as a number (tokio numbers tasks in the order they are spawned).
fn task_number(id: tokio::task::Id) -> usize {
    use std::hash::{Hash, Hasher};
    /// Keeps the last integer hashed: the id's own number.
    #[derive(Default)]
    struct Number(u64);
    impl Hasher for Number {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 = self.0.rotate_left(8) ^ u64::from(*b);
            }
        }
        fn write_u64(&mut self, n: u64) {
            self.0 = n;
        }
    }
    let mut h = Number::default();
    id.hash(&mut h);
    h.finish() as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::ClientOptions;

    #[test]
    fn random_tokens_spread_evenly_over_the_connections() {
        for n in 2..=8usize {
            let mut counts = vec![0u32; n];
            let draws = 2000 * n as u32;
            for _ in 0..draws {
                counts[token_slot(&new_token(), n)] += 1;
            }
            // 2000 expected in each; a bias of a fifth is about nine standard deviations.
            assert!(
                counts.iter().all(|&c| (1600..=2400).contains(&c)),
                "{n} connections: {counts:?}"
            );
        }
        // Any string has a connection, short or empty.
        assert!(token_slot("", 3) < 3 && token_slot("ab", 3) < 3);
    }

    async fn client_id(mut conn: Conn) -> i64 {
        redis::cmd("CLIENT")
            .arg("ID")
            .query_async(&mut conn)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_task_and_the_locks_it_takes_keep_to_one_connection_and_tasks_spread_over_all() {
        let server = lockkit_test_support::RedisServer::start();
        let conns = Connections::connect(&server.url(), ClientOptions::new().connections(3))
            .await
            .unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..30 {
            let conns = conns.clone();
            let ids = tokio::spawn(async move {
                let mut ids = Vec::new();
                for _ in 0..4 {
                    ids.push(client_id(conns.conn()).await);
                    // The lock this task would take next: on the same connection.
                    let token = conns.task_token();
                    ids.push(client_id(conns.conn_for(&token).clone()).await);
                }
                ids
            })
            .await
            .unwrap();
            assert!(
                ids.iter().all(|&id| id == ids[0]),
                "one task, several connections: {ids:?}"
            );
            seen.insert(ids[0]);
        }
        assert_eq!(
            seen.len(),
            3,
            "thirty tasks should use all three connections: {seen:?}"
        );
    }
}
