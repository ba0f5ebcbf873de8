//! Ported seed examples and cross-crate tests live in examples/ and tests/.
