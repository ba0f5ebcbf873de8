//! The handle: connect, session accessors, close, and the one path by which every
//! request reaches C (`submit`).

use crate::closer;
use crate::context::{self, SweepReason};
use crate::error::{Error, Result};
use crate::handle::{HandleCell, HandleSlot, RawHandle};
use crate::in_flight::{InFlight, MAX_IN_FLIGHT};
use crate::path::c_string;
use crate::reply::deadline_after;
use crate::session::{Session, SessionEvents};
use crate::timeout::Timeout;
use crate::types::{ClientId, SessionState, WatchedEvent};
use crate::watch_table::WatchTable;
use parking_lot::Mutex;
use std::os::raw::{c_int, c_void};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zookeeper_mt_sys as sys;

static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

struct Inner {
    handle: HandleSlot,
    session: Arc<Session>,
    /// Watch registrations, one per path and kind (see `watch_table.rs`).
    watches: Arc<WatchTable>,
    /// The `Arc<Session>` leaked to C as the global watcher context.
    session_context: *const Session,
    client: u64,
    /// What the C handle references for TLS/SASL; outlives `zookeeper_close`.
    security: Arc<crate::security::Keepalive>,
    /// The bound on requests in flight (see `in_flight.rs`).
    in_flight: Arc<InFlight>,
    /// How this session was made (without a session to resume), for [`ZooKeeper::new_session`].
    options: ZooKeeperBuilder,
    /// Credentials handed to C with `add_auth`, in order (C resends them on reconnect).
    auths: Mutex<Vec<(String, Vec<u8>)>>,
}

// SAFETY: `session_context` is only dereferenced by C callbacks and reclaimed once, after
// the C threads are joined; every other field is Send + Sync.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

/// A ZooKeeper session over the C client. Cheap to clone (all clones share the session)
/// and usable from any number of threads. The session closes on [`close`](Self::close)
/// or when the last clone is dropped.
///
/// ```no_run
/// use std::time::Duration;
/// use zookeeper_mt::{Acl, CreateMode, ZooKeeper};
///
/// let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
/// zk.create("/greeting", b"hello", CreateMode::Persistent)?;
/// let (data, stat) = zk.get("/greeting")?;
/// assert_eq!(data, b"hello");
/// zk.delete("/greeting", Some(stat.version))?;
/// zk.close()?;
/// # Ok::<(), zookeeper_mt::Error>(())
/// ```
#[derive(Clone)]
pub struct ZooKeeper {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ZooKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeper")
            .field("client", &self.inner.client)
            .field("state", &self.state())
            .finish()
    }
}

/// Options for [`ZooKeeper::builder`].
#[derive(Debug, Clone)]
pub struct ZooKeeperBuilder {
    hosts: String,
    session_timeout: Duration,
    /// `None`: the session timeout, whenever it is set (before or after this).
    connect_timeout: Option<Timeout>,
    client_id: Option<ClientId>,
    read_only: bool,
    deterministic_order: Option<bool>,
    resolution_delay: Duration,
    pub(crate) security: crate::security::SecurityOptions,
}

impl ZooKeeperBuilder {
    /// Requested session timeout (the server clamps it to its bounds). Default 10 s.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long `connect` waits for the first connection. Default: the session timeout,
    /// in whichever order the two are set. [`Timeout::Never`] waits until the session is
    /// made or has ended.
    pub fn connect_timeout(mut self, timeout: impl Into<Timeout>) -> Self {
        self.connect_timeout = Some(timeout.into());
        self
    }

    /// Resume an existing session (id and password from [`ZooKeeper::client_id`]).
    pub fn session(mut self, client_id: ClientId) -> Self {
        self.client_id = Some(client_id);
        self
    }

    /// Accept read-only servers (`ZOO_READONLY`) when no quorum is reachable.
    pub fn read_only(mut self, allowed: bool) -> Self {
        self.read_only = allowed;
        self
    }

    /// Try the hosts in the given order instead of shuffling. This is a process-wide
    /// switch in the C client (`zoo_deterministic_conn_order`), applied at connect.
    pub fn deterministic_order(mut self, deterministic: bool) -> Self {
        self.deterministic_order = Some(deterministic);
        self
    }

    /// Minimum delay between host-name re-resolutions (`zoo_set_servers_resolution_delay`).
    /// Default 10 s; the C client's own default re-resolves on every IO loop pass.
    pub fn resolution_delay(mut self, delay: Duration) -> Self {
        self.resolution_delay = delay;
        self
    }

    /// Connects, returning once the session is established.
    ///
    /// Errors: `Unresolvable` if no host resolves, `Timeout` if no server accepted the
    /// session within the connect timeout (e.g. every port refused), `SessionExpired`
    /// when resuming a session the server no longer knows.
    pub fn connect(self) -> Result<ZooKeeper> {
        let started = self.start()?;
        let state = started.zk.inner.session.wait_connected(started.deadline);
        match state {
            state if state.is_connected() => Ok(started.zk),
            SessionState::Expired => Err(Error::SessionExpired),
            SessionState::AuthFailed => Err(Error::AuthFailed),
            _ => Err(started.connecting.timeout_error()), // dropping `zk` closes the handle
        }
    }

    /// As [`connect`](Self::connect), as a future that blocks no thread while it waits:
    /// the session event that reports the connection wakes it, and a timer thread of the
    /// client wakes it at the connect timeout. The same errors as `connect`.
    ///
    /// The handle is made (`zookeeper_init`) when this is called, as `connect` makes it:
    /// that call starts the C client's threads and does not wait on the network, but it
    /// resolves the host names, which waits on DNS for names not in `/etc/hosts`. Dropping
    /// the future before it is done closes the half-made handle on the client's closer
    /// thread, not on the dropping one.
    pub fn connect_async(self) -> crate::connect::ConnectFuture {
        match self.start() {
            Ok(started) => crate::connect::ConnectFuture::new(started),
            Err(error) => crate::connect::ConnectFuture::failed(error),
        }
    }

    /// Makes the handle and starts watching it connect: everything of a connect but the
    /// wait.
    fn start(self) -> Result<Started> {
        if self.hosts.trim().is_empty() {
            return Err(Error::InvalidArgument("empty host list"));
        }
        let hosts = c_string(&self.hosts, "host list")?;
        let session_ms = c_int::try_from(self.session_timeout.as_millis())
            .map_err(|_| Error::InvalidArgument("session timeout too large"))?;
        let delay_ms = c_int::try_from(self.resolution_delay.as_millis())
            .map_err(|_| Error::InvalidArgument("resolution delay too large"))?;
        let client_id = self.client_id.map(|id| {
            let mut raw = sys::clientid_t {
                client_id: id.session_id,
                passwd: [0; 16],
            };
            for (dst, src) in raw.passwd.iter_mut().zip(id.password) {
                *dst = src as std::os::raw::c_char;
            }
            raw
        });

        // TLS files loaded once and strings checked before anything is handed to C.
        let security = crate::security::Prepared::new(&self.security)?;

        crate::logging::apply_default_level();
        closer::start()?;
        crate::timer::start()?;
        if let Some(deterministic) = self.deterministic_order {
            // SAFETY: sets a process-wide int; no preconditions.
            unsafe { sys::zoo_deterministic_conn_order(deterministic as c_int) };
        }

        let client = NEXT_CLIENT.fetch_add(1, Ordering::Relaxed);
        let session = Arc::new(Session::new(client));
        let session_context = Arc::into_raw(Arc::clone(&session));
        let flags = if self.read_only {
            sys::ZOO_READONLY as c_int
        } else {
            0
        };
        // SAFETY: `hosts` is NUL-terminated and copied by C; `client_id` is NULL or a
        // valid clientid_t copied by C; the context is a live `Arc<Session>` reclaimed only
        // after `zookeeper_close` (or right below if init fails). The keepalive holds what
        // C references for TLS/SASL and is kept in `Inner` until after `zookeeper_close`.
        let (zh, keepalive) = unsafe {
            security.init(
                hosts.as_ptr(),
                session_ms,
                client_id.as_ref().map_or(ptr::null(), |id| id as *const _),
                session_context as *mut c_void,
                flags,
            )
        };
        let Some(zh) = NonNull::new(zh) else {
            let os_error = std::io::Error::last_os_error().to_string();
            // SAFETY: init failed, so C kept no copy of the context: reclaim it once.
            drop(unsafe { Arc::from_raw(session_context) });
            return Err(Error::Unresolvable {
                hosts: self.hosts,
                os_error,
            });
        };
        // SAFETY: `zh` is a live handle no other thread knows yet.
        unsafe { sys::zoo_set_servers_resolution_delay(zh.as_ptr(), delay_ms) };

        let handle = HandleCell::new(RawHandle(zh));
        let options = ZooKeeperBuilder {
            client_id: None,
            ..self.clone()
        };
        let watches = WatchTable::new(client, Arc::clone(&session), Arc::clone(&handle));
        let zk = ZooKeeper {
            inner: Arc::new(Inner {
                handle,
                session,
                watches,
                session_context,
                client,
                security: Arc::new(keepalive),
                in_flight: InFlight::new(MAX_IN_FLIGHT),
                options,
                auths: Mutex::new(Vec::new()),
            }),
        };
        let deadline = match self.connect_timeout {
            Some(timeout) => timeout.deadline().instant(),
            None => Some(deadline_after(self.session_timeout)),
        };
        let connecting = crate::security::Connecting::start(&self.security, &zk);
        Ok(Started {
            zk,
            connecting,
            deadline,
        })
    }
}

/// A handle made and connecting (see `ZooKeeperBuilder::start`).
pub(crate) struct Started {
    pub(crate) zk: ZooKeeper,
    pub(crate) connecting: crate::security::Connecting,
    pub(crate) deadline: Option<std::time::Instant>,
}

impl ZooKeeper {
    /// Connects to `hosts` (`"host:port,host:port[/chroot]"`) with the given session
    /// timeout and waits until the session is established.
    pub fn connect(hosts: &str, session_timeout: Duration) -> Result<ZooKeeper> {
        ZooKeeper::builder(hosts)
            .session_timeout(session_timeout)
            .connect()
    }

    /// As [`connect`](Self::connect), as a future that blocks no thread while it waits
    /// (see [`ZooKeeperBuilder::connect_async`]).
    pub fn connect_async(hosts: &str, session_timeout: Duration) -> crate::connect::ConnectFuture {
        ZooKeeper::builder(hosts)
            .session_timeout(session_timeout)
            .connect_async()
    }

    /// A builder for the other connection options.
    pub fn builder(hosts: &str) -> ZooKeeperBuilder {
        ZooKeeperBuilder {
            hosts: hosts.to_string(),
            session_timeout: Duration::from_secs(10),
            connect_timeout: None,
            client_id: None,
            read_only: false,
            deterministic_order: None,
            resolution_delay: Duration::from_secs(10),
            security: Default::default(),
        }
    }

    /// The current session state.
    pub fn state(&self) -> SessionState {
        self.inner.session.state()
    }

    /// A new receiver of every session event from now on (connected, connecting,
    /// expired, ...): blocking (it derefs to a channel receiver) and an async stream.
    /// Any number of receivers may exist; each gets every event. The stream ends when
    /// the handle closes.
    ///
    /// Subscribe once and keep the receiver: a dropped receiver's subscription is only
    /// pruned at the next session event, so calling this in a loop accumulates them.
    pub fn session_events(&self) -> SessionEvents {
        self.inner.session.subscribe()
    }

    /// A session-event subscription and the state it starts from, read together (see
    /// `Session::subscribe_with_state`).
    pub(crate) fn session_events_with_state(&self) -> (SessionEvents, SessionState) {
        self.inner.session.subscribe_with_state()
    }

    /// Waits until the session is connected again (after a connection loss), or fails
    /// with `Timeout`, or with the terminal error. On the C completion thread (a waker
    /// running its task inline), which delivers the connection event, it does not wait:
    /// it fails at once unless the session is connected already.
    pub fn wait_connected(&self, timeout: impl Into<Timeout>) -> Result<()> {
        let deadline = timeout.into().deadline().instant();
        if crate::no_wait::here() && !self.inner.session.state().is_connected() {
            return match self.inner.session.state() {
                SessionState::Expired => Err(Error::SessionExpired),
                SessionState::AuthFailed => Err(Error::AuthFailed),
                SessionState::Closed => Err(Error::Closed),
                _ => Err(crate::reply::COMPLETION_THREAD_WAIT),
            };
        }
        match self.inner.session.wait_connected(deadline) {
            state if state.is_connected() => Ok(()),
            SessionState::Expired => Err(Error::SessionExpired),
            SessionState::AuthFailed => Err(Error::AuthFailed),
            SessionState::Closed => Err(Error::Closed),
            _ => Err(Error::Timeout),
        }
    }

    /// Runs `call` with the live C handle, holding the read lock so close cannot run
    /// concurrently. Fails fast on a closed or terminal session.
    ///
    /// The read lock is only ever tried, never waited for: the one writer is `close`, so
    /// a lock that cannot be had (or a close already decided, see `HandleCell`) means a
    /// close has started, and the call fails with
    /// `Closed` at once instead of stalling for the seconds `zookeeper_close` can take
    /// (it sends CloseSession and waits for the answer). This also keeps a caller on the
    /// C completion thread (a waker) from waiting on a closer that joins that thread.
    pub(crate) fn with_handle<R>(&self, call: impl FnOnce(*mut sys::zhandle_t) -> R) -> Result<R> {
        // (A match, not `ok_or`: that builds and drops an `Error` on every call.)
        let Some(guard) = self.inner.handle.try_read() else {
            return Err(Error::Closed);
        };
        let Some(handle) = *guard else {
            return Err(Error::Closed);
        };
        match self.inner.session.state() {
            SessionState::Expired => return Err(Error::SessionExpired),
            SessionState::AuthFailed => return Err(Error::AuthFailed),
            _ => {}
        }
        Ok(call(handle.0.as_ptr()))
    }

    /// The bound on this handle's requests in flight.
    pub(crate) fn in_flight(&self) -> &Arc<InFlight> {
        &self.inner.in_flight
    }

    /// Requests of this handle queued for room in flight now (made while
    /// [`MAX_IN_FLIGHT`](crate::MAX_IN_FLIGHT) were in flight, not sent yet).
    #[doc(hidden)]
    pub fn requests_queued(&self) -> usize {
        self.inner.in_flight.queued()
    }

    /// Requests of this handle in flight now (at most [`MAX_IN_FLIGHT`](crate::MAX_IN_FLIGHT)).
    #[doc(hidden)]
    pub fn requests_in_flight(&self) -> usize {
        self.inner.in_flight.count()
    }

    /// What the server's answers tell of its session clock (see `liveness.rs`).
    pub(crate) fn liveness(&self) -> &crate::liveness::Liveness {
        &self.inner.in_flight.liveness
    }

    /// The parts a [`SessionClock`](crate::SessionClock) reads (see `liveness.rs`).
    pub(crate) fn clock_parts(&self) -> (Arc<InFlight>, Arc<Session>) {
        (
            Arc::clone(&self.inner.in_flight),
            Arc::clone(&self.inner.session),
        )
    }

    /// The session state shared with the C callbacks.
    pub(crate) fn session(&self) -> &Arc<Session> {
        &self.inner.session
    }

    /// This handle's watch registrations.
    pub(crate) fn watch_table(&self) -> &Arc<WatchTable> {
        &self.inner.watches
    }

    /// The session id and password, to resume the session elsewhere.
    ///
    /// Connects a *new* session like this one: the same connect string and options
    /// (timeouts, read-only, TLS, SASL) and the credentials added with
    /// [`add_auth`](Self::add_auth), added again in the same order. For work that must
    /// go on after this session is over (expired, closed): a managed client's next
    /// session, or putting back what an ended session held. It never resumes this
    /// session (a resumed handle would share its ephemeral nodes).
    ///
    /// Errors are [`connect`](ZooKeeperBuilder::connect)'s and
    /// [`add_auth`](Self::add_auth)'s; a failed `add_auth` closes the new handle.
    pub fn new_session(&self) -> Result<ZooKeeper> {
        let zk = self.inner.options.clone().connect()?;
        let auths = self.inner.auths.lock().clone();
        for (scheme, credentials) in auths {
            zk.add_auth(&scheme, &credentials)?;
        }
        Ok(zk)
    }

    /// Records credentials C has accepted, for [`new_session`](Self::new_session).
    pub(crate) fn record_auth(&self, scheme: &str, credentials: &[u8]) {
        self.inner
            .auths
            .lock()
            .push((scheme.to_string(), credentials.to_vec()));
    }

    /// Read from a copy taken when the session (re)connected, never from the C handle:
    /// its IO thread rewrites that struct on every reconnect, unsynchronized.
    pub fn client_id(&self) -> Result<ClientId> {
        // Fails on a closed or ended session, as every call does.
        self.with_handle(|_| ())?;
        // `connect` returns only once connected, and the id is recorded before the
        // state says so: the copy is always there for a handle a caller holds.
        self.inner.session.client_id().ok_or(Error::SystemError)
    }

    /// The session timeout negotiated with the server.
    ///
    /// Read from a copy taken when the session was made (as for
    /// [`client_id`](Self::client_id)), never from the C handle, which the IO thread
    /// rewrites at every handshake.
    pub fn session_timeout(&self) -> Result<Duration> {
        self.with_handle(|_| ())?;
        self.inner.session.recv_timeout().ok_or(Error::SystemError)
    }

    /// The server this handle is connected to (`ip:port`), or `None` while disconnected.
    ///
    /// Derived from [`connected_host`](Self::connected_host). The C client's
    /// `zoo_get_current_server` is not used: it formats into a static buffer its IO thread
    /// also writes while logging (ZOOKEEPER-4810), a data race safe code must not reach.
    pub fn current_server(&self) -> Result<Option<String>> {
        Ok(self.connected_host()?.map(|addr| addr.to_string()))
    }

    /// The address of the server the session is connected to, or `None` while
    /// disconnected.
    ///
    /// Recorded on the completion thread when the session event reporting the connection
    /// is delivered, and forgotten at the next session event (a connection loss): never
    /// read from the C client's socket on the caller's thread, where the IO thread may
    /// have closed it meanwhile and the descriptor may belong to another socket. So it
    /// follows the session events, in their order.
    pub fn connected_host(&self) -> Result<Option<std::net::SocketAddr>> {
        self.with_handle(|_| ())?;
        Ok(self.inner.session.peer())
    }

    /// Whether the session can never recover (expired or auth failed; `is_unrecoverable`).
    pub fn is_unrecoverable(&self) -> bool {
        match self.with_handle(|zh| {
            // SAFETY: live handle.
            unsafe { sys::is_unrecoverable(zh) }
        }) {
            Ok(rc) => rc != sys::ZOK,
            Err(_) => true,
        }
    }

    /// Contexts of this handle still held for C: pending requests, and one per path and
    /// kind with a watch armed or being set. Reads 0 after close: every context is freed
    /// exactly once.
    pub fn live_contexts(&self) -> usize {
        context::live_contexts(self.inner.client)
    }

    /// Contexts held for C by every handle of this process.
    // For tests and benchmarks: hidden from the docs, not covered by semver.
    #[doc(hidden)]
    pub fn live_contexts_in_process() -> usize {
        context::live_contexts_total()
    }

    /// Closes the session: pending requests fail with `Closed`, watches end, the
    /// session's ephemeral nodes go. Waits for calls running on other threads to
    /// return first. Later calls on any clone fail with `Closed`. Idempotent.
    ///
    /// On a thread where the client never waits (the C completion thread, the recipes'
    /// driver thread) the
    /// close is finished by the client's closer thread and this returns at once; calls
    /// made after it fail with `Closed` all the same.
    ///
    /// Inside the closure of [`with_raw_handle`](Self::with_raw_handle) on this handle
    /// (or a clone) it fails with `InvalidArgument` and closes nothing: the closure
    /// holds the handle open, so the close would wait for itself.
    ///
    /// `Ok` says this handle is closed, not that the server ended the session: the C
    /// client sends the close request only while it is connected. Closed during a
    /// connection loss, or after another client resumed the session (with
    /// [`client_id`](Self::client_id)) and took the connection away, the session lives on
    /// until the server expires it after its timeout, or until its current owner closes it.
    pub fn close(&self) -> Result<()> {
        close_inner(&self.inner)
    }

    /// As [`close`](Self::close), as a future that blocks no thread: the close is decided
    /// when this returns (later calls on any clone fail with `Closed` at once) and done by
    /// the client's closer thread; the future completes once the handle has left its slot
    /// and `zookeeper_close` has returned (or, if the handle was closed or being closed
    /// already, once that close is done). [`ZkFuture::wait_timeout`](crate::ZkFuture::wait_timeout)
    /// bounds a blocking wait for it. Dropping the future does not stop the close.
    ///
    /// Inside the closure of [`with_raw_handle`](Self::with_raw_handle) on this handle it
    /// fails with `InvalidArgument` and closes nothing, as `close` does.
    pub fn close_async(&self) -> crate::ZkFuture<()> {
        if crate::raw::inside_raw_call(self.inner.client) {
            return crate::ZkFuture::failed(CLOSE_IN_RAW_CALL);
        }
        let done = crate::reply::ReplySlot::new();
        hand_off_close(&self.inner, Some(Arc::clone(&done)));
        crate::ZkFuture::pending(done, None, |reply, _| Error::check(reply.rc))
    }

    /// Closes this handle on the closer thread, never waiting here (a dropped connect).
    pub(crate) fn close_in_background(&self) {
        hand_off_close(&self.inner, None);
    }

    pub(crate) fn client_key(&self) -> u64 {
        self.inner.client
    }

    /// A reference to this handle that does not keep it open: once every `ZooKeeper`
    /// clone is gone the handle closes (ending the session) and
    /// [`WeakZooKeeper::upgrade`] returns `None`. For background work that should run
    /// only as long as someone still uses the session, as `Weak` is for `Arc`.
    ///
    /// ```no_run
    /// # fn main() -> zookeeper_mt::Result<()> {
    /// let zk = zookeeper_mt::ZooKeeper::connect("127.0.0.1:2181", std::time::Duration::from_secs(10))?;
    /// let weak = zk.downgrade();
    /// assert!(weak.upgrade().is_some());
    /// drop(zk);
    /// assert!(weak.upgrade().is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub fn downgrade(&self) -> WeakZooKeeper {
        WeakZooKeeper {
            inner: Arc::downgrade(&self.inner),
            session: Arc::clone(&self.inner.session),
        }
    }

    /// Ends the session in a terminal `state` the C client reached without sending a
    /// session event (a failed SASL authentication): as the global watcher does for
    /// one, the state is recorded first, then pending requests fail and watches get
    /// their final event, then session subscribers hear of it.
    #[cfg_attr(not(feature = "sasl"), allow(dead_code))]
    pub(crate) fn end_session(&self, state: SessionState) {
        let session = &self.inner.session;
        if session.state().is_terminal() {
            return;
        }
        session.on_state(state);
        context::sweep(self.inner.client, SweepReason::Terminal(state));
        session.publish(WatchedEvent {
            event_type: crate::types::EventType::Session,
            state,
            path: String::new(),
        });
    }
}

/// A reference to a [`ZooKeeper`] handle that does not keep it open (see
/// [`ZooKeeper::downgrade`]). `Clone`, `Send` and `Sync`.
#[derive(Clone)]
pub struct WeakZooKeeper {
    inner: std::sync::Weak<Inner>,
    /// Kept so the state can be waited on after the handle is gone.
    #[cfg_attr(not(feature = "sasl"), allow(dead_code))]
    pub(crate) session: Arc<Session>,
}

impl std::fmt::Debug for WeakZooKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeakZooKeeper")
            .field("open", &(self.inner.strong_count() > 0))
            .finish()
    }
}

impl WeakZooKeeper {
    /// The handle, if some `ZooKeeper` clone still keeps it open. A handle closed with
    /// [`ZooKeeper::close`] while clones remain is still returned (its calls fail with
    /// `Closed`).
    pub fn upgrade(&self) -> Option<ZooKeeper> {
        self.inner.upgrade().map(|inner| ZooKeeper { inner })
    }
}

fn close_inner(inner: &Inner) -> Result<()> {
    if crate::raw::inside_raw_call(inner.client) {
        return Err(CLOSE_IN_RAW_CALL);
    }
    if crate::no_wait::here() {
        // On the C completion thread (a waker dropped the last clone or closed one) or
        // inside the final sweep of a close on this thread: never wait here. The closing
        // thread may be joining this very thread, or holding what this would wait for.
        // The close is handed to the closer thread, which takes the handle out of its
        // slot itself, so a handle is never left out of its slot without being closed.
        // It is decided here: later calls fail with `Closed`, as after any close.
        hand_off_close(inner, None);
        return Ok(());
    }
    // The write lock waits for calls running on other threads to leave C; once the handle
    // is out of its slot, later calls fail with `Closed` without touching it. The lock is
    // not held while closing: the final sweep runs wakers, and a waker may call `close`
    // again on this thread.
    let taken = inner.handle.take();
    let Some(handle) = taken else {
        // Closed or being closed elsewhere: return once it is done, as a first close would.
        inner.session.wait_closed();
        return Ok(());
    };
    closer::finish_close(handle, &inner.session, inner.session_context, inner.client)
}

/// Decides the close (later calls fail with `Closed`) and hands it to the closer thread,
/// which takes the handle out of its slot itself, so a handle is never left out of its
/// slot without being closed. `done` gets the outcome once the close has finished.
fn hand_off_close(inner: &Inner, done: Option<Arc<crate::reply::ReplySlot>>) {
    inner.handle.start_closing();
    closer::hand_off(closer::Job {
        slot: Arc::clone(&inner.handle),
        session: Arc::clone(&inner.session),
        session_context: inner.session_context as usize,
        client: inner.client,
        keepalive: Arc::clone(&inner.security),
        done,
    });
}

/// `close` inside `with_raw_handle`'s closure on the same handle.
const CLOSE_IN_RAW_CALL: Error =
    Error::InvalidArgument("close inside with_raw_handle on the same handle would wait for itself");

impl Drop for Inner {
    fn drop(&mut self) {
        // A close already decided is finished where it was decided (a handed-off close on
        // the closer thread): the last clone going must not wait for it. (A blocking close
        // in progress holds a clone, so it cannot be that one.)
        if self.handle.is_closing() {
            return;
        }
        if let Err(error) = close_inner(self) {
            log::debug!("zookeeper-mt: close on drop: {error}");
        }
    }
}
