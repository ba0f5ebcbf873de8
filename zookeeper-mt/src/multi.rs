//! `multi`: its operations, their results, and the submission (buffers C writes the
//! results into, kept alive until the completion).

use crate::client::ZooKeeper;
use crate::context::{self, MultiBuffers};
use crate::error::{Error, Result};
use crate::ops::{check_request_len, checked, create_args, data_ptr, request_len, unexpected};
use crate::path::{c_path, check_data};
use crate::reply::{Payload, ZkFuture};
use crate::timeout::Version;
use crate::types::{Acl, CreateMode, CreateOptions, Stat};
use std::borrow::Cow;
use std::os::raw::c_int;
use zookeeper_mt_sys as sys;

/// `acl`, borrowed if it is one of the constants (no allocation).
fn acl_of(acl: &[Acl]) -> Cow<'static, [Acl]> {
    [Acl::OPEN_UNSAFE, Acl::READ_UNSAFE, Acl::CREATOR_ALL]
        .into_iter()
        .find(|common| *common == acl)
        .map_or_else(|| Cow::Owned(acl.to_vec()), Cow::Borrowed)
}

/// One operation of a multi (all succeed or none is applied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create a node.
    Create {
        /// Path (may end in `/` for sequential modes).
        path: String,
        /// Data.
        data: Vec<u8>,
        /// ACL (borrowed when it is one of the [`Acl`] constants).
        acl: Cow<'static, [Acl]>,
        /// Mode (TTL and container modes are not supported inside a multi by the C client).
        mode: CreateMode,
    },
    /// Delete a node at `version`.
    Delete {
        /// Path.
        path: String,
        /// Expected version.
        version: Version,
    },
    /// Set a node's data at `version`.
    SetData {
        /// Path.
        path: String,
        /// New data.
        data: Vec<u8>,
        /// Expected version.
        version: Version,
    },
    /// Fail the multi unless the node is at `version` ([`Version::Any`]: unless it exists).
    Check {
        /// Path.
        path: String,
        /// Expected version.
        version: Version,
    },
}

impl Op {
    /// `Create` with `options` (a [`CreateMode`] alone: the open ACL).
    pub fn create<'a>(path: &str, data: &[u8], options: impl Into<CreateOptions<'a>>) -> Op {
        let options = options.into();
        Op::Create {
            path: path.into(),
            data: data.into(),
            acl: acl_of(options.acl),
            mode: options.mode,
        }
    }

    /// `Delete`.
    pub fn delete(path: &str, version: impl Into<Version>) -> Op {
        Op::Delete {
            path: path.into(),
            version: version.into(),
        }
    }

    /// `SetData`.
    pub fn set_data(path: &str, data: &[u8], version: impl Into<Version>) -> Op {
        Op::SetData {
            path: path.into(),
            data: data.into(),
            version: version.into(),
        }
    }

    /// `Check`.
    pub fn check(path: &str, version: impl Into<Version>) -> Op {
        Op::Check {
            path: path.into(),
            version: version.into(),
        }
    }
}

/// What one successful operation of a multi produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// The created node's path (with its sequence suffix, if any).
    Created(String),
    /// Deleted.
    Deleted,
    /// The node's new `Stat`.
    DataSet(Stat),
    /// The check held.
    Checked,
}

// ---------------------------------------------------------------------------------------
// Submission.

impl ZooKeeper {
    /// Runs `ops` atomically: all are applied or none. On failure the error is
    /// `MultiFailed { index, error }` naming the first failing operation (or a session
    /// error such as `ConnectionLoss` if the multi never got an answer).
    pub fn multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        self.multi_async(ops).wait()
    }

    /// Async [`multi`](Self::multi).
    pub fn multi_async(&self, ops: &[Op]) -> ZkFuture<Vec<OpResult>> {
        let mut buffers = checked!(multi_buffers(ops));
        let kinds: Vec<OpKind> = ops.iter().map(OpKind::of).collect();
        let count = ops.len() as c_int;
        let ops_ptr = SendPtr(buffers.ops.as_ptr().cast_mut());
        let results_ptr = SendPtr(buffers.results.as_mut_ptr());
        self.request().keeping(buffers).send(
            move |zh, _, request, _args| {
                // SAFETY: live handle; `ops_ptr`/`results_ptr` point into the heap buffers
                // of the `MultiBuffers` now owned by the request's registry entry, which
                // lives until the completion has run (or close), as C requires.
                unsafe {
                    sys::zoo_amulti(
                        zh,
                        count,
                        ops_ptr.get().cast_const(),
                        results_ptr.get(),
                        Some(context::multi_completion),
                        request,
                    )
                }
            },
            move |reply, _| {
                let Payload::Multi(outcomes) = reply.payload else {
                    Error::check(reply.rc)?;
                    return unexpected(reply.payload);
                };
                if reply.rc != sys::ZOK {
                    let whole = Error::from_code(reply.rc).unwrap_or(Error::SystemError);
                    if !is_per_op_error(&whole) {
                        // The multi as a whole got no answer (connection loss, expiry,
                        // close...): report that, so `is_connection_loss()` etc. hold.
                        return Err(whole);
                    }
                    let failed = outcomes
                        .iter()
                        .position(|o| o.rc != sys::ZOK && o.rc != sys::ZRUNTIMEINCONSISTENCY);
                    return Err(match failed {
                        Some(index) => Error::MultiFailed {
                            index,
                            error: Box::new(
                                Error::from_code(outcomes[index].rc).unwrap_or(Error::SystemError),
                            ),
                        },
                        None => Error::from_code(reply.rc).unwrap_or(Error::SystemError),
                    });
                }
                Ok(outcomes
                    .into_iter()
                    .zip(kinds)
                    .map(|(outcome, kind)| match kind {
                        OpKind::Create => OpResult::Created(outcome.path.unwrap_or_default()),
                        OpKind::Delete => OpResult::Deleted,
                        OpKind::SetData => OpResult::DataSet(outcome.stat.unwrap_or_default()),
                        OpKind::Check => OpResult::Checked,
                    })
                    .collect())
            },
        )
    }
}

#[derive(Clone, Copy)]
enum OpKind {
    Create,
    Delete,
    SetData,
    Check,
}

impl OpKind {
    fn of(op: &Op) -> OpKind {
        match op {
            Op::Create { .. } => OpKind::Create,
            Op::Delete { .. } => OpKind::Delete,
            Op::SetData { .. } => OpKind::SetData,
            Op::Check { .. } => OpKind::Check,
        }
    }
}

/// Longest path C may write back for a created node: the request path plus a
/// 10-digit sequence suffix and its NUL (plus slack).
fn created_path_capacity(path: &str) -> usize {
    path.len() + 32
}

/// Validates `ops` and lays out everything `zoo_amulti` reads and writes.
fn multi_buffers(ops: &[Op]) -> Result<Box<MultiBuffers>> {
    if ops.is_empty() {
        return Err(Error::InvalidArgument(
            "a multi needs at least one operation",
        ));
    }
    if ops.len() > i32::MAX as usize {
        return Err(Error::InvalidArgument("too many operations"));
    }
    let mut buffers = Box::new(MultiBuffers {
        // SAFETY: zoo_op_t is a plain C struct/union for which all-zero is a valid value;
        // each one is initialised by a zoo_*_op_init call below.
        ops: (0..ops.len())
            .map(|_| unsafe { std::mem::zeroed() })
            .collect(),
        // SAFETY: zoo_op_result_t is plain data; all-zero is valid (C fills it in).
        results: (0..ops.len())
            .map(|_| unsafe { std::mem::zeroed() })
            .collect(),
        path_buffers: Vec::with_capacity(ops.len()),
        stats: vec![sys::Stat::default(); ops.len()],
        _keep_alive: Vec::new(),
    });
    // Fill the path buffers first: pointers into them are taken below, after which no
    // vector in `buffers` may reallocate.
    for op in ops {
        let capacity = match op {
            Op::Create { path, .. } => created_path_capacity(path),
            _ => 0,
        };
        buffers.path_buffers.push(vec![0; capacity]);
    }
    let MultiBuffers {
        ops: c_ops,
        path_buffers,
        stats,
        _keep_alive: keep,
        ..
    } = &mut *buffers;
    for (index, op) in ops.iter().enumerate() {
        let c_op: *mut sys::zoo_op_t = &mut c_ops[index];
        match op {
            Op::Create {
                path,
                data,
                acl,
                mode,
            } => {
                if matches!(
                    mode,
                    CreateMode::PersistentWithTtl(_) | CreateMode::PersistentSequentialWithTtl(_)
                ) {
                    return Err(Error::InvalidArgument(
                        "the C client has no TTL create inside a multi",
                    ));
                }
                if *mode == CreateMode::Container {
                    // The server answers a container create inside a multi with a
                    // Create2Response (path + Stat) but the 3.8.0 C client parses a
                    // CreateResponse (path only), loses sync and aborts the process
                    // (`deserialize_multi: Assertion 'entry' failed`).
                    return Err(Error::InvalidArgument(
                        "the C client cannot create a container inside a multi",
                    ));
                }
                let mut args = create_args(path, data, acl, *mode)?;
                let (value, len) = data_ptr(data);
                let vector = Box::new(args.acl.as_vector());
                let buffer = &mut path_buffers[index];
                // SAFETY: every pointer is to memory owned by `buffers` (kept in
                // `_keep_alive` or its vectors) or by `ops`, which outlive the submission;
                // the path buffer stays owned by `buffers` until the completion.
                unsafe {
                    sys::zoo_create_op_init(
                        c_op,
                        args.path.as_ptr(),
                        value,
                        len,
                        &*vector,
                        args.mode,
                        buffer.as_mut_ptr(),
                        buffer.len() as c_int,
                    )
                };
                keep.push(Box::new(args.path));
                keep.push(Box::new(args.acl));
                keep.push(Box::new(SendBox(vector)));
            }
            Op::Delete { path, version } => {
                let path = c_path(path, false)?;
                // SAFETY: `c_op` is ours; the path is kept alive in `_keep_alive`.
                unsafe { sys::zoo_delete_op_init(c_op, path.as_ptr(), version.as_raw()) };
                keep.push(Box::new(path));
            }
            Op::SetData {
                path,
                data,
                version,
            } => {
                let path = c_path(path, false)?;
                check_data(data)?;
                let (value, len) = data_ptr(data);
                let stat: *mut sys::Stat = &mut stats[index];
                // SAFETY: `c_op` and `stat` are ours and outlive the completion; path and
                // data are valid through the submission, where C serializes them.
                unsafe {
                    sys::zoo_set_op_init(c_op, path.as_ptr(), value, len, version.as_raw(), stat)
                };
                keep.push(Box::new(path));
            }
            Op::Check { path, version } => {
                let path = c_path(path, false)?;
                // SAFETY: `c_op` is ours; the path is kept alive in `_keep_alive`.
                unsafe { sys::zoo_check_op_init(c_op, path.as_ptr(), version.as_raw()) };
                keep.push(Box::new(path));
            }
        }
    }
    let total: usize = ops
        .iter()
        .map(|op| match op {
            Op::Create {
                path, data, acl, ..
            } => request_len(path, data, acl),
            Op::SetData { path, data, .. } => request_len(path, data, &[]),
            Op::Delete { path, .. } | Op::Check { path, .. } => request_len(path, &[], &[]),
        })
        .sum();
    check_request_len(total)?;
    Ok(buffers)
}

/// An `ACL_vector` (raw pointers) owned by `MultiBuffers`.
struct SendBox(#[allow(dead_code)] Box<sys::ACL_vector>);

// SAFETY: it points into a `CAcl` owned by the same `MultiBuffers`.
unsafe impl Send for SendBox {}

/// Errors the server reports for one operation of a multi (the others then read
/// `RuntimeInconsistency`); anything else concerns the request as a whole.
fn is_per_op_error(error: &Error) -> bool {
    matches!(
        error,
        Error::NoNode
            | Error::NoAuth
            | Error::BadVersion
            | Error::NoChildrenForEphemerals
            | Error::NodeExists
            | Error::NotEmpty
            | Error::InvalidAcl
            | Error::EphemeralOnLocalSession
            | Error::BadArguments
            | Error::Unimplemented
    )
}

/// A pointer into a multi's `MultiBuffers`, moved with the request when it is queued.
#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);

impl<T> SendPtr<T> {
    /// The pointer (a method, so a closure captures the whole `SendPtr`).
    fn get(self) -> *mut T {
        self.0
    }
}

// SAFETY: the pointers point into heap buffers owned by the `MultiBuffers` that travels
// with the same request (a moved `Box` keeps its heap address); only the one thread that
// sends the request uses them, after which C owns them until the completion.
unsafe impl<T> Send for SendPtr<T> {}
