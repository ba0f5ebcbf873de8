//! Error codes round-trip.

use zookeeper_mt::Error;

/// Property for one C code: round trip, `Display` and predicates.
pub fn check_error_code(code: i32) {
    match Error::from_code(code) {
        None => assert_eq!(code, 0, "only ZOK maps to no error"),
        Some(error) => {
            assert_eq!(error.code(), Some(code), "{error:?} does not round-trip");
            let text = error.to_string();
            assert!(!text.is_empty());
            if let Error::Unknown(c) = error {
                assert_eq!(c, code);
                assert!(text.contains(&code.to_string()), "{text}");
            }
            if error.is_connection_loss() {
                assert!(error.is_retryable());
            }
            let _ = error.is_session_terminal();
        }
    }
}

/// Fuzz entry: the first four bytes (little endian, zero-padded) as a C code.
pub fn error_code_input(data: &[u8]) {
    let mut bytes = [0u8; 4];
    for (dst, src) in bytes.iter_mut().zip(data) {
        *dst = *src;
    }
    check_error_code(i32::from_le_bytes(bytes));
}
