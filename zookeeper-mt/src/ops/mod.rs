//! Every request, in an asynchronous form returning a [`ZkFuture`] and a blocking form
//! that waits on it. Both go through `ZooKeeper::submit`, so sync and async calls share
//! one path, one ordering (the C completion FIFO) and one context discipline.
//!
//! By concern: node data ([`node`]), children ([`children`]), ACLs and auth
//! ([`access`]), sync and configuration ([`config`]), watch removal
//! ([`watch_removal`]); `multi` lives with its operations in [`crate::multi`].

/// The value of a checked argument, or (early) a failed future with its error.
macro_rules! checked {
    ($argument:expr) => {
        match $argument {
            Ok(value) => value,
            Err(error) => return $crate::reply::ZkFuture::failed(error),
        }
    };
}
pub(crate) use checked;

mod access;
mod children;
mod config;
mod node;
mod watch_removal;

pub(crate) use node::create_args;

use crate::error::{Error, Result};
use crate::reply::{Payload, Reply};
use crate::timeout::Version;
use crate::types::{Acl, Stat};
use crate::watch::Watch;
use std::os::raw::{c_char, c_int};

/// Fails with the reply's error, or yields its payload.
#[inline]
pub(crate) fn payload(reply: Reply) -> Result<Payload> {
    Error::check(reply.rc)?;
    Ok(reply.payload)
}

/// A payload of an unexpected shape: a bug in this binding, reported, not panicked on.
pub(crate) fn unexpected<T>(payload: Payload) -> Result<T> {
    log::error!("zookeeper-mt: unexpected completion payload {payload:?}");
    Err(Error::SystemError)
}

pub(crate) fn stat_of(stat: Option<Stat>) -> Result<Stat> {
    match stat {
        Some(stat) => Ok(stat),
        None => Err(Error::SystemError),
    }
}

pub(crate) fn version_of(version: Version) -> c_int {
    version.as_raw()
}

pub(crate) fn data_ptr(data: &[u8]) -> (*const c_char, c_int) {
    if data.is_empty() {
        // An empty value is sent as a zero-length buffer, not a null node.
        (b"".as_ptr() as *const c_char, 0)
    } else {
        (data.as_ptr() as *const c_char, data.len() as c_int)
    }
}

pub(crate) fn watch_of(watch: Option<Watch>) -> Result<Watch> {
    match watch {
        Some(watch) => Ok(watch),
        None => Err(Error::SystemError),
    }
}

/// The server drops the connection on a request above `jute.maxbuffer` (default
/// 0xfffff bytes) instead of answering: refuse such a request before sending it.
pub(crate) const MAX_REQUEST_LEN: usize = 0xfffff;

/// A generous estimate of one (sub)request's serialized size: the strings and data with
/// their length prefixes, plus headers.
pub(crate) fn request_len(path: &str, data: &[u8], acl: &[Acl]) -> usize {
    let acl_len: usize = acl
        .iter()
        .map(|entry| 12 + entry.scheme.len() + entry.id.len())
        .sum();
    64 + path.len() + data.len() + acl_len
}

/// An auth request: scheme and credentials with their length prefixes, plus headers. It
/// travels alone (the C client sends each credential in its own packet, also when it
/// resends them after a reconnect), so it alone must fit the server's limit; that bound
/// also keeps the length within C's `int`.
pub(crate) fn check_auth_len(scheme: &str, credentials_len: usize) -> Result<()> {
    check_request_len(
        64usize
            .saturating_add(scheme.len())
            .saturating_add(credentials_len),
    )
}

pub(crate) fn check_request_len(len: usize) -> Result<()> {
    if len > MAX_REQUEST_LEN {
        return Err(Error::DataTooLarge {
            len,
            max: MAX_REQUEST_LEN,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_credentials_are_bounded_before_c_sees_an_int() {
        assert_eq!(check_auth_len("digest", 1000), Ok(()));
        assert!(matches!(
            check_auth_len("digest", MAX_REQUEST_LEN),
            Err(Error::DataTooLarge {
                max: MAX_REQUEST_LEN,
                ..
            })
        ));
        // Lengths that would wrap or go negative as a C `int` never get through.
        for len in [i32::MAX as usize + 1, u32::MAX as usize + 7, usize::MAX] {
            assert!(
                matches!(
                    check_auth_len("digest", len),
                    Err(Error::DataTooLarge { .. })
                ),
                "{len}"
            );
        }
        assert!(check_auth_len(&"s".repeat(MAX_REQUEST_LEN), 0).is_err());
    }
}
