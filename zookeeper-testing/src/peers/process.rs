//! A participant process: starting it, the line protocol, stopping and killing it.

use super::*;

/// How to start a peer; from [`Peer::builder`].
#[derive(Debug, Clone)]
pub struct PeerBuilder {
    pub(super) participant: Participant,
    pub(super) connect: String,
    pub(super) path: String,
    pub(super) id: Option<String>,
    pub(super) session_timeout: Duration,
    pub(super) start_timeout: Duration,
}

impl PeerBuilder {
    /// The participant's id (lock node data, `LeaderLatch` id, party member id; the
    /// default is its label).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The session timeout it asks for (default 10 s).
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long [`start`](Self::start) waits for `READY` (default
    /// [`DEFAULT_START_TIMEOUT`]).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Spawns the process and waits until it reports `READY` (connected, recipe built).
    pub fn start(self) -> PeerResult<Peer> {
        let timeout = self.start_timeout;
        let mut peer = self.spawn()?;
        peer.wait_ready(timeout)?;
        Ok(peer)
    }

    /// Spawns the process without waiting; call [`Peer::wait_ready`] before commands.
    /// Starting several peers this way overlaps their start-up (a JVM takes a second or
    /// more).
    pub fn spawn(self) -> PeerResult<Peer> {
        let (recipe, extra) = self.participant.program_args();
        let label = format!(
            "{recipe}@{:?}#{}",
            self.participant.library(),
            next_serial()
        );
        let mut args = vec![
            recipe.to_string(),
            format!("connect={}", self.connect),
            format!("path={}", self.path),
            format!("id={}", self.id.as_deref().unwrap_or(&label)),
            format!("session_ms={}", self.session_timeout.as_millis()),
        ];
        args.extend(extra);
        let mut cmd = match self.participant.library() {
            Library::Curator => curator_command()?,
            Library::Kazoo => kazoo_command()?,
        };
        cmd.args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let program = cmd.get_program().to_string_lossy().into_owned();
        let child = spawner::spawn(cmd)
            .map_err(|e| PeerError::io(format!("spawning {program} for {label}"), e))?;
        Ok(Peer::attach(label, self.participant, child))
    }
}

pub(super) fn next_serial() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SERIAL: AtomicU64 = AtomicU64::new(1);
    SERIAL.fetch_add(1, Ordering::Relaxed)
}

/// What the stdout reader passes on.
pub(super) enum Output {
    Line(String),
    Event(String),
}

/// A running participant process (see the [module docs](super)). Dropping it SIGKILLs
/// and reaps the process.
pub struct Peer {
    pub(super) label: String,
    pub(super) participant: Participant,
    pub(super) child: Child,
    pub(super) stdin: Option<ChildStdin>,
    pub(super) lines: Receiver<Output>,
    pub(super) events: VecDeque<String>,
    pub(super) stderr: Arc<Mutex<VecDeque<String>>>,
    /// The command whose answer is awaited, if any.
    pub(super) pending: Option<String>,
    /// A line received ahead of time ([`Peer::answered_within`]), delivered next.
    pub(super) peeked: Option<String>,
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer")
            .field("label", &self.label)
            .field("pid", &self.child.id())
            .field("pending", &self.pending)
            .finish()
    }
}

impl Peer {
    /// Starts `participant` on `path` of the servers in `connect` with default settings
    /// and waits until it is `READY`.
    pub fn start(participant: Participant, connect: &str, path: &str) -> PeerResult<Peer> {
        Peer::builder(participant, connect, path).start()
    }

    /// A builder for `participant` on `path` of the servers in `connect`.
    pub fn builder(participant: Participant, connect: &str, path: &str) -> PeerBuilder {
        PeerBuilder {
            participant,
            connect: connect.to_string(),
            path: path.to_string(),
            id: None,
            session_timeout: Duration::from_secs(10),
            start_timeout: DEFAULT_START_TIMEOUT,
        }
    }

    pub(super) fn attach(label: String, participant: Participant, mut child: Child) -> Peer {
        let (tx, lines) = mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { return };
                    let out = match line.strip_prefix("EVENT ") {
                        Some(event) => Output::Event(event.to_string()),
                        None => Output::Line(line),
                    };
                    if tx.send(out).is_err() {
                        return;
                    }
                }
            });
        }
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(err) = child.stderr.take() {
            let tail = Arc::clone(&stderr);
            thread::spawn(move || {
                for line in BufReader::new(err).lines() {
                    let Ok(line) = line else { return };
                    let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
                    if tail.len() == STDERR_LINES {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
            });
        }
        Peer {
            label,
            participant,
            stdin: child.stdin.take(),
            child,
            lines,
            events: VecDeque::new(),
            stderr,
            pending: Some("READY".to_string()),
            peeked: None,
        }
    }

    /// A label naming the participant and library, unique in this process (also the
    /// default id and the holder of its sections).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// What it runs.
    pub fn participant(&self) -> Participant {
        self.participant
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines the child wrote to stderr (library warnings, stack traces).
    pub fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(PoisonError::into_inner);
        tail.iter()
            .map(|l| format!("  {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits until the child reports `READY` (after [`PeerBuilder::spawn`]).
    pub fn wait_ready(&mut self, timeout: Duration) -> PeerResult<()> {
        if self.pending.as_deref() != Some("READY") {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        let line = self.next_line(deadline)?;
        self.pending = None;
        if line.trim() == "READY" {
            Ok(())
        } else {
            Err(PeerError::Protocol {
                peer: self.label.clone(),
                detail: format!("expected READY, got {line:?}"),
            })
        }
    }

    /// Sends one command line without waiting for its answer; [`finish`](Self::finish)
    /// collects it. One command at a time: send another only after `finish`.
    pub fn send(&mut self, command: &str) -> PeerResult<()> {
        if let Some(pending) = &self.pending {
            return Err(PeerError::Protocol {
                peer: self.label.clone(),
                detail: format!("{command} sent while {pending} is unanswered"),
            });
        }
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(self.exited());
        };
        if writeln!(stdin, "{command}")
            .and_then(|()| stdin.flush())
            .is_err()
        {
            return Err(self.exited());
        }
        self.pending = Some(command.to_string());
        Ok(())
    }

    /// Waits for the answer to the command [`send`](Self::send) sent.
    pub fn finish(&mut self, timeout: Duration) -> PeerResult<Reply> {
        let Some(command) = self.pending.clone() else {
            return Err(PeerError::Protocol {
                peer: self.label.clone(),
                detail: "no command is awaiting an answer".to_string(),
            });
        };
        let deadline = Instant::now() + timeout;
        let mut reply = Reply::default();
        loop {
            let line = self.next_line(deadline).map_err(|e| match e {
                PeerError::Timeout {
                    peer,
                    waiting_for,
                    stderr,
                } => PeerError::Timeout {
                    peer,
                    waiting_for: format!("{waiting_for} (the answer to {command})"),
                    stderr,
                },
                other => other,
            })?;
            if line == "OK" || line.starts_with("OK ") {
                self.pending = None;
                reply.ok = line[2..].trim().to_string();
                return Ok(reply);
            }
            if let Some(message) = line.strip_prefix("ERROR") {
                self.pending = None;
                return Err(PeerError::Command {
                    peer: self.label.clone(),
                    command,
                    message: message.trim().to_string(),
                });
            }
            reply.lines.push(line);
        }
    }

    /// [`send`](Self::send) then [`finish`](Self::finish).
    pub fn call(&mut self, command: &str, timeout: Duration) -> PeerResult<Reply> {
        self.send(command)?;
        self.finish(timeout)
    }
}

impl Peer {
    /// Asks the child to close its client and exit (its session ends at once), waiting
    /// up to `timeout`; it is killed if it does not exit in time.
    pub fn quit(mut self, timeout: Duration) -> PeerResult<()> {
        if self.pending.is_some() {
            return Err(self.protocol("QUIT while a command is unanswered".to_string()));
        }
        self.call("QUIT", timeout)?;
        self.stdin.take();
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
                _ => {
                    return Err(PeerError::Timeout {
                        peer: self.label.clone(),
                        waiting_for: "exit after QUIT".to_string(),
                        stderr: self.stderr_tail(),
                    })
                }
            }
        }
    }

    /// SIGKILLs the child (no cleanup: its session just stops talking and expires later)
    /// and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The next non-event line, before `deadline`.
    pub(super) fn next_line(&mut self, deadline: Instant) -> PeerResult<String> {
        if let Some(line) = self.peeked.take() {
            return Ok(line);
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(Output::Line(line)) => return Ok(line),
                Ok(Output::Event(event)) => self.events.push_back(event),
                Err(RecvTimeoutError::Timeout) => {
                    return Err(PeerError::Timeout {
                        peer: self.label.clone(),
                        waiting_for: self.pending.clone().unwrap_or_default(),
                        stderr: self.stderr_tail(),
                    })
                }
                Err(RecvTimeoutError::Disconnected) => return Err(self.exited()),
            }
        }
    }

    pub(super) fn exited(&mut self) -> PeerError {
        // The stdout reader ends first; give the process a moment to be reapable and
        // the stderr reader to catch the last lines.
        let deadline = Instant::now() + Duration::from_secs(2);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
                _ => break None,
            }
        };
        thread::sleep(Duration::from_millis(50));
        PeerError::Exited {
            peer: self.label.clone(),
            status,
            stderr: self.stderr_tail(),
        }
    }

    pub(super) fn protocol(&self, detail: String) -> PeerError {
        PeerError::Protocol {
            peer: self.label.clone(),
            detail,
        }
    }

    pub(super) fn stamp(&self, text: &str) -> PeerResult<u64> {
        text.trim()
            .parse()
            .map_err(|_| self.protocol(format!("expected a time stamp, got {text:?}")))
    }

    pub(super) fn number(&self, text: &str) -> PeerResult<i64> {
        text.trim()
            .parse()
            .map_err(|_| self.protocol(format!("expected a number, got {text:?}")))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // The child is not reaped before this, so its pid is still ours.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
