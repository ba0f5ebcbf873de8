//! History files: one per process, appended line by line, read back together.

use super::*;

// ------------------------------------------------------------------------------------
// Files

/// Appends events to a history file, one line each, shared safely by several processes.
///
/// The file is opened with `O_APPEND` and every event is written with one `write(2)` of
/// the whole line, so lines of concurrent writers do not interleave, and a line is in the
/// file (the page cache) once [`write`](Self::write) returns: a writer killed right after
/// loses nothing. Nothing is buffered in the process.
#[derive(Debug)]
pub struct HistoryWriter {
    pub(super) file: fs::File,
    pub(super) path: PathBuf,
}

impl HistoryWriter {
    /// Opens (creating if needed) `path` for appending.
    pub fn append_to(path: impl AsRef<Path>) -> io::Result<HistoryWriter> {
        let path = path.as_ref().to_path_buf();
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        Ok(HistoryWriter { file, path })
    }

    /// The file written to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one event.
    pub fn write(&mut self, event: &Event) -> io::Result<()> {
        let mut line = event.to_line();
        line.push('\n');
        // One write of the whole line: O_APPEND makes it atomic with respect to other
        // appenders' writes on a local file system.
        let n = self.file.write(line.as_bytes())?;
        if n != line.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!(
                    "short write to {} ({n} of {})",
                    self.path.display(),
                    line.len()
                ),
            ));
        }
        Ok(())
    }

    /// Appends one typed record.
    pub fn record<R: Record>(&mut self, record: &R) -> io::Result<()> {
        self.write(&record.to_event())
    }
}

/// Reads a history file. Empty lines are skipped. A last line without a newline that
/// does not parse is skipped too (a writer killed in the middle of a line); any other
/// bad line is an error naming the file and line.
pub fn read_history(path: impl AsRef<Path>) -> Result<Vec<Event>, HistoryError> {
    let path = path.as_ref();
    let text = fs::read_to_string(path).map_err(|e| HistoryError {
        file: Some(path.to_path_buf()),
        line: None,
        message: format!("cannot read: {e}"),
    })?;
    parse_history(&text).map_err(|e| e.in_file(path))
}

/// Reads several history files (one per process, typically) into one list, file by
/// file. Each process's events keep their order.
pub fn read_histories<P: AsRef<Path>>(paths: &[P]) -> Result<Vec<Event>, HistoryError> {
    let mut all = Vec::new();
    for path in paths {
        all.extend(read_history(path)?);
    }
    Ok(all)
}

/// Parses history text (the content of a history file); see [`read_history`].
pub fn parse_history(text: &str) -> Result<Vec<Event>, HistoryError> {
    let mut events = Vec::new();
    let torn = !text.is_empty() && !text.ends_with('\n');
    let count = text.lines().count();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match Event::parse_line(line) {
            Ok(event) => events.push(event),
            Err(_) if torn && i + 1 == count => {}
            Err(e) => return Err(e.at_line(i + 1)),
        }
    }
    Ok(events)
}

/// A typed history record, stored as one [`Event`] of kind [`KIND`](Self::KIND).
pub trait Record: Sized {
    /// The `event=` value of this record's lines.
    const KIND: &'static str;
    /// The record as an event.
    fn to_event(&self) -> Event;
    /// The record from an event of kind [`KIND`](Self::KIND).
    fn from_event(event: &Event) -> Result<Self, HistoryError>;
}

/// Every record of type `R` among `events` (other kinds are skipped), in order.
pub fn records<R: Record>(events: &[Event]) -> Result<Vec<R>, HistoryError> {
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind() == R::KIND)
        .map(|(i, e)| {
            R::from_event(e).map_err(|mut err| {
                err.message = format!("event #{} ({e}): {}", i + 1, err.message);
                err
            })
        })
        .collect()
}
