//! One error type for everything the client can report: every `ZOO_*` code the C client
//! or the server returns, plus what the binding itself rejects before calling C.

use std::ffi::CStr;
use std::fmt;
use zookeeper_mt_sys as sys;

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error from the server, the C client, or the binding's own checks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    // --- system errors (ZSYSTEMERROR range) ---
    /// ZSYSTEMERROR
    SystemError,
    /// ZRUNTIMEINCONSISTENCY: in a multi, an operation that was not executed because
    /// another one failed.
    RuntimeInconsistency,
    /// ZDATAINCONSISTENCY
    DataInconsistency,
    /// ZCONNECTIONLOSS: the connection dropped; the request may or may not have been applied.
    ConnectionLoss,
    /// ZMARSHALLINGERROR
    MarshallingError,
    /// ZUNIMPLEMENTED (e.g. TTL nodes on a server without extended types)
    Unimplemented,
    /// ZOPERATIONTIMEOUT
    OperationTimeout,
    /// ZBADARGUMENTS
    BadArguments,
    /// ZINVALIDSTATE
    InvalidState,
    /// ZNEWCONFIGNOQUORUM
    NewConfigNoQuorum,
    /// ZRECONFIGINPROGRESS
    ReconfigInProgress,
    /// ZSSLCONNECTIONERROR
    SslConnectionError,
    // --- API errors (ZAPIERROR range) ---
    /// ZAPIERROR
    ApiError,
    /// ZNONODE
    NoNode,
    /// ZNOAUTH
    NoAuth,
    /// ZBADVERSION
    BadVersion,
    /// ZNOCHILDRENFOREPHEMERALS
    NoChildrenForEphemerals,
    /// ZNODEEXISTS
    NodeExists,
    /// ZNOTEMPTY
    NotEmpty,
    /// ZSESSIONEXPIRED: terminal; open a new session.
    SessionExpired,
    /// ZINVALIDCALLBACK
    InvalidCallback,
    /// ZINVALIDACL
    InvalidAcl,
    /// ZAUTHFAILED: terminal; open a new session.
    AuthFailed,
    /// ZCLOSING
    Closing,
    /// ZNOTHING
    Nothing,
    /// ZSESSIONMOVED
    SessionMoved,
    /// ZNOTREADONLY
    NotReadOnly,
    /// ZEPHEMERALONLOCALSESSION
    EphemeralOnLocalSession,
    /// ZNOWATCHER
    NoWatcher,
    /// ZRECONFIGDISABLED
    ReconfigDisabled,
    /// ZSESSIONCLOSEDREQUIRESASLAUTH
    SessionClosedRequireSaslAuth,
    /// ZTHROTTLEDOP: not executed; retry.
    ThrottledOp,
    /// A code this binding does not know (a newer C client or server).
    Unknown(i32),

    // --- binding errors: rejected before reaching C ---
    /// The path breaks the server's rules; `reason` says which.
    InvalidPath {
        /// The offending path (lossy if it was not valid UTF-8).
        path: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A string argument (host list, scheme, ACL id) contains a NUL byte.
    InteriorNul(&'static str),
    /// Node data above the server's default `jute.maxbuffer`.
    DataTooLarge {
        /// Length of the rejected data.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// An argument outside its domain (TTL of zero, an empty host list, ...).
    InvalidArgument(&'static str),
    /// The host list could not be resolved (`zookeeper_init` returned NULL).
    Unresolvable {
        /// The host list given.
        hosts: String,
        /// The OS error, as text.
        os_error: String,
    },
    /// Waiting (for a connection, a lock, ...) exceeded its deadline.
    Timeout,
    /// The handle was closed; no call can be made on it any more.
    Closed,
    /// The handle already had `limit` requests in flight. Nothing was sent; retryable.
    /// No longer returned by this client's requests, which are queued for room instead
    /// (see the crate docs' "Backpressure"); kept so that code matching it still builds.
    TooManyInFlight {
        /// The bound on requests in flight per handle.
        limit: usize,
    },
    /// One operation of a multi failed; nothing in the multi was applied.
    MultiFailed {
        /// Index of the first failing operation.
        index: usize,
        /// Its error.
        error: Box<Error>,
    },
}

/// Every `ZOO_*` error code and its variant: the one table both directions read.
static CODES: [(i32, Error); 32] = [
    (sys::ZSYSTEMERROR, Error::SystemError),
    (sys::ZRUNTIMEINCONSISTENCY, Error::RuntimeInconsistency),
    (sys::ZDATAINCONSISTENCY, Error::DataInconsistency),
    (sys::ZCONNECTIONLOSS, Error::ConnectionLoss),
    (sys::ZMARSHALLINGERROR, Error::MarshallingError),
    (sys::ZUNIMPLEMENTED, Error::Unimplemented),
    (sys::ZOPERATIONTIMEOUT, Error::OperationTimeout),
    (sys::ZBADARGUMENTS, Error::BadArguments),
    (sys::ZINVALIDSTATE, Error::InvalidState),
    (sys::ZNEWCONFIGNOQUORUM, Error::NewConfigNoQuorum),
    (sys::ZRECONFIGINPROGRESS, Error::ReconfigInProgress),
    (sys::ZSSLCONNECTIONERROR, Error::SslConnectionError),
    (sys::ZAPIERROR, Error::ApiError),
    (sys::ZNONODE, Error::NoNode),
    (sys::ZNOAUTH, Error::NoAuth),
    (sys::ZBADVERSION, Error::BadVersion),
    (
        sys::ZNOCHILDRENFOREPHEMERALS,
        Error::NoChildrenForEphemerals,
    ),
    (sys::ZNODEEXISTS, Error::NodeExists),
    (sys::ZNOTEMPTY, Error::NotEmpty),
    (sys::ZSESSIONEXPIRED, Error::SessionExpired),
    (sys::ZINVALIDCALLBACK, Error::InvalidCallback),
    (sys::ZINVALIDACL, Error::InvalidAcl),
    (sys::ZAUTHFAILED, Error::AuthFailed),
    (sys::ZCLOSING, Error::Closing),
    (sys::ZNOTHING, Error::Nothing),
    (sys::ZSESSIONMOVED, Error::SessionMoved),
    (sys::ZNOTREADONLY, Error::NotReadOnly),
    (
        sys::ZEPHEMERALONLOCALSESSION,
        Error::EphemeralOnLocalSession,
    ),
    (sys::ZNOWATCHER, Error::NoWatcher),
    (sys::ZRECONFIGDISABLED, Error::ReconfigDisabled),
    (
        sys::ZSESSIONCLOSEDREQUIRESASLAUTH,
        Error::SessionClosedRequireSaslAuth,
    ),
    (sys::ZTHROTTLEDOP, Error::ThrottledOp),
];

impl Error {
    /// Maps a C return code; `ZOK` maps to `None`.
    pub fn from_code(code: i32) -> Option<Error> {
        if code == sys::ZOK {
            return None;
        }
        Some(
            CODES
                .iter()
                .find(|(c, _)| *c == code)
                .map_or(Error::Unknown(code), |(_, error)| error.clone()),
        )
    }

    /// Turns a C return code into a `Result`.
    #[inline]
    pub(crate) fn check(code: i32) -> Result<()> {
        if code == sys::ZOK {
            return Ok(());
        }
        match Error::from_code(code) {
            None => Ok(()),
            Some(error) => Err(error),
        }
    }

    /// The C code of this error, if it came from the C client or the server.
    pub fn code(&self) -> Option<i32> {
        if let Error::Unknown(code) = self {
            return Some(*code);
        }
        CODES
            .iter()
            .find(|(_, error)| error == self)
            .map(|(code, _)| *code)
    }

    /// The request may or may not have been applied: the connection dropped first.
    ///
    /// Includes `RuntimeInconsistency`: the C client reports it for every pending request
    /// when a reply arrives out of order (a reply went missing), after which it drops the
    /// connection and reconnects, exactly as on a connection loss.
    pub fn is_connection_loss(&self) -> bool {
        matches!(
            self,
            Error::ConnectionLoss | Error::OperationTimeout | Error::RuntimeInconsistency
        )
    }

    /// The session is gone for good (expired, auth failed or closed): open a new one.
    pub fn is_session_terminal(&self) -> bool {
        matches!(
            self,
            Error::SessionExpired | Error::AuthFailed | Error::Closed | Error::Closing
        )
    }

    /// Worth retrying as is, on the same session (connection loss, throttling).
    pub fn is_retryable(&self) -> bool {
        self.is_connection_loss()
            || matches!(
                self,
                Error::ThrottledOp | Error::SessionMoved | Error::TooManyInFlight { .. }
            )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidPath { path, reason } => write!(f, "invalid path {path:?}: {reason}"),
            Error::InteriorNul(what) => write!(f, "{what} contains a NUL byte"),
            Error::DataTooLarge { len, max } => {
                write!(f, "data of {len} bytes exceeds the {max}-byte limit")
            }
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::Unresolvable { hosts, os_error } => {
                write!(f, "cannot use host list {hosts:?}: {os_error}")
            }
            Error::Timeout => f.write_str("timed out"),
            Error::Closed => f.write_str("the ZooKeeper handle is closed"),
            Error::TooManyInFlight { limit } => write!(
                f,
                "{limit} requests already in flight on this handle and none finished in time; nothing was sent"
            ),
            Error::MultiFailed { index, error } => {
                write!(f, "multi operation {index} failed: {error}")
            }
            other => {
                let code = other.code().unwrap_or(sys::ZSYSTEMERROR);
                // SAFETY: zerror returns a pointer to a static NUL-terminated string for
                // every int, known or not.
                let text = unsafe { CStr::from_ptr(sys::zerror(code)) };
                write!(f, "{} ({code})", text.to_string_lossy())
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::MultiFailed { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_code_round_trips() {
        for code in (-130..=0).chain([-1000, 7]) {
            match Error::from_code(code) {
                None => assert_eq!(code, sys::ZOK),
                Some(error) => assert_eq!(error.code(), Some(code), "{error:?}"),
            }
        }
    }

    #[test]
    fn display_uses_the_c_text() {
        assert_eq!(Error::NoNode.to_string(), "no node (-101)");
        assert!(Error::Unknown(-999).to_string().contains("-999"));
        assert_eq!(Error::Closed.to_string(), "the ZooKeeper handle is closed");
    }
}
