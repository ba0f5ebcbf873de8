//! Changing the server list of a live handle: both calls race the C client's IO thread
//! (see their safety contracts), so they are `unsafe`.

use crate::client::ZooKeeper;
use crate::error::{Error, Result};
use crate::path::c_string;
use zookeeper_mt_sys as sys;

impl ZooKeeper {
    /// Replaces the server list (`zoo_set_servers`); the client may move to rebalance.
    ///
    /// To follow membership changes without this call, give host *names* in the
    /// connect string: the C client re-resolves them on its own IO thread (see
    /// [`ZooKeeperBuilder::resolution_delay`](crate::ZooKeeperBuilder::resolution_delay)), where no race exists.
    ///
    /// # Safety
    ///
    /// In the C client this binding links (3.8), `zoo_set_servers` frees and replaces
    /// the host string and the address list, and may close the socket, while the
    /// client's IO thread uses them without the lock that guards them (ZOOKEEPER-4699,
    /// fixed upstream in 3.9.4): on a connection failure or reconnect at that moment the
    /// IO thread reads freed memory (a heap use-after-free AddressSanitizer reports
    /// within seconds when the call is repeated while the client reconnects), or
    /// reads or writes a socket descriptor number that has been closed and reused.
    /// No lock or check on the Rust side can exclude this: the IO thread takes none
    /// this binding could hold, and when it reconnects is up to the network.
    ///
    /// The caller must therefore make sure the C client's IO thread is not
    /// connecting, reconnecting or handling a connection error for the duration of the
    /// call, or accept the risk of memory corruption. Every other method of this type
    /// is safe.
    ///
    /// Safe code cannot make the call:
    ///
    /// ```compile_fail,E0133
    /// fn move_to(zk: &zookeeper_mt::ZooKeeper, hosts: &str) -> zookeeper_mt::Result<()> {
    ///     zk.set_servers(hosts) // error[E0133]: call to unsafe function
    /// }
    /// ```
    pub unsafe fn set_servers(&self, hosts: &str) -> Result<()> {
        if hosts.trim().is_empty() {
            return Err(Error::InvalidArgument("empty host list"));
        }
        let hosts = c_string(hosts, "host list")?;
        // SAFETY: live handle; `hosts` is NUL-terminated and copied by C. The race with
        // the IO thread (ZOOKEEPER-4699) is the caller's to exclude, per the contract.
        Error::check(self.with_handle(|zh| unsafe { sys::zoo_set_servers(zh, hosts.as_ptr()) })?)
    }

    /// Moves to the next server in the list on the next reconnect (`zoo_cycle_next_server`).
    ///
    /// # Safety
    ///
    /// `zoo_cycle_next_server` advances the address list's cursor and rewrites the
    /// current address under the C client's reconfiguration lock, but the IO thread
    /// advances and reads the same fields without it when a connection fails: a data
    /// race that can make the IO thread connect to a torn address or read one entry
    /// past the end of the address list. As for [`set_servers`](Self::set_servers),
    /// the caller must make sure the IO thread is not connecting, reconnecting or
    /// handling a connection error for the duration of the call.
    ///
    /// ```compile_fail,E0133
    /// fn cycle(zk: &zookeeper_mt::ZooKeeper) -> zookeeper_mt::Result<()> {
    ///     zk.cycle_next_server() // error[E0133]: call to unsafe function
    /// }
    /// ```
    pub unsafe fn cycle_next_server(&self) -> Result<()> {
        // SAFETY: live handle; the race with the IO thread is the caller's to exclude.
        self.with_handle(|zh| unsafe { sys::zoo_cycle_next_server(zh) })
    }
}
