//! The checks over what the observer recorded: overlapping trusted intervals, fence
//! regressions, and how the clients recovered after each failover.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::driver::Failover;
use crate::observer::{Holding, resource_name};
use crate::report::{Recovery, Report};

/// Violations of one check: how many, and the first few, described.
#[derive(Default)]
pub(crate) struct Found {
    pub(crate) count: usize,
    pub(crate) examples: Vec<String>,
    /// For overlaps: the longest time two conflicting holders both trusted their locks.
    pub(crate) longest: Duration,
}

impl Found {
    pub(crate) fn add(&mut self, what: impl FnOnce() -> String) {
        self.count += 1;
        if self.examples.len() < 10 {
            self.examples.push(what());
        }
    }
}

impl Report<'_> {
    pub(crate) fn by_resource(&self) -> BTreeMap<usize, Vec<&Holding>> {
        let mut map: BTreeMap<usize, Vec<&Holding>> = BTreeMap::new();
        for h in &self.obs.holdings {
            map.entry(h.resource).or_default().push(h);
        }
        map
    }

    /// Exclusive intervals overlapping anything, and shared ones above the limit.
    pub(crate) fn overlaps(&self) -> Found {
        let mut found = Found::default();
        for (r, holdings) in self.by_resource() {
            let mut events: Vec<(Instant, bool, usize)> = Vec::new();
            for (i, h) in holdings.iter().enumerate() {
                if h.trusted() {
                    events.push((h.start, true, i));
                    events.push((h.end, false, i));
                }
            }
            // At one instant, ends before starts: touching intervals do not overlap.
            events.sort_by_key(|&(t, start, i)| (t, start, i));
            let mut active: Vec<usize> = Vec::new();
            for (_, start, i) in events {
                if !start {
                    active.retain(|&a| a != i);
                    continue;
                }
                let b = holdings[i];
                let conflict = active
                    .iter()
                    .find(|&&a| b.exclusive || holdings[a].exclusive);
                let shared = active.iter().filter(|&&a| !holdings[a].exclusive).count();
                if let Some(&a) = conflict {
                    let both = b
                        .end
                        .min(holdings[a].end)
                        .saturating_duration_since(b.start);
                    found.longest = found.longest.max(both);
                    found.add(|| {
                        format!(
                            "{}: {} overlaps {}",
                            resource_name(r),
                            self.describe(b),
                            self.describe(holdings[a])
                        )
                    });
                } else if !b.exclusive && shared + 1 > self.args.shared_limit as usize {
                    let first_end = active.iter().map(|&a| holdings[a].end).min();
                    let both = first_end.map_or(Duration::ZERO, |e| {
                        b.end.min(e).saturating_duration_since(b.start)
                    });
                    found.longest = found.longest.max(both);
                    found.add(|| {
                        format!(
                            "{}: {} is shared holder {} (limit {})",
                            resource_name(r),
                            self.describe(b),
                            shared + 1,
                            self.args.shared_limit
                        )
                    });
                }
                active.push(i);
            }
        }
        found
    }

    /// Grants whose fence is out of order: a duplicate; not above a grant returned before
    /// it was sent; or not above an earlier-starting grant when one of the two is exclusive
    /// and it was trusted at all.
    pub(crate) fn fence_regressions(&self) -> Found {
        let mut found = Found::default();
        for (r, holdings) in self.by_resource() {
            let mut bad: BTreeMap<usize, String> = BTreeMap::new();
            let mut seen: HashMap<u64, usize> = HashMap::new();
            for (i, h) in holdings.iter().enumerate() {
                if let Some(&j) = seen.get(&h.fence) {
                    bad.entry(i).or_insert_with(|| {
                        format!("the same fence as {}", self.describe(holdings[j]))
                    });
                } else {
                    seen.insert(h.fence, i);
                }
            }
            // Real-time order: A returned before B was sent => A.fence < B.fence.
            let mut by_start: Vec<usize> = (0..holdings.len()).collect();
            by_start.sort_by_key(|&i| holdings[i].start);
            let mut by_sent: Vec<usize> = (0..holdings.len()).collect();
            by_sent.sort_by_key(|&i| holdings[i].sent);
            let (mut j, mut max): (usize, Option<usize>) = (0, None);
            for &b in &by_sent {
                while j < by_start.len() && holdings[by_start[j]].start < holdings[b].sent {
                    let a = by_start[j];
                    if max.is_none_or(|m| holdings[a].fence > holdings[m].fence) {
                        max = Some(a);
                    }
                    j += 1;
                }
                if let Some(a) = max.filter(|&a| holdings[a].fence >= holdings[b].fence) {
                    bad.entry(b).or_insert_with(|| {
                        format!(
                            "not above {}, returned before it was sent",
                            self.describe(holdings[a])
                        )
                    });
                }
            }
            // Trusted-interval order where one of the two is exclusive.
            let (mut max_all, mut max_excl): (Option<usize>, Option<usize>) = (None, None);
            for &b in &by_start {
                let hb = holdings[b];
                let bound = if hb.exclusive { max_all } else { max_excl };
                if hb.trusted()
                    && let Some(a) = bound.filter(|&a| holdings[a].fence >= hb.fence)
                {
                    bad.entry(b).or_insert_with(|| {
                        format!(
                            "not above {}, which started first",
                            self.describe(holdings[a])
                        )
                    });
                }
                if max_all.is_none_or(|m| hb.fence > holdings[m].fence) {
                    max_all = Some(b);
                }
                if hb.exclusive && max_excl.is_none_or(|m| hb.fence > holdings[m].fence) {
                    max_excl = Some(b);
                }
            }
            for (b, why) in bad {
                found.add(|| {
                    format!(
                        "{}: {} is {why}",
                        resource_name(r),
                        self.describe(holdings[b])
                    )
                });
            }
        }
        found
    }

    /// For each failover that happened, how the clients recovered; and the clients that
    /// made no grant after the last one.
    pub(crate) fn recovery(&self) -> (Vec<Recovery>, Vec<usize>) {
        let mut starts: Vec<Vec<Instant>> = vec![Vec::new(); self.args.clients];
        for h in &self.obs.holdings {
            starts[h.client].push(h.start);
        }
        for s in &mut starts {
            s.sort();
        }
        let ok: Vec<&Failover> = self
            .failovers
            .iter()
            .filter(|f| f.member.is_some())
            .collect();
        let mut rows = Vec::new();
        for (k, f) in ok.iter().enumerate() {
            let next = ok.get(k + 1).map(|n| n.at);
            let firsts: Vec<Option<Instant>> = starts
                .iter()
                .map(|s| s.iter().copied().find(|&t| t > f.at))
                .collect();
            let first_any = firsts.iter().flatten().min().map(|t| *t - f.at);
            let late = firsts
                .iter()
                .filter(|t| match (t, next) {
                    (None, _) => true,
                    (Some(t), Some(n)) => *t >= n,
                    (Some(_), None) => false,
                })
                .count();
            let all = if late == 0 {
                firsts.iter().flatten().max().map(|t| *t - f.at)
            } else {
                None
            };
            rows.push(Recovery {
                first: first_any,
                all,
                late,
            });
        }
        let never: Vec<usize> = match ok.last() {
            Some(f) => (0..self.args.clients)
                .filter(|&c| !starts[c].iter().any(|&t| t > f.at))
                .collect(),
            None => (0..self.args.clients)
                .filter(|&c| starts[c].is_empty())
                .collect(),
        };
        (rows, never)
    }
}
