//! The address of the server a handle's socket is connected to, read on the completion
//! thread when a session event reports the connection.

use zookeeper_mt_sys as sys;

/// The peer address of the C client's socket (`zookeeper_get_connected_host`).
///
/// # Safety
/// `zh` is a live handle; called on the completion thread for the session event that
/// reported the connection, right after the IO thread made it.
pub(crate) unsafe fn peer_of(zh: *mut sys::zhandle_t) -> Option<std::net::SocketAddr> {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: live handle (contract); `storage`/`len` describe a writable buffer large
    // enough for any address; C fills it or returns NULL.
    let found = unsafe {
        sys::zookeeper_get_connected_host(
            zh,
            &mut storage as *mut _ as *mut libc::sockaddr,
            &mut len,
        )
    };
    if found.is_null() {
        return None;
    }
    socket_addr(&storage)
}

fn socket_addr(storage: &libc::sockaddr_storage) -> Option<std::net::SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which it is large
            // enough and aligned for.
            let v4 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::from((
                Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr)),
                u16::from_be(v4.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let v6 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::from((
                Ipv6Addr::from(v6.sin6_addr.s6_addr),
                u16::from_be(v6.sin6_port),
            )))
        }
        _ => None,
    }
}
