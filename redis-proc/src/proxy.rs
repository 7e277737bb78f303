//! twemproxy (`nutcracker`, Debian package `nutcracker`) in front of real redis-servers.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, inline_command, unique_dir, RedisServer, StartError};

/// A running `nutcracker` sharding keys over the given servers; killed on drop.
#[derive(Debug)]
pub struct Nutcracker {
    child: Option<Child>,
    port: u16,
    dir: std::path::PathBuf,
}

impl Nutcracker {
    /// Starts nutcracker on a free loopback port in front of `backends` (modula over fnv1a_64).
    ///
    /// `NUTCRACKER_BIN` overrides the binary.
    pub fn try_start(backends: &[&RedisServer]) -> Result<Nutcracker, StartError> {
        Self::try_start_with(backends, free_port)
    }

    /// [`try_start`](Self::try_start) with the listening port taken from `pick`. A port picked
    /// as free can be taken by someone else before nutcracker binds it (tests start servers in
    /// parallel): a start that did not come up is retried a few times on a fresh port, as
    /// [`RedisServer`]'s is.
    fn try_start_with(
        backends: &[&RedisServer],
        mut pick: impl FnMut() -> std::io::Result<u16>,
    ) -> Result<Nutcracker, StartError> {
        let mut last = None;
        for _ in 0..5 {
            match Self::try_start_on(backends, pick().map_err(StartError::Io)?) {
                Ok(n) => return Ok(n),
                Err(e @ StartError::NotFound { .. }) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| StartError::Io(std::io::Error::other("no attempt made"))))
    }

    /// One start on `port`.
    fn try_start_on(backends: &[&RedisServer], port: u16) -> Result<Nutcracker, StartError> {
        let bin = std::env::var("NUTCRACKER_BIN").unwrap_or_else(|_| "nutcracker".into());
        let dir = unique_dir().map_err(StartError::Io)?;
        let mut conf = format!(
            "lockkit:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  distribution: modula\n  \
             redis: true\n  auto_eject_hosts: false\n  timeout: 2000\n  servers:\n"
        );
        for b in backends {
            conf.push_str(&format!("   - 127.0.0.1:{}:1\n", b.port()));
        }
        let conf_path = dir.join("nutcracker.yml");
        let log = dir.join("nutcracker.log");
        std::fs::write(&conf_path, conf).map_err(StartError::Io)?;
        let mut child = Command::new(&bin)
            .arg("-c")
            .arg(&conf_path)
            .arg("-o")
            .arg(&log)
            .arg("-s")
            .arg(free_port().map_err(StartError::Io)?.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| StartError::NotFound {
                bin: bin.clone(),
                source,
            })?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // twemproxy speaks RESP only, not inline commands.
            if let Ok(reply) = inline_command(addr, "*1\r\n$4\r\nPING\r\n") {
                if reply.contains("PONG") {
                    break;
                }
            }
            if Instant::now() > deadline || matches!(child.try_wait(), Ok(Some(_))) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(StartError::NotReady {
                    bin,
                    reason: format!("no PONG on port {port}"),
                    log: std::fs::read_to_string(&log).unwrap_or_default(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Nutcracker {
            child: Some(child),
            port,
            dir,
        })
    }

    /// Starts it or panics with its log (for tests).
    pub fn start(backends: &[&RedisServer]) -> Nutcracker {
        Self::try_start(backends).unwrap_or_else(|e| panic!("redis-proc: {e}"))
    }

    /// The proxy's `redis://127.0.0.1:PORT` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The proxy's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("nutcracker.log")).unwrap_or_default()
    }
}

impl Drop for Nutcracker {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_taken_before_nutcracker_binds_it_is_retried_with_another() {
        let server = RedisServer::start();
        // The race, made certain: the first port picked is taken by someone else meanwhile.
        let taken = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let taken_port = taken.local_addr().unwrap().port();
        let mut picks = vec![taken_port];
        let proxy = Nutcracker::try_start_with(&[&server], || match picks.pop() {
            Some(p) => Ok(p),
            None => free_port(),
        })
        .unwrap_or_else(|e| panic!("no retry after a port clash: {e}"));
        assert_ne!(proxy.port, taken_port);
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, proxy.port));
        assert!(inline_command(addr, "*1\r\n$4\r\nPING\r\n")
            .unwrap()
            .contains("PONG"));
    }
}
