//! How a state prints in traces: the store's clock, each client's clock, lock id, beliefs and
//! wait, the store's documents and queues, the downstream store and a begun purge.

use std::fmt;

use lockwright_engine::LockId;

use crate::state::{LockState, mode_word, parse_ticket, value_word};

impl fmt::Display for LockState {
    /// A compact, readable picture: time, each client, the store, the downstream store.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "real time {} ms", self.now)?;
        if self.offset > 0 || self.failovers > 0 {
            write!(
                f,
                ", store clock {} ms (offset +{}, {} failover(s))",
                self.store_now(),
                self.offset,
                self.failovers
            )?;
        }
        writeln!(f)?;
        for (i, c) in self.clients.iter().enumerate() {
            write!(
                f,
                "  c{i} [{} clock, local {} ms, lock id {}{}]",
                c.rate,
                self.local(i),
                self.lock_id_of(i).as_str(),
                if c.paused { ", PAUSED" } else { "" }
            )?;
            let held: Vec<String> = c
                .beliefs
                .iter()
                .enumerate()
                .filter_map(|(r, b)| {
                    b.map(|b| format!("r{r} {} fence {}", mode_word(b.mode), b.fence))
                })
                .collect();
            match c.trust_until {
                Some(t) if !held.is_empty() => write!(
                    f,
                    " believes it holds {} (trusts while local < {t})",
                    held.join(", ")
                )?,
                _ => write!(f, " believes it holds nothing")?,
            }
            if let Some(w) = c.wait {
                write!(
                    f,
                    "; waits for r{} {} (wait #{})",
                    w.resource,
                    mode_word(w.mode),
                    w.ticket
                )?;
            }
            if c.value > 0 {
                write!(f, "; proclaims {}", value_word(c.value))?;
            }
            if let Some(w) = c.write {
                write!(
                    f,
                    "; write to r{} with fence {} in flight",
                    w.resource, w.fence
                )?;
            }
            writeln!(f)?;
        }
        write!(f, "  store:")?;
        if self.table.resources().is_empty() {
            write!(f, " empty")?;
        }
        let grace = u64::try_from(self.table.takeover_grace().as_millis()).unwrap_or(u64::MAX);
        for (name, state) in self.table.resources() {
            write!(f, " {name}[counter {}:", state.last_fence)?;
            if state.is_empty() {
                write!(f, " no locks")?;
            }
            for (mode, lock) in state.locks() {
                if let Some(value) = &lock.holder.comment {
                    write!(f, " (value {value})")?;
                }
                write!(
                    f,
                    " {} {} fence {} created {} expires {}{}",
                    mode_word(mode),
                    lock.lock_id.as_str(),
                    lock.fence,
                    lock.created_at.as_millis(),
                    lock.expires_at
                        .map_or_else(|| "never".to_string(), |e| e.as_millis().to_string()),
                    match lock.expires_at.map(|e| e.as_millis()) {
                        Some(e) if e + grace <= self.store_now() => " (expired)",
                        Some(e) if e <= self.store_now() => " (expired, held for the grace)",
                        _ => "",
                    }
                )?;
            }
            for e in &state.queue {
                let owner = parse_ticket(&e.ticket)
                    .map_or_else(|| "?".to_string(), |(c, n)| format!("c{c} wait #{n}"));
                write!(
                    f,
                    "; queued: {owner} {} since {} lapses {}{}",
                    mode_word(e.mode),
                    e.queued_at.as_millis(),
                    e.expires_at.as_millis(),
                    if e.expires_at.as_millis() <= self.store_now() {
                        " (lapsed)"
                    } else {
                        ""
                    }
                )?;
            }
            write!(f, "]")?;
        }
        writeln!(f)?;
        if let Some(p) = &self.purge {
            let groups: Vec<&str> = p.groups.iter().map(LockId::as_str).collect();
            writeln!(
                f,
                "  purge in flight: at {} ms, groups [{}]",
                p.at,
                groups.join(", ")
            )?;
        }
        let accepted: Vec<String> = self
            .downstream
            .iter()
            .enumerate()
            .filter_map(|(r, f)| f.map(|f| format!("r{r} <= fence {f}")))
            .collect();
        if !accepted.is_empty() {
            writeln!(f, "  downstream accepted: {}", accepted.join(", "))?;
        }
        let o = &self.observing;
        if o.highest.is_some() || o.reads.iter().any(Option::is_some) {
            let reads: Vec<String> = (o.reads.iter().flatten())
                .map(|r| {
                    r.as_ref()
                        .map_or("nobody".into(), |fence| format!("fence {fence}"))
                })
                .collect();
            writeln!(
                f,
                "  observer: reported up to fence {}; reads in flight: [{}]",
                o.highest.map_or("-".into(), |h| h.to_string()),
                reads.join(", ")
            )?;
        }
        Ok(())
    }
}
