//! The recipes' error type: the client's errors plus what a recipe itself can report.

use std::fmt;

/// Shorthand for recipe results.
pub type Result<T, E = RecipeError> = std::result::Result<T, E>;

/// An error from a recipe.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecipeError {
    /// The client (or server) reported an error.
    ZooKeeper(zookeeper::Error),
    /// A blocking call's deadline passed.
    Timeout,
    /// The recipe's own state no longer holds, e.g. a lock lost with its session.
    Lost(&'static str),
    /// Bad input to the recipe (an empty name, a zero batch size, ...).
    InvalidArgument(&'static str),
    /// Data found in ZooKeeper that the recipe did not write (e.g. a counter that is not a number).
    Corrupt(String),
    /// The directory's sequence counter is at its end (see
    /// [`SEQUENCE_LIMIT`](crate::util::SEQUENCE_LIMIT) and
    /// [`NodeOptions::sequence_limit`](crate::NodeOptions::sequence_limit)) and the
    /// directory could not be restarted in time because it is not empty. Nothing was left
    /// behind by the failed call; the next call after the directory has drained restarts
    /// it (a container directory the server removed once empty is created afresh too).
    SequenceExhausted {
        /// The recipe directory.
        dir: String,
    },
}

impl From<zookeeper::Error> for RecipeError {
    fn from(error: zookeeper::Error) -> Self {
        match error {
            zookeeper::Error::Timeout => RecipeError::Timeout,
            other => RecipeError::ZooKeeper(other),
        }
    }
}

impl fmt::Display for RecipeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecipeError::ZooKeeper(error) => write!(f, "zookeeper: {error}"),
            RecipeError::Timeout => f.write_str("timed out"),
            RecipeError::Lost(what) => write!(f, "lost: {what}"),
            RecipeError::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            RecipeError::Corrupt(what) => write!(f, "unexpected data: {what}"),
            RecipeError::SequenceExhausted { dir } => {
                write!(f, "the sequence counter of {dir} is at its end")
            }
        }
    }
}

impl std::error::Error for RecipeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RecipeError::ZooKeeper(error) => Some(error),
            _ => None,
        }
    }
}
