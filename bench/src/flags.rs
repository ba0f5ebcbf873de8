//! A tiny `--name value` / `--switch` command-line parser (no dependency needed).

use std::collections::HashMap;

/// Parsed flags: `--key value` pairs and bare `--switch`es.
#[derive(Debug, Default)]
pub struct Flags {
    values: HashMap<String, String>,
    switches: Vec<String>,
}

impl Flags {
    /// Parses `args`; `switch_names` lists the flags that take no value.
    pub fn parse(args: &[String], switch_names: &[&str]) -> Result<Flags, String> {
        let mut flags = Flags::default();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let name = arg
                .strip_prefix("--")
                .ok_or_else(|| format!("unexpected argument {arg:?}"))?;
            if let Some((key, value)) = name.split_once('=') {
                flags.values.insert(key.to_string(), value.to_string());
            } else if switch_names.contains(&name) {
                flags.switches.push(name.to_string());
            } else {
                let value = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
                flags.values.insert(name.to_string(), value.clone());
            }
        }
        Ok(flags)
    }

    /// Whether `--name` was given.
    pub fn switch(&self, name: &str) -> bool {
        self.switches.iter().any(|s| s == name)
    }

    /// The value of `--name`, if given.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The servers named by `--hosts`, or a quiet throwaway server (no fsync, WARN
    /// logging) kept alive by the returned value.
    pub fn hosts_or_start(
        &self,
    ) -> crate::rust_client::Result<(Option<zk_harness::Server>, String)> {
        if let Some(hosts) = self.get("hosts") {
            return Ok((None, hosts.to_string()));
        }
        let options = zk_harness::ServerOptions::new()
            .force_sync(false)
            .log_level("WARN");
        let server = zk_harness::Server::start_with(&options)?;
        let hosts = server.connect_string();
        Ok((Some(server), hosts))
    }

    /// The value of `--name` parsed as a number, or `default`.
    pub fn num<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{name}: not a number: {v:?}")),
        }
    }

    /// Every flag name given that is not in `known` (to reject typos).
    pub fn unknown(&self, known: &[&str]) -> Vec<String> {
        self.values
            .keys()
            .chain(self.switches.iter())
            .filter(|k| !known.contains(&k.as_str()))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn values_and_switches() {
        let f = Flags::parse(
            &strings(&["--n", "5", "--quick", "--mode=batched"]),
            &["quick"],
        )
        .unwrap();
        assert_eq!(f.num("n", 0u32).unwrap(), 5);
        assert!(f.switch("quick"));
        assert_eq!(f.get("mode"), Some("batched"));
        assert_eq!(f.num("rounds", 3u32).unwrap(), 3);
        assert!(f.unknown(&["n", "quick", "mode"]).is_empty());
        assert_eq!(f.unknown(&["n", "quick"]), vec!["mode".to_string()]);
    }

    #[test]
    fn errors() {
        assert!(Flags::parse(&strings(&["n"]), &[]).is_err());
        assert!(Flags::parse(&strings(&["--n"]), &[]).is_err());
        let f = Flags::parse(&strings(&["--n", "x"]), &[]).unwrap();
        assert!(f.num("n", 0u32).is_err());
    }
}
