//! ACLs and authentication.

use super::*;
use crate::acl::CAcl;
use crate::client::ZooKeeper;
use crate::context;
use crate::error::{Error, Result};
use crate::path::{c_string, validate_path};
use crate::reply::{Payload, ZkFuture};
use crate::timeout::Version;
use crate::types::{Acl, Stat};
use zookeeper_mt_sys as sys;

impl ZooKeeper {
    /// The node's ACL and `Stat`.
    pub fn get_acl(&self, path: &str) -> Result<(Vec<Acl>, Stat)> {
        self.get_acl_async(path).wait()
    }

    /// Async [`get_acl`](Self::get_acl).
    pub fn get_acl_async(&self, path: &str) -> ZkFuture<(Vec<Acl>, Stat)> {
        checked!(validate_path(path, false));
        self.request().at(path).send(
            move |zh, _, request, args| {
                // SAFETY: live handle; path valid for the call; ours is the completion.
                unsafe { sys::zoo_aget_acl(zh, args.path, Some(context::acl_completion), request) }
            },
            |reply, _| match payload(reply)? {
                Payload::Acl(acl, stat) => Ok((acl, stat_of(stat)?)),
                other => unexpected(other),
            },
        )
    }

    /// Replaces the node's ACL at ACL `version` (`None`: any).
    pub fn set_acl(&self, path: &str, acl: &[Acl], version: impl Into<Version>) -> Result<()> {
        self.set_acl_async(path, acl, version).wait()
    }

    /// Async [`set_acl`](Self::set_acl).
    pub fn set_acl_async(
        &self,
        path: &str,
        acl: &[Acl],
        version: impl Into<Version>,
    ) -> ZkFuture<()> {
        let version = version.into();
        if acl.is_empty() {
            return ZkFuture::failed(Error::InvalidAcl);
        }
        checked!(validate_path(path, false));
        let mut acl = checked!(CAcl::new(acl));
        self.request().at(path).send(
            move |zh, _, request, args| {
                let mut vector = acl.as_vector();
                // SAFETY: live handle; path and ACL valid for the call and serialized by C
                // before it returns; ours is the completion.
                unsafe {
                    sys::zoo_aset_acl(
                        zh,
                        args.path,
                        version_of(version),
                        &mut vector,
                        Some(context::void_completion),
                        request,
                    )
                }
            },
            |reply, _| payload(reply).map(drop),
        )
    }

    /// Adds credentials to the session (`zoo_add_auth`), e.g. `("digest", b"user:pass")`.
    /// Wrong credentials for a scheme the server checks end the session (`AuthFailed`).
    ///
    /// The outcome is delivered like every other reply: on the completion thread, after
    /// the replies and session events that came before it. (The C client reports an
    /// auth's outcome on its IO thread, and at a connection loss with its own lock held,
    /// where no user code may run: the binding records it there and reports it with the
    /// reply to a harmless `exists("/")` sent right behind the credentials.)
    /// `ConnectionLoss` means the outcome is unknown: the C client keeps the credentials
    /// and sends them again after every reconnect.
    ///
    /// Scheme and credentials above the server's default request limit (`jute.maxbuffer`,
    /// 0xfffff bytes) fail with `DataTooLarge` before anything is sent: the server would
    /// drop the connection instead of answering, and the C client, which resends every
    /// credential after each reconnect, would reconnect in a loop until the session
    /// expired.
    pub fn add_auth(&self, scheme: &str, credentials: &[u8]) -> Result<()> {
        self.add_auth_async(scheme, credentials).wait()
    }

    /// Async [`add_auth`](Self::add_auth).
    pub fn add_auth_async(&self, scheme: &str, credentials: &[u8]) -> ZkFuture<()> {
        checked!(check_auth_len(scheme, credentials.len()));
        let scheme = checked!(c_string(scheme, "auth scheme").and_then(|scheme| {
            if scheme.as_bytes().is_empty() {
                Err(Error::InvalidArgument("empty auth scheme"))
            } else {
                Ok(scheme)
            }
        }));
        // In range of `c_int`: checked above.
        // The auth's own outcome: nobody polls it, so filling it (on the IO thread) runs
        // no user code.
        let scheme_text = scheme.to_string_lossy().into_owned();
        let mut auth = self.request().sending(credentials).send(
            move |zh, _, request, args| {
                // SAFETY: live handle; scheme and credentials are copied by C before it
                // returns (it keeps them to resend on reconnect), `len` is their true
                // length (bounded above, so no `int` truncation); ours is the completion.
                let rc = unsafe {
                    sys::zoo_add_auth(
                        zh,
                        scheme.as_ptr(),
                        args.data,
                        args.len,
                        Some(context::auth_completion),
                        request,
                    )
                };
                // Between connections (state 0) C refuses with ZINVALIDSTATE, where every
                // other call is queued or fails with ZCONNECTIONLOSS: retryable, say so.
                match crate::request::terminal_code(zh, rc) {
                    sys::ZINVALIDSTATE => sys::ZCONNECTIONLOSS,
                    rc => rc,
                }
            },
            |reply, _| payload(reply).map(drop),
        );
        let early = auth.try_now();
        if let Some(Err(error)) = early {
            return ZkFuture::failed(error);
        }
        // C has the credentials now and sends them with every reconnect: so does a new
        // session made like this one.
        self.record_auth(&scheme_text, credentials);
        // C queues the credentials in front of every request not yet sent, and the server
        // answers in order: this reply comes after the auth's, on the completion thread.
        self.request().send(
            move |zh, _, request, _args| {
                // SAFETY: live handle; the path is a static NUL-terminated string; no
                // watch; ours is the completion.
                unsafe {
                    sys::zoo_aexists(
                        zh,
                        c"/".as_ptr(),
                        0,
                        Some(context::stat_completion),
                        request,
                    )
                }
            },
            move |reply, _| match early.or_else(|| auth.try_now()) {
                Some(outcome) => outcome,
                // The connection went before the auth was answered.
                None if matches!(reply.rc, sys::ZOK | sys::ZNONODE) => Err(Error::ConnectionLoss),
                None => Err(Error::from_code(reply.rc).unwrap_or(Error::ConnectionLoss)),
            },
        )
    }
}
