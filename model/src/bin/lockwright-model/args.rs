//! The command line: the subcommands, their options, and the model configuration the
//! options describe.

use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use lockwright_engine::SharedLimit;
use lockwright_model::{Config, Rate};

/// Checks Lockwright's lock rules in a stateright model, or serves the stateright Explorer
/// to browse it.
#[derive(Parser, Debug)]
#[command(name = "lockwright-model", version)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Checks the model: exhaustive breadth-first search (the default), depth-first search,
    /// or random simulation.
    ///
    /// Prints progress, the unique state count, states per second and a verdict per
    /// property; a violated property is shown as a numbered trace. Exit status: 0 when every
    /// `always` property holds (and, exhaustively, every `sometimes` one is reached), 1
    /// otherwise, 2 for bad arguments.
    #[command(args_override_self = true)]
    Check {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        search: Search,
        /// Stop after SECS (simulation default 10; exhaustive: none).
        #[arg(long, value_name = "SECS")]
        timeout: Option<u64>,
    },
    /// Serves the stateright Explorer on http://127.0.0.1:P to browse the state space
    /// (symmetry reduction off, so client numbers stay stable).
    #[command(args_override_self = true)]
    Explore {
        #[command(flatten)]
        model: ModelArgs,
        /// The Explorer's port on 127.0.0.1.
        #[arg(long, value_name = "P", default_value_t = 3000)]
        port: u16,
    },
    /// Lists the engine's mutants, one `name kind modelled|unmodelled` line each (builds
    /// with `--cfg lockwright_mutants` only; scripts/mutants reads it).
    ListMutants,
}

/// How `check` searches.
#[derive(clap::Args, Debug)]
#[group(multiple = false)]
#[command(next_help_heading = "Search (one of)")]
pub(crate) struct Search {
    /// Exhaustive breadth-first search (the default).
    #[arg(long)]
    pub(crate) bfs: bool,
    /// Exhaustive depth-first search.
    #[arg(long)]
    pub(crate) dfs: bool,
    /// Random simulation from SEED, for --timeout seconds (default 10).
    #[arg(long, value_name = "SEED")]
    pub(crate) simulate: Option<u64>,
}

/// A configuration to start from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Preset {
    /// 2 clients, 1 resource, 4 ticks, pauses, crashes and writes (checked in CI).
    Faults,
    /// 2 clients, 2 resources, 4 ticks, no pauses, crashes or writes (checked in CI).
    Ci,
    /// As `faults` with 3 clients: about 0.6 M unique states.
    Three,
    /// 2 clients, 1 resource, 5 ticks, no pauses, crashes or writes, takeover grace 1 ms,
    /// store members' clocks 1 ms apart, up to 2 failovers, a purge that checks its groups
    /// again (checked in CI).
    Skew,
    /// 2 clients, 1 resource, 5 ticks, no pauses, crashes or writes, plain and fair
    /// requests (places in the queue live 2 ms), leaving the queue, dying while waiting
    /// (checked in CI).
    Fair,
    /// 2 clients, 1 resource, 4 ticks, no pauses, crashes or writes, plain and fair
    /// requests, and wakes: a lock handed to a place is told to its waiter late, twice or
    /// out of order, and trusted by the Locker's rule (checked in CI).
    Wakes,
    /// 2 candidates of an election on 1 resource, 4 ticks: campaigns (fair exclusive
    /// requests), resigns, proclaims (late ones too), no crashes (checked in CI).
    Election,
    /// The candidates of `election` without proclaims, 3 ticks, and an observer that reads
    /// who leads twice, answered in either order (checked in CI).
    Observe,
}

/// A shared limit, or none.
#[derive(Clone, Copy, Debug)]
struct Limit(Option<u32>);

fn parse_limit(value: &str) -> Result<Limit, String> {
    if value == "none" {
        return Ok(Limit(None));
    }
    value
        .parse()
        .map(|n| Limit(Some(n)))
        .map_err(|_| format!("`{value}` is not a number or `none`"))
}

fn parse_rate(value: &str) -> Result<Rate, String> {
    value
        .trim()
        .parse()
        .map_err(|e: lockwright_model::ConfigError| e.to_string())
}

/// The model and the checker, shared by `check` and `explore`. Defaults: the `faults`
/// preset; the options change it.
#[derive(clap::Args, Debug)]
#[command(next_help_heading = "Model options (defaults: the `faults` preset)")]
pub(crate) struct ModelArgs {
    /// Start from a configuration; the options below change it.
    #[arg(long, value_enum, value_name = "NAME", default_value_t = Preset::Faults)]
    preset: Preset,
    /// Clients (1-8), all with slow clocks unless --rates.
    #[arg(long, value_name = "N")]
    clients: Option<usize>,
    /// Resources r0.. (1-8).
    #[arg(long, value_name = "M")]
    resources: Option<usize>,
    /// Real time runs 0..=T ms.
    #[arg(long, value_name = "T")]
    ticks: Option<u64>,
    /// TTL of every lock and renewal, in ms (default 3).
    #[arg(long, value_name = "MS")]
    ttl: Option<u64>,
    /// Shared limit of every slock (default 1).
    #[arg(long, value_name = "N|none", value_parser = parse_limit)]
    limit: Option<Limit>,
    /// The store's renew margin, in ms (default 1).
    #[arg(long, value_name = "MS")]
    renew_margin: Option<u64>,
    /// The holders' drift margin, in ms (default: what the clock rates need).
    #[arg(long, value_name = "MS")]
    margin: Option<u64>,
    /// Clock rate per client: slow (2/3), normal, fast (4/3) or NUM/DEN (default: all
    /// slow); one rate is used for every client.
    #[arg(long, value_name = "R,R,..", value_delimiter = ',', value_parser = parse_rate)]
    rates: Option<Vec<Rate>>,
    /// Clients make fair requests too (queue places, tickets, leaving, dying while
    /// waiting; default: off; on with --preset fair).
    #[arg(long, overrides_with = "no_fair")]
    fair: bool,
    /// Clients make no fair requests.
    #[arg(long)]
    no_fair: bool,
    /// The lease of a place in a queue, in ms (default 2).
    #[arg(long, value_name = "MS")]
    queue_ttl: Option<u64>,
    /// At most N grants per resource per ms (default 2).
    #[arg(long, value_name = "N")]
    grants_per_ms: Option<u64>,
    /// The store's takeover grace, in ms: an expired lock blocks other grants and purge
    /// until it has been expired this long (default 0; 1 with --preset skew).
    #[arg(long, value_name = "MS")]
    grace: Option<u64>,
    /// How far apart the store members' clocks are, in ms: a failover makes the store's clock
    /// jump this far forward or back (default 0: no failovers; 1 with --preset skew).
    #[arg(long, value_name = "MS")]
    skew: Option<u64>,
    /// At most N failovers per run (default 2; only with --skew above 0).
    #[arg(long, value_name = "N")]
    failovers: Option<u8>,
    /// A purge checks again, as it finishes, which of its groups still hold an abandoned
    /// lock, as MongoDB's does (default: off; on with --preset skew).
    #[arg(long, overrides_with = "no_purge_rechecks")]
    purge_rechecks: bool,
    /// A purge removes the groups it found without checking them again.
    #[arg(long)]
    no_purge_rechecks: bool,
    /// Clients may pause.
    #[arg(long, overrides_with = "no_pauses")]
    pauses: bool,
    /// Clients may not pause.
    #[arg(long)]
    no_pauses: bool,
    /// Clients may crash and restart with a new lock id.
    #[arg(long, overrides_with = "no_crashes")]
    crashes: bool,
    /// Clients may not crash.
    #[arg(long)]
    no_crashes: bool,
    /// Holders write to the fenced downstream store.
    #[arg(long, overrides_with = "no_writes")]
    writes: bool,
    /// Holders do not write to the fenced downstream store.
    #[arg(long)]
    no_writes: bool,
    /// No symmetry reduction over clients with equal clock rates.
    #[arg(long)]
    no_symmetry: bool,
    /// Checker threads (default: available cores).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
}

/// `Some(true)` for `--X`, `Some(false)` for `--no-X`, `None` for neither.
fn toggle(on: bool, off: bool) -> Option<bool> {
    if on {
        Some(true)
    } else if off {
        Some(false)
    } else {
        None
    }
}

impl ModelArgs {
    /// The configuration these options describe, checked.
    pub(crate) fn config(&self) -> Result<Config, String> {
        let mut config = match self.preset {
            Preset::Faults => Config::ci_faults(),
            Preset::Ci => Config::ci(),
            Preset::Three => Config::three_clients(),
            Preset::Skew => Config::ci_skew(),
            Preset::Fair => Config::ci_fair(),
            Preset::Wakes => Config::ci_wakes(),
            Preset::Election => Config::ci_election(),
            Preset::Observe => Config::ci_observe(),
        };
        if let Some(n) = self.clients {
            config.rates = vec![Rate::SLOW; n];
        }
        if let Some(rates) = &self.rates {
            let n = config.rates.len();
            config.rates = match rates.len() {
                1 => vec![rates[0]; n],
                k if k == n => rates.clone(),
                k => {
                    return Err(format!(
                        "--rates: {k} rates given for {n} clients (give one, or one per client)"
                    ));
                }
            };
        }
        if let Some(r) = self.resources {
            config.resources = r;
        }
        if let Some(t) = self.ticks {
            config.ticks = t;
        }
        if let Some(ttl) = self.ttl {
            config.ttl = lockwright_engine::Ttl::new(Duration::from_millis(ttl))
                .map_err(|e| format!("--ttl: {e}"))?;
        }
        if let Some(Limit(limit)) = self.limit {
            config.shared_limit = limit
                .map(SharedLimit::new)
                .transpose()
                .map_err(|e| format!("--limit: {e}"))?;
        }
        if let Some(m) = self.renew_margin {
            config.renew_margin = Duration::from_millis(m);
        }
        config.drift_margin =
            Duration::from_millis(self.margin.unwrap_or(config.required_drift_margin()));
        if let Some(g) = self.grants_per_ms {
            if g == 0 {
                return Err("--grants-per-ms must be at least 1".into());
            }
            config.grants_per_ms = g;
        }
        if let Some(g) = self.grace {
            config.grace = Duration::from_millis(g);
        }
        if let Some(s) = self.skew {
            config.skew = s;
        }
        if let Some(n) = self.failovers {
            config.failovers = n;
        }
        config.purge_rechecks =
            toggle(self.purge_rechecks, self.no_purge_rechecks).unwrap_or(config.purge_rechecks);
        config.fair = toggle(self.fair, self.no_fair).unwrap_or(config.fair);
        if let Some(q) = self.queue_ttl {
            config.queue_ttl = lockwright_engine::Ttl::new(Duration::from_millis(q))
                .map_err(|e| format!("--queue-ttl: {e}"))?;
        }
        config.pauses = toggle(self.pauses, self.no_pauses).unwrap_or(config.pauses);
        config.crashes = toggle(self.crashes, self.no_crashes).unwrap_or(config.crashes);
        config.writes = toggle(self.writes, self.no_writes).unwrap_or(config.writes);
        config.symmetry = !self.no_symmetry;
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }

    /// Checker threads: as asked, or the available cores.
    pub(crate) fn threads(&self) -> Result<usize, String> {
        match self.threads {
            Some(0) => Err("--threads must be at least 1".into()),
            Some(n) => Ok(n),
            None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
        }
    }
}
