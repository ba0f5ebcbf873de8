//! Coordination recipes built on the safe client (work in progress).
