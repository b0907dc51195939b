//! Keys for `rivoractl watch`: `q` quits, like `top` and `less`, so an
//! operator does not need Ctrl-C (which some terminals and multiplexers
//! swallow) to leave the live view.
//!
//! The decision is a pure function ([`action`]) so it is tested without a
//! terminal. [`KeyReader`] puts a terminal stdin into non-canonical,
//! no-echo mode (so one key press arrives without Enter and is not printed
//! over the view) and restores the saved mode when dropped, whatever way
//! `watch` ends. When stdin is not a terminal it is read as it is: a `q` in
//! a pipe still quits, and end of input (`</dev/null`) changes nothing.

use std::io::{IsTerminal, Read};
use std::os::fd::AsRawFd;

use tokio::sync::mpsc;

/// What a key read from stdin means to `watch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyAction {
    /// Stop watching and exit successfully.
    Quit,
    /// Not a key `watch` knows: ignored.
    Ignore,
}

/// The meaning of one input byte: `q`, `Q`, and the bytes a terminal in
/// non-signal mode sends for Ctrl-C (ETX) and Ctrl-D (EOT) quit; every
/// other byte is ignored.
pub fn action(byte: u8) -> KeyAction {
    match byte {
        b'q' | b'Q' | 0x03 | 0x04 => KeyAction::Quit,
        _ => KeyAction::Ignore,
    }
}

/// Reads stdin on its own thread and reports [`KeyAction::Quit`]; holds
/// the terminal's saved mode and restores it on drop.
pub struct KeyReader {
    saved: Option<libc::termios>,
    quit: mpsc::UnboundedReceiver<()>,
}

impl KeyReader {
    /// Starts reading stdin. On a terminal, switches it to non-canonical,
    /// no-echo mode first (ISIG stays on, so Ctrl-C still raises SIGINT,
    /// which `watch` handles as a normal stop).
    pub fn start() -> KeyReader {
        let stdin = std::io::stdin();
        let saved = if stdin.is_terminal() {
            enter_key_mode(stdin.as_raw_fd())
        } else {
            None
        };
        let (tx, quit) = mpsc::unbounded_channel();
        // A plain thread, not spawn_blocking: a read blocked on a quiet
        // terminal must not keep the runtime from shutting down.
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = [0u8; 64];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => return, // end of input: keep watching
                    Ok(n) => {
                        if buf[..n].iter().any(|&b| action(b) == KeyAction::Quit) {
                            let _ = tx.send(());
                            return;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
        });
        KeyReader { saved, quit }
    }

    /// Resolves when a quitting key was read (never, if none is).
    pub async fn quit(&mut self) {
        if self.quit.recv().await.is_none() {
            std::future::pending::<()>().await
        }
    }
}

impl Drop for KeyReader {
    fn drop(&mut self) {
        if let Some(t) = self.saved.take() {
            // SAFETY: restoring a termios read from the same descriptor.
            unsafe { libc::tcsetattr(std::io::stdin().as_raw_fd(), libc::TCSANOW, &t) };
        }
    }
}

/// Switches `fd` to non-canonical, no-echo mode; returns the mode to
/// restore, or None (and changes nothing) if the terminal refuses.
fn enter_key_mode(fd: i32) -> Option<libc::termios> {
    // SAFETY: termios is plain data; tcgetattr fills it or fails.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    if unsafe { libc::tcgetattr(fd, &mut t) } != 0 {
        return None;
    }
    let saved = t;
    t.c_lflag &= !(libc::ICANON | libc::ECHO);
    t.c_cc[libc::VMIN] = 1;
    t.c_cc[libc::VTIME] = 0;
    if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &t) } != 0 {
        return None;
    }
    Some(saved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q_and_control_keys_quit_everything_else_is_ignored() {
        for b in [b'q', b'Q', 0x03, 0x04] {
            assert_eq!(action(b), KeyAction::Quit, "{b:#x}");
        }
        for b in [b'a', b'\n', b' ', 0x1b, b'x', 0] {
            assert_eq!(action(b), KeyAction::Ignore, "{b:#x}");
        }
    }
}
