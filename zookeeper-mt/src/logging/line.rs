//! Parsing one line of the C client's log: `time:pid(tid):ZOO_LEVEL@func@line: message`.

use log::Level;

/// The parts of one C log line.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct CLine<'a> {
    /// The level the C client logged at.
    pub(super) c_level: Level,
    pub(super) function: &'a str,
    pub(super) line: u32,
    pub(super) message: &'a str,
    /// `zk retcode=N` of a socket error line.
    pub(super) retcode: Option<i32>,
    /// The session id of "session establishment complete ..., sessionId=0x...".
    pub(super) announced_session: Option<i64>,
}

impl<'a> CLine<'a> {
    /// Parses `text`; a line of another shape is a DEBUG message as it is.
    pub(super) fn parse(text: &'a str) -> CLine<'a> {
        let mut parsed = CLine {
            c_level: Level::Debug,
            function: "",
            line: 0,
            message: text,
            retcode: None,
            announced_session: None,
        };
        if let Some((_, rest)) = text.split_once(":ZOO_") {
            let mut parts = rest.splitn(3, '@');
            if let (Some(level), Some(function), Some(tail)) =
                (parts.next(), parts.next(), parts.next())
            {
                if let Some((line, message)) = tail.split_once(": ") {
                    parsed.c_level = match level {
                        "ERROR" => Level::Error,
                        "WARN" => Level::Warn,
                        "INFO" => Level::Info,
                        _ => Level::Debug,
                    };
                    parsed.function = function;
                    parsed.line = line.parse().unwrap_or(0);
                    parsed.message = message;
                }
            }
        }
        parsed.retcode =
            number_after(parsed.message, "zk retcode=").and_then(|n| i32::try_from(n).ok());
        if parsed.message.starts_with("session establishment complete") {
            parsed.announced_session = hex_after(parsed.message, "sessionId=");
        }
        parsed
    }

    /// The level to report at: routine connection trouble the client rides out
    /// (ZCONNECTIONLOSS -4, ZOPERATIONTIMEOUT -7: a connect or read time-out) and a session
    /// the server expired (ZSESSIONEXPIRED -112, which the application learns from its
    /// session events) are WARN, not the C client's ERROR.
    pub(super) fn level(&self) -> Level {
        match (self.c_level, self.retcode) {
            (Level::Error, Some(-4 | -7 | -112)) => Level::Warn,
            (level, _) => level,
        }
    }
}

fn number_after(text: &str, key: &str) -> Option<i64> {
    let (_, rest) = text.split_once(key)?;
    let end = rest
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
        .map_or(rest.len(), |(i, _)| i);
    rest[..end].parse().ok()
}

fn hex_after(text: &str, key: &str) -> Option<i64> {
    let (_, rest) = text.split_once(key)?;
    let rest = rest.strip_prefix("0x").unwrap_or(rest);
    let end = rest
        .find(|c: char| !c.is_ascii_hexdigit())
        .unwrap_or(rest.len());
    u64::from_str_radix(&rest[..end], 16)
        .ok()
        .map(|id| id as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_a_line_and_reads_the_session() {
        let line = CLine::parse(
            "2026-12-01 22:50:01,123:4242(0x7f00aa):ZOO_INFO@check_events@2862: session \
             establishment complete on server 127.0.0.1:2181, sessionId=0x1000a2b3c4d0005, \
             negotiated timeout=10000 ",
        );
        assert_eq!(line.c_level, Level::Info);
        assert_eq!(line.function, "check_events");
        assert_eq!(line.line, 2862);
        assert!(line.message.starts_with("session establishment complete"));
        assert_eq!(line.announced_session, Some(0x1000a2b3c4d0005));
    }

    #[test]
    fn routine_connection_errors_are_warnings() {
        let lost = CLine::parse(
            "t:1(0x2):ZOO_ERROR@handle_socket_error_msg@2062: Socket 127.0.0.1:2181 zk \
             retcode=-4, errno=112(Host is down): failed while receiving a server response",
        );
        assert_eq!((lost.c_level, lost.retcode), (Level::Error, Some(-4)));
        assert_eq!(lost.level(), Level::Warn);
        let timed_out = CLine::parse(
            "t:1(0x2):ZOO_ERROR@handle_socket_error_msg@2062: Socket 127.0.0.1:2181 zk \
             retcode=-7, errno=110(Connection timed out): connection to 127.0.0.1:2181 timed out",
        );
        assert_eq!(timed_out.level(), Level::Warn);
        let tls = CLine::parse(
            "t:1(0x2):ZOO_ERROR@handle_socket_error_msg@2062: Socket x zk retcode=-15, \
             errno=0(Success): error in ssl connect",
        );
        assert_eq!((tls.level(), tls.retcode), (Level::Error, Some(-15)));
        let other = CLine::parse("t:1(0x2):ZOO_ERROR@zookeeper_init@1200: out of memory");
        assert_eq!(other.level(), Level::Error);
    }

    #[test]
    fn a_line_of_another_shape_is_kept_whole() {
        let line = CLine::parse("no structure here");
        assert_eq!(line.level(), Level::Debug);
        assert_eq!(line.message, "no structure here");
        assert_eq!(line.function, "");
    }
}
