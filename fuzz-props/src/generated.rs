//! Generated inputs for plain `cargo test` loops.

use crate::closed_handle::closed_handle;
use crate::error_codes::check_error_code;
use crate::paths::{check_path, path_input};
use crate::requests::{request_input, FRAGMENTS};

/// xorshift64*: a tiny deterministic generator for the plain-test loops.
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (0 is replaced).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }

    /// A random path-like string: pieces of `FRAGMENTS` and random scalar values.
    pub fn path(&mut self) -> String {
        let mut out = String::new();
        for _ in 0..self.next_u64() % 10 {
            let r = self.next_u64();
            if r & 3 == 0 {
                // Any scalar value, weighted towards the BMP edges the server checks.
                let c = match r % 3 {
                    0 => (r >> 8) % 0x100,
                    1 => (r >> 8) % 0x1_0000,
                    _ => (r >> 8) % 0x11_0000,
                } as u32;
                out.push(char::from_u32(c).unwrap_or('\u{fffd}'));
            } else {
                out.push_str(FRAGMENTS[(r >> 8) as usize % FRAGMENTS.len()]);
            }
        }
        out
    }
}

/// Iterations for the plain-test loops: `ZK_FUZZ_ITERS` or `default`.
pub fn iterations(default: u64) -> u64 {
    std::env::var("ZK_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `n` generated inputs through each property; returns the inputs tried per
/// property (path, error code, request).
pub fn run_generated(n: u64, seed: u64) -> (u64, u64, u64) {
    let mut rng = Rng::new(seed);
    for _ in 0..n {
        check_path(&rng.path());
        let len = (rng.next_u64() % 48) as usize;
        path_input(&rng.bytes(len));
    }
    // Every code near the defined range, then random ones.
    let mut codes = 0;
    for code in -200..=10 {
        check_error_code(code);
        codes += 1;
    }
    for code in [i32::MIN, i32::MIN + 1, -1000, 1000, i32::MAX] {
        check_error_code(code);
        codes += 1;
    }
    for _ in 0..n {
        check_error_code(rng.next_u64() as i32);
        codes += 1;
    }
    let zk = closed_handle();
    for _ in 0..n {
        let len = (rng.next_u64() % 160) as usize;
        request_input(zk, &rng.bytes(len));
    }
    assert_eq!(zk.live_contexts(), 0);
    (2 * n, codes, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requests::call_counts;

    #[test]
    fn generated_inputs_hold_every_property() {
        let n = iterations(100_000);
        let (paths, codes, requests) = run_generated(n, 0x5eed_0001);
        let (reached, rejected) = call_counts();
        println!(
            "fuzz loops: {paths} paths, {codes} error codes, {requests} request inputs \
             ({reached} calls passed validation, {rejected} rejected with a typed error)"
        );
    }
}
