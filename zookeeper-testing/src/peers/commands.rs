//! The recipe commands a participant answers: lock, counter, group and watch steps.

use super::*;

impl Peer {
    /// Acquires (lock, lease, leadership), waiting up to `timeout`; returns the enter
    /// stamp. A timeout leaves the acquire running in the child: drop the peer then.
    pub fn acquire(&mut self, timeout: Duration) -> PeerResult<u64> {
        let reply = self.call("ACQUIRE", timeout)?;
        self.stamp(&reply.ok)
    }

    /// Starts an acquire without waiting (e.g. to check it stays blocked while this
    /// process holds the lock); [`finish_acquire`](Self::finish_acquire) waits for it.
    pub fn send_acquire(&mut self) -> PeerResult<()> {
        self.send("ACQUIRE")
    }

    /// Waits for the acquire [`send_acquire`](Self::send_acquire) started; returns the
    /// enter stamp.
    pub fn finish_acquire(&mut self, timeout: Duration) -> PeerResult<u64> {
        let reply = self.finish(timeout)?;
        self.stamp(&reply.ok)
    }

    /// Whether an answer (to the pending command) has arrived, without consuming it; for
    /// "still blocked" checks.
    pub fn answered_within(&mut self, wait: Duration) -> PeerResult<bool> {
        if self.peeked.is_some() {
            return Ok(true);
        }
        let deadline = Instant::now() + wait;
        match self.next_line(deadline) {
            Ok(line) => {
                self.peeked = Some(line);
                Ok(true)
            }
            Err(PeerError::Timeout { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Releases what the last acquire took; returns the exit stamp.
    pub fn release(&mut self, timeout: Duration) -> PeerResult<u64> {
        let reply = self.call("RELEASE", timeout)?;
        self.stamp(&reply.ok)
    }

    /// Starts `count` acquire / hold for `hold` / release rounds without waiting.
    pub fn send_run(&mut self, count: u32, hold: Duration) -> PeerResult<()> {
        self.send(&format!("RUN {count} {}", hold.as_micros()))
    }

    /// Waits for the rounds of [`send_run`](Self::send_run); returns their sections.
    pub fn finish_run(&mut self, timeout: Duration) -> PeerResult<Vec<Section>> {
        let reply = self.finish(timeout)?;
        reply
            .lines
            .iter()
            .map(|line| {
                let mut parts = line.split_whitespace();
                match (parts.next(), parts.next(), parts.next()) {
                    (Some("SECTION"), Some(enter), Some(exit)) => Ok(Section {
                        holder: self.label.clone(),
                        enter_ns: self.stamp(enter)?,
                        exit_ns: self.stamp(exit)?,
                    }),
                    _ => Err(self.protocol(format!("expected SECTION, got {line:?}"))),
                }
            })
            .collect()
    }

    /// Runs `count` rounds (see [`send_run`](Self::send_run)) and returns the sections.
    pub fn run(
        &mut self,
        count: u32,
        hold: Duration,
        timeout: Duration,
    ) -> PeerResult<Vec<Section>> {
        self.send_run(count, hold)?;
        self.finish_run(timeout)
    }

    /// A counter's value, as the participant's library reads it.
    pub fn get(&mut self, timeout: Duration) -> PeerResult<i64> {
        let reply = self.call("GET", timeout)?;
        self.number(&reply.ok)
    }

    /// Sets a counter's value (Curator `setCount` / `forceSet`; kazoo: an unconditional
    /// write in the counter's layout).
    pub fn set(&mut self, value: i64, timeout: Duration) -> PeerResult<()> {
        self.call(&format!("SET {value}"), timeout).map(drop)
    }

    /// Starts `times` changes of a counter by `delta` without waiting.
    pub fn send_add(&mut self, delta: i64, times: u32) -> PeerResult<()> {
        self.send(&format!("ADD {delta} {times}"))
    }

    /// Waits for the changes of [`send_add`](Self::send_add); returns each change's
    /// `(pre, post)` values as the library reported them.
    pub fn finish_add(&mut self, timeout: Duration) -> PeerResult<Vec<(i64, i64)>> {
        let reply = self.finish(timeout)?;
        reply
            .lines
            .iter()
            .map(|line| {
                let mut parts = line.split_whitespace();
                match (parts.next(), parts.next(), parts.next()) {
                    (Some("ADDED"), Some(pre), Some(post)) => {
                        Ok((self.number(pre)?, self.number(post)?))
                    }
                    _ => Err(self.protocol(format!("expected ADDED, got {line:?}"))),
                }
            })
            .collect()
    }

    /// Changes a counter by `delta`, `times` times; returns the `(pre, post)` pairs.
    pub fn add(
        &mut self,
        delta: i64,
        times: u32,
        timeout: Duration,
    ) -> PeerResult<Vec<(i64, i64)>> {
        self.send_add(delta, times)?;
        self.finish_add(timeout)
    }

    /// Curator `SharedCount`: subscribe to changes; each comes as event `CHANGED <value>`
    /// (see [`next_event`](Self::next_event) and [`wait_for_value`](Self::wait_for_value)).
    pub fn watch(&mut self, timeout: Duration) -> PeerResult<()> {
        self.call("WATCH", timeout).map(drop)
    }

    /// kazoo `Party`, Curator `GroupMember`: join.
    pub fn join(&mut self, timeout: Duration) -> PeerResult<()> {
        self.call("JOIN", timeout).map(drop)
    }

    /// kazoo `Party`, Curator `GroupMember`: leave.
    pub fn leave(&mut self, timeout: Duration) -> PeerResult<()> {
        self.call("LEAVE", timeout).map(drop)
    }

    /// kazoo `Party`, Curator `GroupMember`: the members' ids, sorted.
    pub fn members(&mut self, timeout: Duration) -> PeerResult<Vec<String>> {
        let reply = self.call("MEMBERS", timeout)?;
        Ok(reply
            .ok
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect())
    }

    /// The next `EVENT` line (without the `EVENT ` prefix), waiting up to `timeout`;
    /// `Ok(None)` if none came. Events are queued while commands run.
    pub fn next_event(&mut self, timeout: Duration) -> PeerResult<Option<String>> {
        if let Some(event) = self.events.pop_front() {
            return Ok(Some(event));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(Output::Event(event)) => return Ok(Some(event)),
                Ok(Output::Line(line)) => {
                    if self.peeked.is_none() {
                        self.peeked = Some(line);
                    } else {
                        return Err(self.protocol(format!("unexpected line {line:?}")));
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => return Err(self.exited()),
            }
        }
    }

    /// Waits until a `CHANGED <value>` event reports `value` (the peer's library saw the
    /// node at that value); earlier events are skipped.
    pub fn wait_for_value(&mut self, value: i64, timeout: Duration) -> PeerResult<()> {
        let deadline = Instant::now() + timeout;
        let want = format!("CHANGED {value}");
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_event(left)? {
                Some(event) if event.trim() == want => return Ok(()),
                Some(_) => continue,
                None => {
                    return Err(PeerError::Timeout {
                        peer: self.label.clone(),
                        waiting_for: format!("event {want}"),
                        stderr: self.stderr_tail(),
                    })
                }
            }
        }
    }
}
